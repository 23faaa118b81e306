"""What the services agree on besides the contract's topics: event time, and
which text Postgres can keep.

Event time travels with a word in the `event_time` record header (epoch
milliseconds, ASCII digits), and windows are tumbling, aligned to multiples of
WINDOW_SECONDS since the Unix epoch.
"""

from pyspark.sql import functions as F

EVENT_TIME_HEADER = "event_time"

# A Postgres btree entry holds at most 2,704 bytes: a longer key would fail
# its batch's transaction on every retry and stall the worker behind it.
MAX_KEY_BYTES = 2000


def window_start(timestamp, window_seconds):
    """The start, in epoch seconds, of the window holding `timestamp` (a column)."""
    return F.floor(F.unix_millis(timestamp) / (window_seconds * 1000)) * window_seconds


def storable_key(text):
    """Whether a string column can be part of a table's key: Postgres text
    holds neither invalid UTF-8 nor NUL, and an index entry has a size limit.
    (Null for a null column: `where` drops it.)"""
    return F.is_valid_utf8(text) & ~text.contains("\u0000") & (F.octet_length(text) <= MAX_KEY_BYTES)
