"""words -> one micro-batch's counts per (window, word), in Spark SQL.

A word's event time is its line's, the last digits of the `place` header the
text processor writes (else an `event_time` header, as older text processors
wrote it); a record without a usable one counts at its own Kafka timestamp.
Windows are tumbling, WINDOW_SECONDS long and aligned to the epoch: a word
belongs to the window of its event time however late it arrives, so there
is no watermark and nothing is dropped for lateness.

Each word is counted once, end to end. The text processor's `place` header
says where a word came from (textlines partition, line offset, index in the
line) and which query run wrote it. A text processor that fails or is killed
inside a micro-batch has sent part of that batch's words, and sends them
again in its next run. Within one `words` partition, the words of one
textlines partition arrive in increasing place in each run (see docs/architecture.md,
"Exactly once, end to end"), so a word is a repeat exactly when its place is
at or below the highest place already seen for its (words partition,
textlines partition): counted by an earlier batch (the `thresholds` given
here) or by an earlier run in this batch (`run_thresholds`).
"""

import functools
from collections.abc import Iterable
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from shared.events import (
    EVENT_TIME_HEADER,
    MAX_KEY_BYTES,
    PLACE_FIELDS,
    PLACE_HEADER,
    header,
    place_fields,
    plausible_millis,
    storable_key,
    window_start,
)
from shared.parts import in_part
from shared.worker import dead_letter

# A record's status: small numbers group faster than names.
COUNTED, REPEATED, BAD_TIME, BAD_KEY = 0, 1, 2, 3
SKIPPED = {REPEATED: "repeated", BAD_TIME: "bad_time", BAD_KEY: "bad_key"}
# What a count is of, what identifies a run of words in a batch, and what orders places.
COUNT_KEY = ("status", "window_start", "word")
RUN = ("partition", "line_partition", "run")
PLACE = ("line_offset", "word_index")
# A run's group as it is collected: its key, then what a Run holds of it.
RUN_COLUMNS = (*RUN, "first_offset", "lowest_line_offset", "highest_line_offset", "highest_word_index")


# A micro-batch's plan is built anew for each batch, and each Column made
# in Python is a call into the JVM: the columns that do not depend on the
# batch are made once (functools.cache), the thresholds are one SQL
# expression (docs/decisions/place-header.md).


@functools.cache
def _header_columns() -> list[Column | str]:
    """The headers looked up once: used inline, the lookup was made again
    inside each of the place's fields (docs/decisions/place-header.md)."""
    return ["value", "partition", "offset", "timestamp",
            header(PLACE_HEADER, 1).alias("place"), header(EVENT_TIME_HEADER, 1).alias("event_time")]


@functools.cache
def _record_columns(window_seconds: int) -> list[Column | str]:
    """A record's window (null unless its event time is plausible), word,
    partition, offset and place fields (each null if it is not digits)."""
    fields, _ = place_fields(F.col("place"))
    return [_window(window_seconds).alias("window_start"), F.col("value").cast("string").alias("word"),
            "partition", "offset", *[field.alias(name) for name, field in fields.items()]]


def _window(window_seconds: int) -> Column:
    """A record's window, of its headers `place` and `event_time` (looked
    up: _header_columns) or its timestamp; null unless that is plausible."""
    _, place_millis = place_fields(F.col("place"))
    header_millis = F.col("event_time").cast("string").try_cast("long")
    millis = F.coalesce(place_millis, header_millis, F.unix_millis("timestamp"))
    return F.when(plausible_millis(millis), window_start(millis, window_seconds))


@functools.cache
def _place_columns() -> list[Column]:
    """The place fields, all null unless all are well formed."""
    well_formed = F.lit(True)
    for name, _, _ in PLACE_FIELDS:
        well_formed = well_formed & F.col(name).isNotNull()
    return [F.when(well_formed, F.col(name)).alias(name) for name, _, _ in PLACE_FIELDS]


