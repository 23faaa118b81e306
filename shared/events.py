"""What the services agree on besides the contract's topics: event time, a
word's place in `textlines`, and which text Postgres can keep.

A word carries its line's place and event time in one record header,
`place` (see PLACE_HEADER); the aggregator uses the place to count each word
once, and the event time to window it. Windows are tumbling, aligned to
multiples of WINDOW_SECONDS since the Unix epoch. A record without a place
that holds its event time may carry an `event_time` header (epoch
milliseconds, ASCII digits), as older text processors wrote it.
"""

from pyspark.sql import Column
from pyspark.sql import functions as F

EVENT_TIME_HEADER = "event_time"
# A word's place: ASCII digits, zero-padded to fixed widths so that the
# aggregator cuts them out without searching (parsing "p:o:i:r" doubled the
# time of its batches). `run` names the text processor's query run. The
# line's event time ends it (epoch milliseconds; 13 digits last until the
# year 2286): one header costs Spark's Kafka source a third less CPU than
# two (docs/decisions/place-header.md).
# A place without it (44 digits) is an older text processor's.
PLACE_HEADER = "place"
PLACE_FIELDS = (  # name, digits, Spark type
    ("line_partition", 5, "int"),
    ("line_offset", 19, "long"),
    ("word_index", 10, "int"),
    ("run", 10, "long"),
)
PLACE_DIGITS = sum(digits for _, digits, _ in PLACE_FIELDS)
_FIELD_DIGITS = {name: digits for name, digits, _ in PLACE_FIELDS}
EVENT_TIME_DIGITS = 13

# A Postgres btree entry holds at most 2,704 bytes: a longer key would fail
# its batch's transaction on every retry and stall the worker behind it.
MAX_KEY_BYTES = 2000

# Event times are accepted from the epoch (Kafka has no earlier timestamps) to
# an hour past the end of the batch's day (UTC): at least an hour ahead of its
# clock (Kafka 4.0's default for the broker's log.message.timestamp.after.max.ms),
# at most 25. Outside that a time either cannot be held by Spark or Postgres
# (the batch would fail on every retry) or would drag windows into the future:
# such records are skipped and counted. A day, not the batch's clock: a
# streaming query writes the batch's time into the code it generates, so a
# bound of the clock compiled and loaded new classes for every micro-batch;
# the date changes once a day.
MAX_AHEAD_MS = 3_600_000


def plausible_millis(millis: Column) -> Column:
    """Whether an epoch-milliseconds column is an event time the workers accept."""
    end_of_day = F.unix_millis(F.date_add(F.current_date(), 1).cast("timestamp"))
    return millis.between(F.lit(0), end_of_day + MAX_AHEAD_MS)


def window_start(millis: Column, window_seconds: int) -> Column:
    """The start, in epoch seconds, of the window holding `millis` (epoch ms)."""
    return F.floor(millis / (window_seconds * 1000)) * window_seconds


def line_place(partition: Column, offset: Column, run: Column, event_millis: Column) -> Column:
    """What a `place` holds of its word's line, the same for each word of it
    (a struct of the digits before and after the word's index): the text
    processor makes it once per line, before the line is split: padding
    every field for each word took a third of its topology's time
    (docs/decisions/place-header.md)."""
    before = F.concat(_padded(partition, _FIELD_DIGITS["line_partition"]),
                      _padded(offset, _FIELD_DIGITS["line_offset"]))
    after = F.concat(_padded(run, _FIELD_DIGITS["run"]), _padded(event_millis, EVENT_TIME_DIGITS))
    return F.struct(before.alias("before"), after.alias("after"))


def place_value(line: Column, word_index: Column) -> Column:
    """The `place` header's value (binary) of the word at `word_index` (an
    int, not negative) of a line whose `line_place` is `line`."""
    # Made for every word: the index's digits are those of index + 10**10
    # after the leading 1, where `lpad` copied its pad a character at a time.
    digits = _FIELD_DIGITS["word_index"]
    index = F.substring((word_index.cast("long") + F.lit(10 ** digits)).cast("string"), 2, digits)
    return F.concat(line["before"], index, line["after"]).cast("binary")


def _padded(number: Column, digits: int) -> Column:
    return F.lpad(number.cast("string"), digits, "0")


def place_fields(value: Column) -> tuple[dict[str, Column], Column]:
    """The fields of a `place` header's value (binary), each null unless the
    value is as long as the fields, with or without an event time (a field
    that is not digits is null by itself); and its event time, null unless
    it holds one."""
    length = F.octet_length(value)
    with_time = PLACE_DIGITS + EVENT_TIME_DIGITS
    is_place = length.isin(PLACE_DIGITS, with_time)

    def digits_at(position: int, digits: int, kind: str) -> Column:
        return F.substring(value, position, digits).cast("string").try_cast(kind)

    fields, position = {}, 1
    for name, digits, kind in PLACE_FIELDS:
        fields[name] = F.when(is_place, digits_at(position, digits, kind))
        position += digits
    return fields, F.when(length == with_time, digits_at(position, EVENT_TIME_DIGITS, "long"))


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
    (False for a null column.)

    Validity is `try_validate_utf8` not null rather than `is_valid_utf8`: the
    same check, but a static call in the generated code, where
    `is_valid_utf8` is a method call whose code generation initializes
    Scala's runtime reflection, in a cold worker's first batch
    (docs/decisions/cold-start.md)."""
    return F.try_validate_utf8(text).isNotNull() & ~text.contains("\u0000") & fits_a_key(text)


def fits_a_key(text: Column) -> Column:
    """Whether a string column is short enough to be part of a table's key."""
    return F.octet_length(text) <= MAX_KEY_BYTES
