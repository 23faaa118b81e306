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
# A word's place: ASCII digits, zero-padded to fixed widths so that the
# aggregator cuts them out without searching (parsing "p:o:i:r" doubled the
# time of its batches). `run` names the text processor's query run.
PLACE_HEADER = "place"
PLACE_FIELDS = (  # name, digits, Spark type
    ("line_partition", 5, "int"),
    ("line_offset", 19, "long"),
    ("word_index", 10, "int"),
    ("run", 10, "long"),
)

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


def place_value(*columns: Column) -> Column:
    """The `place` header's value from its fields' columns, in PLACE_FIELDS order."""
    return F.concat(*[F.lpad(column.cast("string"), digits, "0")
                      for column, (_, digits, _) in zip(columns, PLACE_FIELDS, strict=True)]).cast("binary")


def place_fields(value: Column) -> dict[str, Column]:
    """The fields of a `place` header's value (binary), each null if the
    value is not exactly as long as the fields (a field that is not digits
    is null by itself)."""
    fields, position = {}, 1
    for name, digits, kind in PLACE_FIELDS:
        fields[name] = F.substring(value, position, digits).cast("string").try_cast(kind)
        position += digits
    return {name: F.when(F.octet_length(value) == position - 1, field) for name, field in fields.items()}


def header(name: str, position: int) -> Column:
    """The value of the record header `name`, looked up first at `position`
    (1-based: where the text processor writes it), then among all headers.
    Only functions that Spark compiles to code: a lambda (`filter`) keeps
    the whole projection out of whole-stage code generation, which cost an
    eighth of the aggregator's batch."""
    at = F.try_element_at("headers", F.lit(position))
    found = F.array_position(F.col("headers.key"), name).cast("int")
    return F.when(at["key"] == name, at["value"]).when(found > 0, F.element_at("headers", found)["value"])


def storable_key(text: Column) -> Column:
    """Whether a string column can be part of a table's key: Postgres text
    holds neither invalid UTF-8 nor NUL, and an index entry has a size limit.
    (Null for a null column: `where` drops it.)"""
    return F.is_valid_utf8(text) & ~text.contains("\u0000") & (F.octet_length(text) <= MAX_KEY_BYTES)
