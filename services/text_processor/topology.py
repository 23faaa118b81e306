"""textlines -> words, as Spark SQL expressions only.

A line is lower-cased and split on runs of non-word characters exactly as
Java's Pattern.compile("\\W+", Pattern.UNICODE_CHARACTER_CLASS) splits it
(the `(?U)` flag below); empty tokens are dropped. Each word is one Kafka
record, key and value the word, with the event time of its line (the line's
Kafka timestamp) in the `event_time` header, as epoch milliseconds in ASCII
digits, so that re-processing puts every word in the same window.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import EVENT_TIME_HEADER

NON_WORD_RUNS = r"(?U)\W+"


def words(lines: DataFrame) -> DataFrame:
    """Kafka records of `textlines` -> Kafka records for `words`
    (columns key, value, headers, as Spark's Kafka sink takes them)."""
    tokens = lines.select(
        F.explode(F.split(F.lower(F.col("value").cast("string")), NON_WORD_RUNS)).alias("word"),
        F.col("timestamp"),
    )
    word = F.col("word").cast("binary")
    event_time = F.unix_millis("timestamp").cast("string").cast("binary")
    return tokens.where(F.col("word") != "").select(
        word.alias("key"),
        word.alias("value"),
        F.array(F.struct(F.lit(EVENT_TIME_HEADER).alias("key"), event_time.alias("value")))
        .alias("headers"),
    )
