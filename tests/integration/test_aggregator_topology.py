"""The aggregator's per-batch counting on static DataFrames."""

import datetime
from types import SimpleNamespace

from devstack.postgres import postgres_url, windowed_counts
from services.aggregator import topology
from services.aggregator import worker as aggregator
from services.aggregator.tables import MIGRATIONS
from services.aggregator.topology import run_thresholds
from shared.events import EVENT_TIME_DIGITS, PLACE_FIELDS
from shared.migrations import migrate
from shared.worker.progress import engine_for
from tests.clock import T0

UTC = datetime.timezone.utc
SCHEMA = ("value binary, timestamp timestamp, headers array<struct<key:string,value:binary>>, "
          "partition int, offset long")


def record(word, timestamp_s, event_time=None, header_value=None, place=None, partition=0):
    """A record on `words`: `place` is (line partition, line offset, word
    index, run[, event time in ms]), or the header's raw bytes; `event_time`
    and `header_value` make an `event_time` header, as text processors
    before the event time moved into the place wrote it."""
    headers = []
    if event_time is not None:
        headers = [("event_time", str(int(event_time * 1000)).encode())]
    if header_value is not None:
        headers = [("other", b"x"), ("event_time", header_value)]
    if place is not None:
        headers.append(("place", place if isinstance(place, bytes) else encoded_place(*place)))
    value = word.encode() if isinstance(word, str) else word
    return [value, datetime.datetime.fromtimestamp(timestamp_s, UTC), headers, partition]


def encoded_place(*fields):
    """As the text processor writes it: each field zero-padded to its width."""
    widths = [digits for _, digits, _ in PLACE_FIELDS] + [EVENT_TIME_DIGITS][:len(fields) - len(PLACE_FIELDS)]
    return "".join(str(int(value)).zfill(width) for value, width in zip(fields, widths, strict=True)).encode()


def summary(spark, records, window_seconds=10, thresholds=None, slices=1):
    """A batch's summary and its COPY text (`lines`, from `slices` parts), the
    records' offsets in the order given."""
    frame = spark.createDataFrame([(*r, offset) for offset, r in enumerate(records)], SCHEMA)
    groups = topology.grouped(frame, window_seconds, thresholds or {})
    parts = [topology.copy_text(groups, slices, part).first().lines for part in range(slices)]
    lines = "\n".join(part for part in parts if part)
    return SimpleNamespace(**topology.summary(groups)._replace(lines=lines)._asdict(), parts=parts)


def parsed(lines):
    """{(window_start, word): count} of a summary's COPY text."""
    rows = [line.split("\t") for line in lines.split("\n")] if lines else []
    return {(int(start), bytes.fromhex(word).decode()): int(n) for start, word, n in rows}


def counts(spark, records, window_seconds=10):
    return parsed(summary(spark, records, window_seconds).lines)


def counted_once(spark, records, before=None):
    """Counts as the aggregator makes them: a second pass when runs repeat
    each other within the batch."""
    first = summary(spark, records, thresholds=before)
    per_run, after, repeats = run_thresholds(before or {}, first.runs)
    final = summary(spark, records, thresholds=per_run) if repeats else first
    return parsed(final.lines), final, after


def test_words_count_in_the_window_of_their_event_time_however_late(spark):
    got = counts(spark, [
        record("spark", T0 + 100, event_time=T0 + 1.5),
        record("spark", T0 + 100, event_time=T0 + 9.999),
        record("spark", T0 + 100, event_time=T0 + 10),   # the next window begins
        record("kafka", T0 + 3600, event_time=T0 + 2),   # an hour late: still its window
        record("kafka", T0 + 5, event_time=T0 - 0.001),  # the window before
    ])
    assert got == {(T0, "spark"): 2, (T0 + 10, "spark"): 1, (T0, "kafka"): 1, (T0 - 10, "kafka"): 1}


