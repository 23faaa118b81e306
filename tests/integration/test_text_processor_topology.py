"""The text processor's topology on static DataFrames, against an oracle of
the contract's tokenization written independently of Spark and Java."""

import datetime
from collections import Counter

import pytest

from services.text_processor.topology import words
from tests.tokens import HARD_LINES, oracle

RUN = 12345


NOW = datetime.datetime(2026, 11, 20, 10, 0, 0, tzinfo=datetime.timezone.utc)
LINES = "key binary, value binary, topic string, timestamp timestamp, partition int, offset long"


def tokenize(spark, values, timestamps=None, partition=3):
    """The records for `words` made of the lines (not their dead letters)."""
    return words(textlines(spark, values, timestamps, partition), RUN).where("dead_letter IS NULL").collect()


def textlines(spark, values, timestamps=None, partition=3):
    rows = [(b"k", value, "p.textlines", (timestamps or {}).get(i, NOW), partition, 1000 + i)
            for i, value in enumerate(values)]
    return spark.createDataFrame(rows, LINES)


def headers(row):
    return {h.key: h.value.decode() for h in row.headers}


def test_hard_text_splits_exactly_as_the_oracle(spark):
    rows = tokenize(spark, [line.encode() for line in HARD_LINES])
    expected = [word for line in HARD_LINES for word in oracle(line)]
    assert Counter(row.value.decode() for row in rows) == Counter(expected)
    assert all(row.key == row.value for row in rows)


@pytest.mark.parametrize("line, expected", [
    ("ΟΔΟΣ", ["οδος"]),
    ("don't", ["don", "t"]),
    ("snake_case", ["snake_case"]),
    ("İ", ["i\u0307"]),
    ("   ", []),
    ("¡Hola!", ["hola"]),
])
def test_examples_worth_reading(spark, line, expected):
    assert [row.value.decode() for row in tokenize(spark, [line.encode()])] == expected


def test_each_word_carries_its_lines_event_time(spark):
    first = datetime.datetime(2026, 11, 20, 10, 0, 3, 250000, tzinfo=datetime.timezone.utc)
    late = datetime.datetime(2026, 11, 19, 23, 59, 59, 999000, tzinfo=datetime.timezone.utc)
    rows = tokenize(spark, [b"one two", b"three"], {0: first, 1: late})
    times = {row.value.decode(): headers(row)["place"][44:] for row in rows}
    assert times == {
        "one": str(int(first.timestamp() * 1000)),
        "two": str(int(first.timestamp() * 1000)),
        "three": str(int(late.timestamp() * 1000)),
    }


def test_each_word_carries_its_place_run_and_event_time_in_one_header(spark):
    rows = tokenize(spark, [b"one, two", b"", b"  three", b"a b c d e f g h i j eleventh"], partition=5)
    # Index in the split line: a leading separator makes an empty first token.
    now_ms = int(NOW.timestamp() * 1000)
    assert {row.value.decode(): headers(row)["place"] for row in rows if len(row.value) > 1} == {  # a to j aside
        "one": f"00005{1000:019}{0:010}{RUN:010}{now_ms}", "two": f"00005{1000:019}{1:010}{RUN:010}{now_ms}",
        "three": f"00005{1002:019}{1:010}{RUN:010}{now_ms}", "eleventh": f"00005{1003:019}{10:010}{RUN:010}{now_ms}"}
    assert all(list(headers(row)) == ["place"] for row in rows)


def test_what_a_place_holds_of_its_line_is_made_once_per_line_before_the_split(spark):
    plan = words(textlines(spark, [b"one two"]), RUN)._jdf.queryExecution().executedPlan().toString()
    # A plan prints each node above its input: the offset is padded below the split.
    assert plan.index("lpad(cast(offset") > plan.index("Generate posexplode")
    # Nothing is observed of the words: an observation between the split and
    # the records made of it took each word out of the generated code and back.
    assert plan.count("CollectMetrics") == 1 and plan.index("CollectMetrics") > plan.index("lpad(cast(offset")


def test_words_too_long_for_a_key_and_lines_with_implausible_times_are_skipped_and_counted(spark):
    longest = "é" * 1000  # 2,000 bytes: the aggregator's key limit
    now = datetime.datetime.now(datetime.timezone.utc)
    values = [f"{longest} ok {longest}x {longest}y", f"{longest}x from the future", "soon", "İ" * 700]
    frame = words(textlines(spark, [value.encode() for value in values],
                            {1: now + datetime.timedelta(days=2), 2: now + datetime.timedelta(minutes=30)}), RUN)
    rows = frame.collect()
    assert sorted(row.value.decode() for row in rows if row.dead_letter is None) == sorted([longest, "ok", "soon"])
    # Lower-cased, 700 İ take 2,100 bytes: too long, though the line took
    # 1,400. A line skipped for its time is not counted again for its words.
    assert observed(frame) == {"skipped_bad_time": 1, "skipped_too_long": 3}
    # Each skipped line one dead letter, however many words too long it held, its value as it came.
    letters = {row.dead_letter.offset: row.dead_letter for row in rows if row.dead_letter is not None}
    assert {offset: letter.reason for offset, letter in letters.items()} == {
        1000: "too_long", 1001: "bad_time", 1003: "too_long"}
    assert all(row.key is None and row.value is None for row in rows if row.dead_letter is not None)
    for offset, letter in letters.items():
        assert (letter.value, letter.key, letter.topic) == (values[offset - 1000].encode(), b"k", "p.textlines")
        assert (letter.partition, letter.value_bytes) == (3, len(values[offset - 1000].encode()))


def observed(frame) -> dict[str, int]:
    """What a collected batch DataFrame's observations counted."""
    metrics = frame.sparkSession._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        frame._jdf.queryExecution().observedMetrics())
    return {field: row.getLong(row.fieldIndex(field))
            for row in metrics.values() for field in row.schema().fieldNames()}


def test_invalid_utf8_null_and_empty_values_do_not_fail_and_lose_nothing_else(spark):
    broken = b"\xff\xfeABC def\xc3\x28ghi \xed\xa0\x80 end"
    rows = tokenize(spark, [broken, None, b"", b"ok then"])
    words_out = [row.value.decode() for row in rows]  # output is valid UTF-8
    assert Counter(words_out) == Counter(oracle(broken.decode("utf-8", "replace")) + ["ok", "then"])
