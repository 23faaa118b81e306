"""textlines -> words, as Spark SQL expressions only.

A line is lower-cased and split on runs of non-word characters exactly as
Java's Pattern.compile("\\W+", Pattern.UNICODE_CHARACTER_CLASS) splits it
(the `(?U)` flag below); empty tokens are dropped. Each word is one Kafka
record, key and value the word, with one header, `place` (shared.events):
where it came from (textlines partition, line offset, index of the word in
the line) and which query run wrote it, so that the aggregator counts a word
once however often a failed batch was re-sent; and its line's Kafka
timestamp, so that re-processing puts every word in the same window.

Lines whose timestamp is not a plausible event time, and words too long to
keep as a key (which would also make records above Kafka's 1 MB limit), are
skipped; the batch's log line counts them (`skipped_bad_time`,
`skipped_too_long`).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import MAX_KEY_BYTES, PLACE_HEADER, line_place, place_value, plausible_millis

NON_WORD_RUNS = r"(?U)\W+"


def words(lines: DataFrame, run: int) -> DataFrame:
    """Kafka records of `textlines` -> Kafka records for `words` (columns
    key, value, headers, as Spark's Kafka sink takes them). `run` names the
    query run that writes them."""
    on_time = plausible_millis(F.unix_millis("timestamp"))
    lines = lines.observe("lines", F.count_if(~on_time).alias("skipped_bad_time")).where(on_time)
    # Selected before the split, so that it is made once per line, not per word.
    lines = lines.select("value", line_place(F.col("partition"), F.col("offset"), F.lit(run),
                                             F.unix_millis("timestamp")).alias("line_place"))
    tokens = lines.select(
        F.posexplode(F.split(F.lower(F.col("value").cast("string")), NON_WORD_RUNS)).alias("index", "word"),
        "line_place",
    ).where(F.col("word") != "")
    fits = F.octet_length("word") <= MAX_KEY_BYTES
    tokens = tokens.observe("words", F.count_if(~fits).alias("skipped_too_long")).where(fits)

    word = F.col("word").cast("binary")
    place = place_value(F.col("line_place"), F.col("index"))
    return tokens.select(
        word.alias("key"),
        word.alias("value"),
        F.array(F.struct(F.lit(PLACE_HEADER).alias("key"), place.alias("value"))).alias("headers"),
    )