def test_the_event_time_in_a_words_place_windows_it(spark):
    run = 7
    result = summary(spark, [
        record("placed", T0 + 100, place=(1, 5, 0, run, (T0 + 1.5) * 1000)),
        record("placed", T0 + 100, place=(1, 6, 0, run, (T0 + 12) * 1000), event_time=T0 + 99),
        record("older", T0 + 100, place=(1, 7, 0, run), event_time=T0 + 21),  # 44 digits and a header
        record("ahead", T0, place=(1, 8, 0, run, 9_999_999_999_999)),         # the year 2286
        record("short", T0 + 100, place=b"00001000"),                          # its own timestamp
    ])
    assert parsed(result.lines) == {(T0, "placed"): 1, (T0 + 10, "placed"): 1, (T0 + 20, "older"): 1,
                                    (T0 + 100, "short"): 1}
    assert (result.bad_time, result.counted) == (1, 4)
    assert {(run_.line_partition, run_.highest[0]) for run_ in result.runs} == {(1, 8)}


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
    result = summary(spark, [record(None, T0), record("a\u0000b", T0), record(b"\xff", T0),
                             record(b"\xfe", T0), record(longest + "x", T0), record(longest, T0),
                             record("ok", T0)])
    assert parsed(result.lines) == {(T0, longest): 1, (T0, "ok"): 1}
    assert (result.bad_key, result.counted) == (5, 2)


