"""What the services agree on besides the contract's topics: event time, a
word's place in `textlines`, and which text Postgres can keep.

Event time travels with a word in the `event_time` record header (epoch
milliseconds, ASCII digits), and windows are tumbling, aligned to multiples of
WINDOW_SECONDS since the Unix epoch. A word's place travels in the `place`
header (see PLACE_HEADER); the aggregator uses it to count each word once.
"""

from pyspark.sql import Column
from pyspark.sql import functions as F

EVENT_TIME_HEADER = "event_time"
# "<textlines partition>:<line offset>:<index of the word in the line>:<run>",
# where run names the text processor's query run that wrote it.
PLACE_HEADER = "place"

# A Postgres btree entry holds at most 2,704 bytes: a longer key would fail
# its batch's transaction on every retry and stall the worker behind it.
MAX_KEY_BYTES = 2000

# Event times are accepted from the epoch (Kafka has no earlier timestamps) to
# an hour ahead of the batch's clock (Kafka 4.0's default for the broker's
# log.message.timestamp.after.max.ms). Outside that a time either cannot be
# held by Spark or Postgres (the batch would fail on every retry) or would
# drag windows and pruning horizons into the future: such records are skipped
# and counted.
MAX_AHEAD_MS = 3_600_000


def plausible_millis(millis: Column) -> Column:
    """Whether an epoch-milliseconds column is an event time the workers accept."""
    return millis.between(F.lit(0), F.unix_millis(F.current_timestamp()) + MAX_AHEAD_MS)


def window_start(millis: Column, window_seconds: int) -> Column:
    """The start, in epoch seconds, of the window holding `millis` (epoch ms)."""
    return F.floor(millis / (window_seconds * 1000)) * window_seconds


def header(name: str, position: int) -> Column:
    """The value of the record header `name`, looked up first at `position`
    (1-based: where the text processor writes it; `filter` is not
    code-generated, and searching every record took a third of the
    aggregation's time), then among all headers."""
    at = F.try_element_at("headers", F.lit(position))
    return F.when(at["key"] == name, at["value"]).otherwise(
        F.try_element_at(F.filter("headers", lambda h: h["key"] == name), F.lit(1))["value"])


def storable_key(text: Column) -> Column:
    """Whether a string column can be part of a table's key: Postgres text
    holds neither invalid UTF-8 nor NUL, and an index entry has a size limit.
    (Null for a null column: `where` drops it.)"""
    return F.is_valid_utf8(text) & ~text.contains("\u0000") & (F.octet_length(text) <= MAX_KEY_BYTES)