@functools.cache
def _unless_counted() -> list[Column | str]:
    counted = F.col("status") == COUNTED
    return ["status", F.when(counted, F.col("window_start")).alias("window_start"),
            F.when(counted, F.col("word")).alias("word"), "offset", *RUN, *PLACE]


@functools.cache
def _storable_word() -> Column:
    return F.coalesce(storable_key(F.col("word")), F.lit(False))


def dead_letters(words: DataFrame, window_seconds: int) -> DataFrame:
    """Each record's dead letter: `bad_time` or `bad_key` for those skipped
    as BAD_TIME or BAD_KEY, else null (counted, or a repeat: counted once
    already). The reason in a projection of its own, as the anomaly
    detector's."""
    records = words.select("*", header(PLACE_HEADER, 1).alias("place"),
                           header(EVENT_TIME_HEADER, 1).alias("event_time"))
    word = F.col("value").cast("string")
    reason = (F.when(_window(window_seconds).isNull(), F.lit("bad_time"))
              .when(~F.coalesce(storable_key(word), F.lit(False)), F.lit("bad_key")))
    return records.select("*", reason.alias("reason")).select(dead_letter(F.col("reason")).alias("dead_letter"))


def classified(words: DataFrame, window_seconds: int, thresholds: dict) -> DataFrame:
    """Each record's status (COUNTED, REPEATED, BAD_TIME, BAD_KEY), window
    and word (null unless counted), and its run and place.

    `thresholds`: the highest place already counted ((line_offset,
    word_index)), per (partition, line_partition) or per (partition,
    line_partition, run); a record at or below its threshold is a repeat."""
    records = words.select(*_header_columns()).select(*_record_columns(window_seconds)).select(
        "window_start", "word", "partition", "offset", *_place_columns())
    status = (F.when(F.col("window_start").isNull(), BAD_TIME)
              .when(~_storable_word(), BAD_KEY)
              .when(_at_or_below_threshold(), REPEATED)
              .otherwise(COUNTED))
    return (records.select("*", threshold(thresholds).alias("threshold"))
            .select(status.alias("status"), "window_start", "word", "offset", *RUN, *PLACE)
            .select(*_unless_counted()))


# A threshold's key packs (partition, line_partition[, run]) into one number:
# run < 2^31 (the text processor draws 31 bits), line_partition < 2^17 (five
# digits), partition < 2^15 (checked).
PACKED_KEY = "(CAST(partition AS BIGINT) << 48) + (CAST(line_partition AS BIGINT) << 31)"
NO_THRESHOLD = "CAST(NULL AS STRUCT<line_offset: BIGINT, word_index: INT>)"


def threshold(thresholds: dict) -> Column:
    """Each record's threshold, looked up in a map literal: its size in the
    generated code does not grow with the thresholds (one CASE branch per
    threshold did: past 8 branches the JVM stopped compiling the method, and
    a batch took twice as long), and new values do not recompile it."""
    entries = ", ".join(
        f"{packed_key(*key)}L, named_struct('line_offset', {int(place[0])}L, 'word_index', {int(place[1])})"
        for key, place in thresholds.items() if place is not None)
    if not entries:
        return F.expr(NO_THRESHOLD)
    key = PACKED_KEY + (" + run" if len(next(iter(thresholds))) == 3 else "")
    return F.expr(f"IF(partition < 32768, try_element_at(map({entries}), {key}), {NO_THRESHOLD})")


def packed_key(partition: int, line_partition: int, run: int = 0) -> int:
    return (int(partition) << 48) + (int(line_partition) << 31) + int(run)


@functools.cache
def _at_or_below_threshold() -> Column:
    limit = F.col("threshold")
    return F.coalesce((F.col("line_offset") < limit["line_offset"]) | (
        (F.col("line_offset") == limit["line_offset"]) & (F.col("word_index") <= limit["word_index"])),
        F.lit(False))


