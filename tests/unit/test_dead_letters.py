"""A dead letter's forms (shared.dead_letters): a skipped kafka-python
record, its record on the dead-letters topic and back, what it keeps of a
large record, and the page's escaping of its value."""

import re
from pathlib import Path
from types import SimpleNamespace

from services.web.queries import escaped
from shared import dead_letters
from shared.dead_letters import KEPT_BYTES, DeadLetter

OPERATIONS = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()


def record(key, value, offset=7):
    return SimpleNamespace(topic="p.textlines", partition=3, offset=offset, timestamp=-1, key=key, value=value,
                           headers=[])


def test_a_letter_goes_to_the_topic_and_back_unchanged_and_is_named_by_its_origin():
    letter = DeadLetter.of_record("text-processor", record(b"k", b"a line"), "bad_time")
    key, value, headers = letter.as_kafka()
    assert key == b"text-processor/p.textlines/3/7" == letter.name.encode()
    # Stamped by the producer as it is sent: that is when it was skipped.
    stamped_ms = int(letter.skipped_at.timestamp() * 1000)
    back = DeadLetter.of_kafka(SimpleNamespace(key=key, value=value, headers=headers, timestamp=stamped_ms))
    assert back.row() == {**letter.row(), "skipped_at": back.skipped_at}
    assert abs((back.skipped_at - letter.skipped_at).total_seconds()) < 0.001


def test_a_null_key_is_no_header_and_comes_back_null():
    letter = DeadLetter.of_record("aggregator", record(None, b"w"), "bad_key")
    _, _, headers = letter.as_kafka()
    assert [name for name, _ in headers] == [dead_letters.FIELDS_HEADER]
    back = DeadLetter.of_kafka(SimpleNamespace(key=b"", value=b"w", headers=headers, timestamp=0))
    assert (back.key, back.key_bytes, back.value_bytes) == (None, None, 1)


def test_of_a_large_record_the_value_is_kept_first_then_the_key_in_what_is_left_with_both_lengths():
    letter = DeadLetter.of_record("w", record(b"k" * 10, b"v" * (KEPT_BYTES - 4)), "failing")
    assert (letter.value, letter.key) == (b"v" * (KEPT_BYTES - 4), b"kkkk")
    assert (letter.key_bytes, letter.value_bytes) == (10, KEPT_BYTES - 4)
    huge = DeadLetter.of_record("w", record(b"k" * 10, b"v" * (2 * KEPT_BYTES)), "failing")
    assert (len(huge.value), huge.key, huge.value_bytes) == (KEPT_BYTES, b"", 2 * KEPT_BYTES)


def test_the_page_shows_a_value_escaped_where_it_does_not_print():
    assert escaped(b"ab\x00c\xff\n\xe2\x82\xac") == "ab\\x00c\\xff\\n€"
    assert escaped(None) is None


def test_each_reason_has_a_row_in_the_runbook_saying_what_to_do():
    table = OPERATIONS.split("| reason | worker | what it is | what to do |")[1].split("\n\n")[0]
    assert re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE) == list(dead_letters.REASONS)
