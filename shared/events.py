"""What the services agree on about time, besides the contract's topics.

Event time travels with a word in the `event_time` record header (epoch
milliseconds, ASCII digits), and windows are tumbling, aligned to multiples of
WINDOW_SECONDS since the Unix epoch.
"""

from pyspark.sql import functions as F

EVENT_TIME_HEADER = "event_time"


def window_start(timestamp, window_seconds):
    """The start, in epoch seconds, of the window holding `timestamp` (a column)."""
    return F.floor(F.unix_millis(timestamp) / (window_seconds * 1000)) * window_seconds
