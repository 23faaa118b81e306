"""Finding the record that fails every batch it is in, and skipping it alone.

Two kinds, two searches (the Scan and Search steps of shared.worker.lifecycle):
- a record whose Kafka timestamp Spark cannot convert fails Spark's Kafka
  source on every retry (Spark allows no consumer interceptor to mend it):
  `scan` reads the next batch's records with a consumer of its own and finds
  the first such record of each partition;
- a record that fails a task in a way no worker knows of: `search` runs the
  query on one partition alone with half the records a batch after each
  failure, until a batch of one record fails (`bisect`).
Either way the records before it go through the query (what goes through is
stored), and then the offset past it is stored: one record skipped, logged
as `event=skipped_record`.
"""

import threading
from collections.abc import Callable
from typing import Protocol

from kafka.errors import KafkaError

from shared.config import KafkaConfig
from shared.logs import log
from shared.offsets import Offsets
from shared.topic_reader import TopicReader
from shared.worker.lifecycle import RunEnded, ScanEnded, SearchEnded

# Spark keeps timestamps as microseconds in a long: a Kafka timestamp past
# this many milliseconds overflows, and fails Spark's Kafka source itself.
SPARK_MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
# Looking for such a record reads at most a batch per partition (2,000,000
# records: about 20 s in kafka-python); past this the broker is taken as away.
SCAN_TIMEOUT_S = 120

# A query run on one partition from `first`, `records` a batch, until it
# stored the records before `until` or failed: (where what it stored ends,
# whether it failed short of `until` on the searched-for cause), or None on
# a stop or another error.
PartitionRun = Callable[[int, int, int, int], tuple[int, bool] | None]
INTERRUPTED = -1


class Searching(Protocol):
    """What a search needs of the worker running it (shared.worker.runner.Supervisor)."""

    kafka: KafkaConfig
    topic: str  # prefixed
    stop_requested: threading.Event

    def search_from(self) -> Offsets | None:
        """Where this copy's partitions resume; None during a rebalance."""

    def batch_records(self) -> int: ...

    def offset_range(self, partition: int, starting: int) -> tuple[int, int]: ...

    def partition_run(self, cause: str | None) -> PartitionRun: ...

    def skip(self, partition: int, offset: int, letter_reason: str, **why: str) -> None:
        """Store the offset past one record, unread; keep it as a dead
        letter of `letter_reason` (shared.dead_letters.REASONS)."""


def scan(worker: Searching, failure: RunEnded) -> ScanEnded:
    """Skip the records Spark cannot read within the next batch of each partition."""
    starting = worker.search_from()
    if not starting:
        return ScanEnded(failure, skipped=False)
    log("unreadable_record_scan", topic=worker.topic, partitions=",".join(map(str, sorted(starting))))
    try:
        unreadable = first_unreadable(worker.kafka, worker.topic, starting, worker.batch_records(),
                                      worker.stop_requested)
    except KafkaError:  # the broker went away: the main loop backs off and retries
        return ScanEnded(failure, skipped=False)
    if worker.stop_requested.is_set():
        return ScanEnded(failure, skipped=False, stopped=True)
    run = worker.partition_run(None)
    for partition, (first, offset) in sorted(unreadable.items()):
        if offset > first:
            outcome = run(partition, first, offset - first, offset)
            if outcome is None or outcome[0] < offset:
                return ScanEnded(failure, skipped=False, stopped=worker.stop_requested.is_set())
        worker.skip(partition, offset, "unreadable", reason="timestamp_beyond_spark")
    return ScanEnded(failure, skipped=bool(unreadable))


def search(worker: Searching, failure: RunEnded, cause: str) -> SearchEnded:
    """Find and skip the first record of this copy's partitions that fails
    its batch on `cause`. Gives up on a stop, on another error (an outage
    meanwhile), and when every partition's records went through."""
    starting = worker.search_from()
    if not starting:  # a rebalance began meanwhile
        return SearchEnded(failure, skipped=False)
    log("failing_record_search", topic=worker.topic, error=cause, partitions=",".join(map(str, sorted(starting))))
    run = worker.partition_run(cause)
    for partition, start in sorted(starting.items()):
        first, end = worker.offset_range(partition, start)
        # The failing batch began at `first`: the record is within a batch of it.
        found = bisect(run, partition, first, min(end, first + worker.batch_records()))
        if found == INTERRUPTED:
            break
        if found is not None:
            worker.skip(partition, found, "failing", reason="failing", error=cause)
            return SearchEnded(failure, skipped=True)
    return SearchEnded(failure, skipped=False, stopped=worker.stop_requested.is_set())


def bisect(run: PartitionRun, partition: int, first: int, last: int) -> int | None:
    """The offset of the record of `partition` in [first, last) that fails
    a batch of its own; None if every record went through, INTERRUPTED if
    a run was. After each failed run, what it stored is behind, and the
    next run reads half as many records a batch: log2 of the records in
    runs (8 for 200)."""
    size = last - first
    while size > 0:
        outcome = run(partition, first, size, last)
        if outcome is None:
            return INTERRUPTED
        first, failed = outcome  # a failed run stored what it could
        if not failed:
            return None
        if size == 1:
            return first
        last, size = first + size, size // 2
    return None


def first_unreadable(kafka: KafkaConfig, topic: str, starting: Offsets, limit: int,
                     stop_requested: threading.Event) -> dict[int, tuple[int, int]]:
    """{partition: (first offset, offset of its first record whose timestamp
    Spark cannot convert)} among the next `limit` records of each partition
    from `starting`; what was found so far once a stop is asked for."""
    with TopicReader(kafka, topic, list(starting)) as reader:
        first = reader.seek(starting)
        ends = {partition: min(end, first[partition] + limit) for partition, end in reader.latest().items()}
        found: dict[int, tuple[int, int]] = {}
        for record in reader.records(ends, SCAN_TIMEOUT_S, stop_requested):
            if not 0 <= record.timestamp <= SPARK_MAX_TIMESTAMP_MS and record.partition not in found:
                found[record.partition] = (first[record.partition], record.offset)
                reader.stop_reading(record.partition)
        return found