def grouped(words: DataFrame, window_seconds: int, thresholds: dict) -> DataFrame:
    """A micro-batch's records grouped two ways, in one aggregation over them:

    * per (status, window_start, word), `is_count` 1: `n`, the records of that count;
    * per run (partition, line_partition, run), `is_count` 0: its first offset
      in the batch, its lowest line offset and its highest place, to find
      repeats across runs and the new thresholds.

    Each record is grouped twice, once under each key, the other key's
    columns null (not with grouping sets: their Expand hides the input's
    partitioning from the planner, which then shuffles even a batch read by
    one task: small_batch_groups)."""
    return (classified(words, window_seconds, thresholds).select(_keyed_twice(), "offset", *PLACE)
            .groupBy("is_count", *COUNT_KEY, *RUN).agg(*_group_aggregations()))


@functools.cache
def _keyed_twice() -> Column:
    """Each record as two rows, keyed by its count and by its run."""
    def keyed(is_count: bool) -> Column:
        return F.struct(F.lit(int(is_count)).alias("is_count"),
                        *[F.when(F.lit(is_count), F.col(name)).alias(name) for name in COUNT_KEY],
                        *[F.when(F.lit(not is_count), F.col(name)).alias(name) for name in RUN])
    return F.inline(F.array(keyed(True), keyed(False)))


@functools.cache
def _group_aggregations() -> list[Column]:
    """A run's places grow with the offsets, so its highest place is that of
    its last record. Only plain minimums and maximums of numbers, and one
    max_by, keep the aggregation hashed and its buffers narrow: a run's
    lowest place as a min_by pair, or a struct's max, took a third more time
    per batch."""
    return [F.count("*").alias("n"), F.min("offset").alias("first_offset"),
            F.min("line_offset").alias("lowest_line_offset"),
            F.max("line_offset").alias("highest_line_offset"),
            F.max_by("word_index", "offset").alias("highest_word_index")]


class Run(NamedTuple):
    """One run's group of a batch (a text processor's query run, in one
    `words` partition and one textlines partition): its first offset in the
    batch, its lowest line offset and its highest place (line_offset,
    word_index)."""

    partition: int
    line_partition: int
    run: int
    first_offset: int
    lowest_line_offset: int
    highest: tuple[int, int]


class Summary(NamedTuple):
    """A batch summed up: `rows` and `counted` (the counts to store and the
    words they hold), `copy_bytes` (the size of their COPY text), `repeated`,
    `bad_time` and `bad_key` (the records skipped for each reason), each of
    its `runs`, and its COPY text itself (`lines`) when it was small enough
    to be collected whole (else None: made in parts, copy_text)."""

    rows: int
    counted: int
    copy_bytes: int
    repeated: int
    bad_time: int
    bad_key: int
    runs: list[Run]
    lines: str | None = None


def _run(group: Row) -> Run:
    return Run(group.partition, group.line_partition, group.run, group.first_offset, group.lowest_line_offset,
               (group.highest_line_offset, group.highest_word_index))


def summary(groups: DataFrame) -> Summary:
    """The Summary of a batch's groups, summed up by Spark (one job)."""
    row = groups.agg(*_summary_columns()).first()
    assert row is not None  # an aggregate: one row
    fields = row.asDict()
    runs = [_run(run) for run in fields.pop("runs")]
    return Summary(**fields, runs=runs)


def small_batch_groups(words: DataFrame, window_seconds: int, thresholds: dict) -> DataFrame:
    """`grouped` of a batch of words known to be small, made by one task in
    one stage with no shuffle, with each count's COPY line (`line`).
    Collected whole and summed up in Python (summed_up): summing them up in
    Spark too, in the same job, took an object aggregation (a list of runs,
    a string of lines) that Spark runs without generated code."""
    return grouped(words.coalesce(1), window_seconds, thresholds).select(
        "is_count", "status", "n", F.when(_is_word(), _copy_line()).alias("line"), *RUN_COLUMNS)


