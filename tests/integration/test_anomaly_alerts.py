"""Deciding and publishing alerts (services/anomaly_detector/alerts.py), on a
real Postgres and broker: crossings, the pruning of old windows, and a
publisher that dies between sending and marking."""

import json
import threading
import time
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from devstack.kafka_io import end_offsets, produce, read_all
from devstack.postgres import postgres_url, query
from services.anomaly_detector.alerts import KEEP_WINDOWS_SECONDS, AlertPublisher, payload, record_failures
from services.anomaly_detector.tables import MIGRATIONS
from shared.config import load
from shared.migrations import migrate
from shared.worker.progress import engine_for
from tests import clock

# A day before the tests' recent window: its windows are the ones a day too old.
T0 = clock.T0 - KEEP_WINDOWS_SECONDS

CONFIG = SimpleNamespace(email_threshold=50, urgent_threshold=100, window_seconds=10)


@pytest.fixture
def batch(database_url):
    """Records one batch's failure counts in its own transaction, as the detector does."""
    engine = engine_for(postgres_url(database_url))
    migrate(engine, MIGRATIONS)

    def record(*parts):
        with engine.begin() as connection:
            return record_failures(connection, parts, CONFIG)

    yield record
    engine.dispose()


def test_old_windows_are_pruned_and_a_late_record_never_alerts_twice(database_url, batch):
    assert batch({("alice", T0): 60}) == (1, 0)  # one email alert, nothing pruned
    assert batch({("bob", T0 + KEEP_WINDOWS_SECONDS): 1}) == (0, 0)  # alice's window: just kept
    assert batch({("bob", T0 + KEEP_WINDOWS_SECONDS + 10): 1}) == (0, 1)  # now a day too old
    assert sorted(query(database_url, "SELECT user_id FROM failed_login_counts")) == [
        ("bob",), ("bob",)]

    # Alice's window counts again from zero; its crossing was alerted already.
    assert batch({("alice", T0): 60}) == (0, 0)
    assert query(database_url, "SELECT user_id, severity FROM alert_outbox") == [("alice", "email")]


def test_a_window_in_the_future_prunes_nothing_that_is_still_filling(batch):
    now = int(time.time()) // 10 * 10
    assert batch({("alice", now): 45}) == (0, 0)
    assert batch({("mallory", now + 2 * KEEP_WINDOWS_SECONDS): 1}) == (0, 0)  # two days ahead
    assert batch({("alice", now): 45}) == (1, 0)  # 90 failures: the email alert


def test_a_batch_in_parts_raises_each_parts_alerts_and_prunes_behind_the_newest_window_of_all(
        database_url, batch):
    assert batch({("old", T0): 1}) == (0, 0)
    newest = T0 + KEEP_WINDOWS_SECONDS + 10
    assert batch({("alice", T0 + 10): 51}, {}, {("bob", newest): 101}) == (3, 1)  # "old" pruned
    assert sorted(query(database_url, "SELECT user_id, severity FROM alert_outbox")) == [
        ("alice", "email"), ("bob", "email"), ("bob", "urgent")]
    assert batch({}, {}) == (0, 0)


class ProcessDied(Exception):
    pass


class DiesBeforeMarking(AlertPublisher):
    """A publisher whose process dies after its sends reached the topic and
    before it marks them: the worst moment for a duplicate."""

    def _mark(self, connection, published):
        if published:
            raise ProcessDied()


def outbox_rows(engine, users):
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO alert_outbox (user_id, window_start, severity, payload)"
            " VALUES (:user, to_timestamp(:window), 'email', :payload)"),
            [{"user": user, "window": T0, "payload": payload(user, T0, 10, 51, "email", 50)} for user in users])


def test_an_alert_sent_but_not_marked_is_found_on_the_topic_not_sent_again(stack, prefix, database_url):
    engine = engine_for(postgres_url(database_url))
    migrate(engine, MIGRATIONS)
    kafka = load(stack.environment(prefix)).kafka
    topic = prefix + "alerts"
    produce(stack, topic, ["foreign", "foreign"], headers=[[("alert_id", b"not-a-number")], []])
    outbox_rows(engine, ["ann", "bob", "cy"])

    with pytest.raises(ProcessDied):
        DiesBeforeMarking(engine, kafka, threading.Event()).publish_pending()
    assert sum(end_offsets(stack, topic).values()) == 2 + 3  # sent, not marked
    other_copy = AlertPublisher(engine, kafka, threading.Event())
    assert other_copy.publish_pending() == 3  # found on the topic, marked
    outbox_rows(engine, ["dee"])
    assert other_copy.publish_pending() == 1
    engine.dispose()

    records = read_all(stack, topic, 6)
    alerts = [json.loads(r.value)["user"] for r in records if r.value != b"foreign"]
    assert sorted(alerts) == ["ann", "bob", "cy", "dee"]  # each once
    published = query(database_url, "SELECT user_id, kafka_partition, kafka_offset FROM alert_outbox"
                                     " WHERE published_at IS NOT NULL ORDER BY id")
    on_topic = {(r.partition, r.offset): json.loads(r.value)["user"] for r in records if r.value != b"foreign"}
    assert [(on_topic[(p, o)]) for _, p, o in published] == [u for u, _, _ in published]
    assert query(database_url, "SELECT count(*) FROM alert_sends") == [(0,)]
