"""words -> counts per (window, word) of one micro-batch, in Spark SQL.

A word's event time is its line's, from the `event_time` header the text
processor writes (epoch milliseconds); a record without one counts at its own
Kafka timestamp. Windows are tumbling, WINDOW_SECONDS long and aligned to the
epoch: a word belongs to the window of its event time however late it
arrives, so there is no watermark and nothing is dropped for lateness.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.events import EVENT_TIME_HEADER, window_start


def event_time(words: DataFrame):
    # The text processor writes event_time as the only header: look at the
    # first one before searching them all (`filter` is not code-generated, and
    # took a third of the aggregation's time).
    first = F.try_element_at("headers", F.lit(1))
    header = F.when(first["key"] == EVENT_TIME_HEADER, first["value"]).otherwise(
        F.try_element_at(F.filter("headers", lambda h: h["key"] == EVENT_TIME_HEADER), F.lit(1))["value"])
    millis = header.cast("string").try_cast("long")
    return F.coalesce(F.timestamp_millis(millis), F.col("timestamp"))


def count_words(words: DataFrame, window_seconds: int) -> DataFrame:
    """Columns: window_start (epoch seconds), word, count.

    Null values, and words Postgres text cannot hold (a NUL character), are
    left out; the batch's log line shows them as rows_in minus counted."""
    word = F.col("value").cast("string")
    return (
        words.select(window_start(event_time(words), window_seconds).alias("window_start"),
                     word.alias("word"))
        .where(F.col("word").isNotNull() & ~F.col("word").contains("\u0000"))
        .groupBy("window_start", "word")
        .count()
    )