def summed_up(groups: Iterable[Row]) -> Summary:
    """A small batch's groups as collected (small_batch_groups) -> the
    Summary that `summary` makes of the same groups, with its COPY text."""
    lines: list[str] = []
    counted = 0
    skipped = dict.fromkeys(SKIPPED, 0)
    runs = []
    for group in groups:
        if group.is_count == 1 and group.status == COUNTED:
            lines.append(group.line)
            counted += group.n
        elif group.is_count == 1:
            skipped[group.status] += group.n
        elif group.run is not None:
            runs.append(_run(group))
    return Summary(rows=len(lines), counted=counted, copy_bytes=sum(len(line) + 1 for line in lines),
                   repeated=skipped[REPEATED], bad_time=skipped[BAD_TIME], bad_key=skipped[BAD_KEY], runs=runs,
                   lines="\n".join(lines))


@functools.cache
def _summary_columns() -> list[Column]:
    is_count = F.col("is_count") == 1

    def skipped(status: int) -> Column:
        return F.coalesce(F.sum(F.when(is_count & (F.col("status") == status), F.col("n"))), F.lit(0))

    run = F.struct(*RUN_COLUMNS)
    return [
        F.count_if(_is_word()).alias("rows"),
        F.coalesce(F.sum(F.when(_is_word(), F.col("n"))), F.lit(0)).alias("counted"),
        F.coalesce(F.sum(F.when(_is_word(), F.octet_length(_copy_line()) + 1)), F.lit(0)).alias("copy_bytes"),
        *[skipped(status).alias(name) for status, name in SKIPPED.items()],
        F.collect_list(F.when(~is_count & F.col("run").isNotNull(), run)).alias("runs"),
    ]


def copy_text(groups: DataFrame, slices: int, part: int) -> DataFrame:
    """One row, `lines`: the counts of one of `slices` parts of the words, as
    Postgres's COPY text (window_start, the word's UTF-8 bytes in hex so
    nothing needs escaping, count), made in Spark so Python handles one string
    per part instead of a row per word."""
    return groups.where(_is_word() & in_part(slices, part, "word")).agg(F.string_agg(_copy_line(), "\n").alias("lines"))


@functools.cache
def _is_word() -> Column:
    return (F.col("is_count") == 1) & (F.col("status") == COUNTED)


@functools.cache
def _copy_line() -> Column:
    return F.concat_ws("\t", "window_start", F.hex("word"), "n")


# The most a word's COPY line takes: its window's start, the longest word
# kept in hex, the largest count, two tabs and a newline.
MAX_COPY_LINE_BYTES = 20 + 2 * MAX_KEY_BYTES + 20 + 3


def run_thresholds(counted_before: dict, runs: list[Run]) -> tuple[dict, dict, bool]:
    """From the highest place counted before this batch ({(partition,
    line_partition): (line_offset, word_index)}) and a summary's `runs`:

    * the threshold of each run of the batch ({(partition, line_partition,
      run): place}): the highest place before it;
    * the highest place after the batch, per (partition, line_partition);
    * whether a run may repeat places that an earlier run of the same batch
      sent (it begins at or below the line where that run ended): then the
      batch must be summarized again with the per-run thresholds (rare: it
      takes a text processor that failed while the aggregator was behind it;
      one stopped by SIGTERM ends on a whole batch and its next run begins
      on the next line).

    Runs reach a partition one after another, so their first offsets order them."""
    per_run, highest, repeats = {}, dict(counted_before), False
    pairs_with_a_run = set()
    for run in sorted(runs, key=lambda r: r.first_offset):
        pair = (run.partition, run.line_partition)
        before = highest.get(pair)
        per_run[(*pair, run.run)] = before
        if before is not None and pair in pairs_with_a_run and run.lowest_line_offset <= before[0]:
            repeats = True
        pairs_with_a_run.add(pair)
        highest[pair] = run.highest if before is None else max(before, run.highest)
    return per_run, highest, repeats
