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
`skipped_too_long`), and each such line is one dead letter (reason
`bad_time` or `too_long`; a line's other words still go to `words`).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import MAX_KEY_BYTES, PLACE_HEADER, fits_a_key, line_place, place_value, plausible_millis
from shared.worker import dead_letter

NON_WORD_RUNS = r"(?U)\W+"
KAFKA_FIELDS = ("key", "value", "topic", "partition", "offset", "timestamp")


def words(lines: DataFrame, run: int) -> DataFrame:
    """Kafka records of `textlines` -> Kafka records for `words` (columns
    key, value, headers, as Spark's Kafka sink takes them) and the lines'
    dead letters (column dead_letter, null for a word). `run` names the
    query run that writes them."""
    on_time = plausible_millis(F.unix_millis("timestamp"))
    # The record itself is carried on only for a line that may become a dead
    # letter: one out of time, or long enough to hold a word too long once
    # lower-cased (which makes a character at most 1.5 times as long).
    maybe_dead = ~on_time | (F.octet_length("value") * 3 > MAX_KEY_BYTES * 2)
    lines = lines.select("partition", "offset", "timestamp", F.lower(F.col("value").cast("string")).alias("text"),
                         F.when(maybe_dead, F.struct(*KAFKA_FIELDS)).alias("record"))
    # Both counts are taken of the lines: an observation of the words came
    # between the split and the records made of it, and took every word out
    # of Spark's generated code and back. A line holds a word too long only
    # if it is that long itself, so the rare long line is split twice.
    too_long = F.when(on_time & ~fits_a_key(F.col("text")),
                      F.size(F.filter(F.split("text", NON_WORD_RUNS), lambda word: ~fits_a_key(word)))).otherwise(0)
    lines = lines.select("*", on_time.alias("on_time"), too_long.alias("too_long")).observe(
        "lines", F.count_if(~F.col("on_time")).alias("skipped_bad_time"), F.sum("too_long").alias("skipped_too_long"))
    reason = F.when(~F.col("on_time"), F.lit("bad_time")).when(F.col("too_long") > 0, F.lit("too_long"))
    # Selected before the split, so that it is made once per line, not per word.
    lines = lines.select("text", "on_time", line_place(F.col("partition"), F.col("offset"), F.lit(run),
                                                       F.unix_millis("timestamp")).alias("line_place"),
                         dead_letter(reason, F.col("record")).alias("dead_letter"))
    # A line's words, and after them, for a dead letter, one null: its record.
    split = F.split("text", NON_WORD_RUNS)
    letter_mark = F.array(F.lit(None).cast("string"))
    records = F.when(F.col("dead_letter").isNull(), split).when(
        F.col("on_time"), F.concat(split, letter_mark)).otherwise(letter_mark)
    tokens = lines.select(F.posexplode(records).alias("index", "word"), "line_place", "dead_letter")
    is_letter = F.col("word").isNull()
    tokens = tokens.where(is_letter | ((F.col("word") != "") & fits_a_key(F.col("word"))))

    word = F.col("word").cast("binary")
    place = place_value(F.col("line_place"), F.col("index"))
    return tokens.select(
        word.alias("key"),
        word.alias("value"),
        F.array(F.struct(F.lit(PLACE_HEADER).alias("key"), place.alias("value"))).alias("headers"),
        F.when(is_letter, F.col("dead_letter")).alias("dead_letter"),
    )
