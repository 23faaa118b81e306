"""words -> one micro-batch's counts per (window, word), in Spark SQL.

A word's event time is its line's, from the `event_time` header the text
processor writes (epoch milliseconds); a record without a usable one counts
at its own Kafka timestamp. Windows are tumbling, WINDOW_SECONDS long and
aligned to the epoch: a word belongs to the window of its event time however
late it arrives, so there is no watermark and nothing is dropped for lateness.

Each word is counted once, end to end. The text processor's `place` header
says where a word came from (textlines partition, line offset, index in the
line) and which query run wrote it. A text processor that fails or is killed
inside a micro-batch has sent part of that batch's words, and sends them
again in its next run. Within one `words` partition, the words of one
textlines partition arrive in increasing place in each run (see the README,
"Exactly once, end to end"), so a word is a repeat exactly when its place is
at or below the highest place already seen for its (words partition,
textlines partition): counted by an earlier batch (the `thresholds` given
here) or by an earlier run in this batch (`run_thresholds`).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import (EVENT_TIME_HEADER, PLACE_HEADER, header, place_fields, plausible_millis,
                           storable_key, window_start)

# A record's status: small numbers group faster than names.
COUNTED, REPEATED, BAD_TIME, BAD_KEY = 0, 1, 2, 3
SKIPPED = {REPEATED: "repeated", BAD_TIME: "bad_time", BAD_KEY: "bad_key"}
# What identifies a run of words in a batch, and what orders places.
RUN = ("partition", "line_partition", "run")
PLACE = ("line_offset", "word_index")


def event_millis(words: DataFrame):
    header_millis = header(EVENT_TIME_HEADER, 1).cast("string").try_cast("long")
    return F.coalesce(header_millis, F.unix_millis("timestamp"))


def with_place(words: DataFrame) -> DataFrame:
    """Adds line_partition, line_offset, word_index and run from the `place`
    header: all null for a record without a well-formed one."""
    fields = place_fields(header(PLACE_HEADER, 2))
    return words.select("*", *[field.alias(name) for name, field in fields.items()])


def classified(words: DataFrame, window_seconds: int, thresholds: dict) -> DataFrame:
    """Each record's status (COUNTED, REPEATED, BAD_TIME, BAD_KEY), window
    and word (null unless counted), and its run and place.

    `thresholds`: the highest place already counted ((line_offset,
    word_index)), per (partition, line_partition) or per (partition,
    line_partition, run); a record at or below its threshold is a repeat."""
    millis = event_millis(words)
    records = with_place(words.select(
        F.when(plausible_millis(millis), window_start(millis, window_seconds)).alias("window_start"),
        F.col("value").cast("string").alias("word"), "partition", "offset", "headers"))
    status = (F.when(F.col("window_start").isNull(), BAD_TIME)
              .when(~F.coalesce(storable_key(F.col("word")), F.lit(False)), BAD_KEY)
              .when(repeated(thresholds), REPEATED)
              .otherwise(COUNTED))
    counted = status == COUNTED
    return records.select(status.alias("status"),
                          F.when(counted, F.col("window_start")).alias("window_start"),
                          F.when(counted, F.col("word")).alias("word"),
                          "offset", *RUN, *PLACE)


def repeated(thresholds: dict):
    """Whether a record's place is at or below its threshold: one CASE branch
    per threshold (at most words x textlines partitions, a few more with
    runs); a broadcast join measured 20 % slower."""
    expression = None
    for key, place in thresholds.items():
        if place is None:
            continue
        offset, index = place
        same = F.lit(True)
        for name, value in zip(RUN, key):
            same = same & (F.col(name) == value)
        at_or_below = (F.col("line_offset") < offset) | (
            (F.col("line_offset") == offset) & (F.col("word_index") <= index))
        expression = F.when(same, at_or_below) if expression is None else expression.when(same, at_or_below)
    return F.lit(False) if expression is None else F.coalesce(expression.otherwise(False), F.lit(False))


def summarize(words: DataFrame, window_seconds: int, thresholds: dict) -> DataFrame:
    """One micro-batch in one row, in one pass over its records:

    * `lines`: the counts for Postgres's COPY (text format: window_start, the
      word's UTF-8 bytes in hex so nothing needs escaping, count), made in
      Spark so Python handles one string per batch instead of a row per word;
    * `rows` and `counted`: how many counts and words those lines hold;
    * `repeated`, `bad_time`, `bad_key`: the records skipped for each reason;
    * `runs`: per (partition, line_partition, run), its first offset in the
      batch and its lowest and highest place, to find repeats across runs
      and the new thresholds."""
    records = classified(words, window_seconds, thresholds)
    # Both groupings in one aggregation over the records. A run's places grow
    # with the offsets, so its lowest and highest places are those of its
    # first and last records (a struct's min or max would not be
    # hash-aggregated, and took four fifths of a batch's time).
    groups = records.groupingSets(
        [["status", "window_start", "word"], list(RUN)], "status", "window_start", "word", *RUN,
    ).agg(F.count("*").alias("n"), F.min("offset").alias("first_offset"),
          *[F.min_by(name, "offset").alias(f"lowest_{name}") for name in PLACE],
          *[F.max_by(name, "offset").alias(f"highest_{name}") for name in PLACE],
          F.grouping("run").alias("is_count"))
    is_count = F.col("is_count") == 1

    def skipped(status):
        return F.coalesce(F.sum(F.when(is_count & (F.col("status") == status), F.col("n"))), F.lit(0))

    is_word = is_count & (F.col("status") == COUNTED)
    line = F.concat_ws("\t", "window_start", F.hex("word"), "n")
    run = F.struct(*RUN, "first_offset",
                   F.struct(*[F.col(f"lowest_{name}").alias(name) for name in PLACE]).alias("lowest"),
                   F.struct(*[F.col(f"highest_{name}").alias(name) for name in PLACE]).alias("highest"))
    return groups.agg(
        F.string_agg(F.when(is_word, line), "\n").alias("lines"),
        F.count_if(is_word).alias("rows"),
        F.coalesce(F.sum(F.when(is_word, F.col("n"))), F.lit(0)).alias("counted"),
        *[skipped(status).alias(name) for status, name in SKIPPED.items()],
        F.collect_list(F.when(~is_count & F.col("run").isNotNull(), run)).alias("runs"),
    )


def run_thresholds(counted_before: dict, runs) -> tuple[dict, dict, bool]:
    """From the highest place counted before this batch ({(partition,
    line_partition): (line_offset, word_index)}) and a summary's `runs`:

    * the threshold of each run of the batch ({(partition, line_partition,
      run): place}): the highest place before it;
    * the highest place after the batch, per (partition, line_partition);
    * whether a run repeats places that an earlier run of the same batch
      sent: then the batch must be summarized again with the per-run
      thresholds (rare: it takes a text processor that failed or stopped
      while the aggregator was behind it).

    Runs reach a partition one after another, so their first offsets order them."""
    per_run, highest, repeats = {}, dict(counted_before), False
    pairs_with_a_run = set()
    for run in sorted(runs, key=lambda r: r.first_offset):
        pair = (run.partition, run.line_partition)
        before = highest.get(pair)
        per_run[(*pair, run.run)] = before
        if pair in pairs_with_a_run and tuple(run.lowest) <= before:
            repeats = True
        pairs_with_a_run.add(pair)
        highest[pair] = tuple(run.highest) if before is None else max(before, tuple(run.highest))
    return per_run, highest, repeats
