"""Spark's offsets of a Kafka source, read in one place.

Spark writes them as JSON, ``{"<topic>": {"<partition>": offset}}``: in a
query's progress (a micro-batch's start, end and the latest available) and
in its checkpoint's offset log. Every worker query has exactly one source
on one topic.
"""

import json
from pathlib import Path
from typing import Any

Offsets = dict[int, int]  # partition -> next offset
EARLIEST, LATEST = -2, -1  # Spark's startingOffsets for a partition with no stored offset
Ranges = dict[int, tuple[int, int]]  # partition -> (first offset, next offset)
# Offsets a progress report does not give (a first batch's start): its JSON
# says "null", PySpark's own adapter (the json_listener lever off) str(None).
NOT_GIVEN = ("null", "None")


def parse(spark_json: str) -> Offsets:
    """{partition: offset} of the one topic in Spark's offset JSON."""
    (offsets,) = json.loads(spark_json).values()
    return {int(partition): offset for partition, offset in offsets.items()}


def end_offsets(progress: Any) -> Offsets:
    """Where a finished micro-batch ended, from its progress report."""
    (source,) = progress.sources
    return parse(source.endOffset)


def lag(progress: Any) -> int:
    """Records available past where the micro-batch ended."""
    (source,) = progress.sources
    if source.latestOffset in NOT_GIVEN:
        return 0
    end = end_offsets(progress)
    return sum(max(0, latest - end.get(partition, 0)) for partition, latest in parse(source.latestOffset).items())


def unread_ranges(progress: Any, starting_offsets: Offsets) -> Ranges:
    """The batch's ranges when it read fewer records than they hold:
    retention may have removed some (or they are a transactional producer's
    markers, which take offsets too). `starting_offsets`: where the query
    began, for its first batch."""
    (source,) = progress.sources
    start = starting_offsets if source.startOffset in NOT_GIVEN else parse(source.startOffset)
    ranges = {partition: (first, end) for partition, end in end_offsets(progress).items()
              if (first := start.get(partition, -1)) >= 0}
    if progress.numInputRows >= sum(end - first for first, end in ranges.values()):
        return {}
    return ranges


def batch_ranges(checkpoint: str, batch_id: int, starting_offsets: Offsets) -> Ranges:
    """The ranges micro-batch `batch_id` reads, for the partitions it reads
    anything from, from the query's offset log, which Spark writes before it
    runs a batch: a batch begins where the one before it ended, and the first
    where the query started (-2 or -1 for a partition never stored: the fence
    then only lets the batch through if nobody has stored that partition
    since). Nothing per record: observing the offsets in the batch itself
    cost a fifth of a batch job's time."""
    end = _logged(checkpoint, batch_id)
    start = _logged(checkpoint, batch_id - 1) if batch_id > 0 else starting_offsets
    return {partition: (start[partition], end[partition])
            for partition in end if end[partition] > start[partition]}


def _logged(checkpoint: str, batch_id: int) -> Offsets:
    """A batch's entry in the offset log: a version line, a metadata line,
    then one line of offsets per source."""
    lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
    return parse(lines[2])