def test_event_times_that_spark_postgres_or_the_clock_reject_are_skipped_and_counted(spark):
    now = datetime.datetime.now(UTC).timestamp()
    result = summary(spark, [
        record("overflow", T0, header_value=b"99999999999999999"),  # past Spark's timestamps
        record("ancient", T0, header_value=b"-300000000000000"),     # before Postgres's
        record("future", T0, event_time=now + 2 * 86400),             # two days ahead
        record("stamped", now + 2 * 86400),                           # no header: its own timestamp
        record("soon", T0, event_time=now + 1800),                    # within the hour: counted
        record("ok", T0, event_time=T0)])
    assert parsed(result.lines) == {(int(now + 1800) // 10 * 10, "soon"): 1, (T0, "ok"): 1}
    assert (result.bad_time, result.counted) == (4, 2)


def test_copy_text_holds_every_count_with_nothing_to_escape(spark):
    tricky = ["tab\there", "new\nline", "back\\slash", "\"quoted\"", "東京", "🙂", "a,b"]
    records = [record(word, T0) for n, word in enumerate(tricky) for _ in range(n + 1)]
    result = summary(spark, records)
    assert parsed(result.lines) == {(T0, word): n + 1 for n, word in enumerate(tricky)}
    assert (result.rows, result.counted) == (len(tricky), sum(range(1, len(tricky) + 1)))


def test_a_word_at_or_below_the_highest_place_counted_before_is_a_repeat(spark):
    run = 7
    got, result, after = counted_once(spark, [
        record("old", T0, place=(1, 40, 2, run)),     # counted by an earlier batch
        record("edge", T0, place=(1, 41, 0, run)),    # the highest place counted: a repeat
        record("new", T0, place=(1, 41, 1, run)),
        record("other", T0, place=(2, 5, 0, run)),    # another textlines partition
        record("plain", T0)], before={(0, 1): (41, 0), (0, 2): (9, 0)})
    assert got == {(T0, "new"): 1, (T0, "plain"): 1}
    assert result.repeated == 3
    assert after == {(0, 1): (41, 1), (0, 2): (9, 0)}


def test_a_run_that_resends_what_an_earlier_run_of_the_same_batch_sent_counts_once(spark):
    # A text processor killed after sending words of lines 10 and 11 (run 1),
    # restarted from line 10 (run 2); another textlines partition in between.
    first = [record(w, T0, place=(0, 10 + n // 2, n % 2, 1)) for n, w in enumerate("abcd")]
    other = [record("x", T0, place=(1, 3, 0, 1))]
    second = [record(w, T0, place=(0, 10 + n // 2, n % 2, 2)) for n, w in enumerate("abcdef")]
    got, result, after = counted_once(spark, first + other + second)
    assert got == {(T0, w): 1 for w in "abcdefx"}
    assert result.repeated == 4
    assert after == {(0, 0): (12, 1), (0, 1): (3, 0)}


def test_a_new_run_that_resends_nothing_needs_no_second_pass(spark):
    records = [record("a", T0, place=(0, 1, 0, 1)), record("b", T0, place=(0, 2, 0, 2))]
    result = summary(spark, records)
    assert run_thresholds({}, result.runs)[2] is False
    assert parsed(result.lines) == {(T0, "a"): 1, (T0, "b"): 1}


def test_a_malformed_place_is_no_place(spark):
    well_formed = encoded_place(0, 1, 0, 1)
    got, result, after = counted_once(spark, [
        record("a", T0, place=well_formed.replace(b"1", b"x", 1)), record("a", T0, place=well_formed[:-1]),
        record("a", T0, place=well_formed + b"0"), record("a", T0, place=b"")], before={(0, 0): (9, 0)})
    assert got == {(T0, "a"): 4}
    assert after == {(0, 0): (9, 0)}


def test_the_copy_text_comes_in_slices_that_hold_each_count_once(spark):
    records = [record(f"w{n % 37}", T0 + n % 30, event_time=T0 + n % 30) for n in range(500)]
    whole, sliced = summary(spark, records), summary(spark, records, slices=4)
    assert whole.copy_bytes == len(whole.lines) + 1  # each line with its newline
    assert all(sliced.parts)
    assert sorted(sliced.lines.split("\n")) == sorted(whole.lines.split("\n"))
    assert len(parsed(whole.lines)) == whole.rows == 37 * 3


def test_a_small_batchs_groups_summed_up_in_python_make_the_same_summary_as_spark(spark):
    records = [record(f"w{n % 37}", T0 + n % 30, place=(n % 2, n, 0, 7, (T0 + n % 30) * 1000)) for n in range(500)]
    records += [record(None, T0), record("overflow", T0, header_value=b"99999999999999999"),
                record("Ærøskøbing", T0, event_time=T0)]
    whole = summary(spark, records, thresholds={(0, 0): (100, 0)})
    frame = spark.createDataFrame([(*r, offset) for offset, r in enumerate(records)], SCHEMA)
    small = topology.small_batch_groups(frame, 10, {(0, 0): (100, 0)})
    assert "Exchange" not in small._jdf.queryExecution().executedPlan().toString()  # one stage: no shuffle
    summed = topology.summed_up(small.collect())
    assert sorted(summed.lines.split("\n")) == sorted(whole.lines.split("\n"))
    assert sorted(summed.runs) == sorted(whole.runs) and len(whole.runs) == 2
    by_spark = topology.Summary(**{key: value for key, value in vars(whole).items() if key != "parts"})
    assert summed._replace(lines=None, runs=[]) == by_spark._replace(lines=None, runs=[])
    assert (whole.repeated, whole.bad_key, whole.bad_time, whole.copy_bytes) == (51, 1, 1, len(whole.lines) + 1)


def test_counts_copied_in_parts_reach_postgres_whole(spark, database_url, monkeypatch):
    monkeypatch.setattr(aggregator, "COPY_PART_BYTES", 200)  # about 10 lines a part
    records = [record(f"w{n % 37}", T0 + n % 30, event_time=T0 + n % 30) for n in range(500)]
    frame = spark.createDataFrame([(*r, offset) for offset, r in enumerate(records)], SCHEMA)
    groups = topology.grouped(frame, 10, {}).persist()
    result = topology.summary(groups)
    engine = engine_for(postgres_url(database_url))
    try:
        migrate(engine, MIGRATIONS)
        with engine.begin() as connection:
            aggregator.add_counts(connection, groups, result, 10)
    finally:
        engine.dispose()
        groups.unpersist()
    assert result.copy_bytes > 10 * 200
    counts, lengths = windowed_counts(database_url)
    assert len(counts) == 37 * 3 and sum(counts.values()) == 500 and lengths == {10}


def test_copy_parts_read_as_one_text_of_lines_whatever_the_read_size():
    for size in (1, 2, 7, 1 << 20):
        source = aggregator.CopySource(["", "a1\nb2", "", "c3", "d4"])
        text = b"".join(iter(lambda: source.read(size), b""))
        assert text == b"a1\nb2\nc3\nd4"
