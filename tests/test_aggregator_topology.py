"""The aggregator's per-batch counting on static DataFrames."""

import datetime

from services.aggregator.topology import copy_text, count_words

UTC = datetime.timezone.utc
T0 = 1_795_000_200  # an epoch second that is a multiple of 10 and 60


def record(word, timestamp_s, event_time=None, header_value=None):
    headers = []
    if event_time is not None:
        headers = [("event_time", str(int(event_time * 1000)).encode())]
    if header_value is not None:
        headers = [("other", b"x"), ("event_time", header_value)]
    value = word.encode() if isinstance(word, str) else word
    return (value, datetime.datetime.fromtimestamp(timestamp_s, UTC), headers)


def counts(spark, records, window_seconds=10):
    frame = spark.createDataFrame(
        records, "value binary, timestamp timestamp, headers array<struct<key:string,value:binary>>")
    return {(r.window_start, r.word): r["count"] for r in count_words(frame, window_seconds).collect()}


def test_words_count_in_the_window_of_their_event_time_however_late(spark):
    got = counts(spark, [
        record("spark", T0 + 100, event_time=T0 + 1.5),
        record("spark", T0 + 100, event_time=T0 + 9.999),
        record("spark", T0 + 100, event_time=T0 + 10),   # the next window begins
        record("kafka", T0 + 3600, event_time=T0 + 2),   # an hour late: still its window
        record("kafka", T0 + 5, event_time=T0 - 0.001),  # the window before
    ])
    assert got == {(T0, "spark"): 2, (T0 + 10, "spark"): 1, (T0, "kafka"): 1, (T0 - 10, "kafka"): 1}


def test_without_a_usable_header_the_record_timestamp_is_the_event_time(spark):
    got = counts(spark, [
        record("plain", T0 + 12),
        record("garbled", T0 + 25, header_value=b"not-a-number"),
        record("found", T0 + 99, header_value=str((T0 + 31) * 1000).encode()),
    ])
    assert got == {(T0 + 10, "plain"): 1, (T0 + 20, "garbled"): 1, (T0 + 30, "found"): 1}


def test_window_length_comes_from_the_argument(spark):
    got = counts(spark, [record("w", T0 + 59), record("w", T0 + 60), record("w", T0 + 61)], 60)
    assert got == {(T0, "w"): 1, (T0 + 60, "w"): 2}


def test_words_postgres_cannot_keep_in_a_key_are_left_out(spark):
    longest = "é" * 1000  # 2,000 bytes
    got = counts(spark, [record(None, T0), record("a\u0000b", T0), record(b"\xff", T0),
                         record(b"\xfe", T0), record(longest + "x", T0), record(longest, T0),
                         record("ok", T0)])
    assert got == {(T0, longest): 1, (T0, "ok"): 1}


def test_copy_text_holds_every_count_with_nothing_to_escape(spark):
    tricky = ["tab\there", "new\nline", "back\\slash", "\"quoted\"", "東京", "🙂", "a,b"]
    frame = spark.createDataFrame([(T0, word, n + 1) for n, word in enumerate(tricky)],
                                  "window_start long, word string, count long")
    (batch,) = copy_text(frame).collect()
    lines = [line.split("\t") for line in batch.lines.split("\n")]
    assert {(int(start), bytes.fromhex(word).decode(), int(count)) for start, word, count in lines} \
        == {(T0, word, n + 1) for n, word in enumerate(tricky)}
    assert (batch.rows, batch.words) == (len(tricky), sum(range(1, len(tricky) + 1)))
