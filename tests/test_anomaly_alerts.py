"""Deciding alerts in Postgres (services/anomaly_detector/alerts.py), on a
real Postgres: crossings, and the pruning of old windows."""

import time
from types import SimpleNamespace

from services.anomaly_detector.alerts import KEEP_WINDOWS_SECONDS, record_failures
from shared.exactly_once import engine_for
from shared.migrations import migrate
from tests.postgres import postgres_url, query

CONFIG = SimpleNamespace(email_threshold=50, urgent_threshold=100, window_seconds=10)
T0 = 1_795_000_000  # a window start


def test_old_windows_are_pruned_and_a_late_record_never_alerts_twice(database_url):
    engine = engine_for(postgres_url(database_url))
    migrate(engine)

    def batch(counts):
        with engine.begin() as connection:
            return record_failures(connection, counts, CONFIG)

    assert batch({("alice", T0): 60}) == (1, 0)  # one email alert, nothing pruned
    assert batch({("bob", T0 + KEEP_WINDOWS_SECONDS): 1}) == (0, 0)  # alice's window: just kept
    assert batch({("bob", T0 + KEEP_WINDOWS_SECONDS + 10): 1}) == (0, 1)  # now a day too old
    assert sorted(query(database_url, "SELECT user_id FROM failed_login_counts")) == [
        ("bob",), ("bob",)]

    # Alice's window counts again from zero; its crossing was alerted already.
    assert batch({("alice", T0): 60}) == (0, 0)
    assert query(database_url, "SELECT user_id, severity FROM alert_outbox") == [("alice", "email")]
    engine.dispose()


def test_a_window_in_the_future_prunes_nothing_that_is_still_filling(database_url):
    engine = engine_for(postgres_url(database_url))
    migrate(engine)

    def batch(counts):
        with engine.begin() as connection:
            return record_failures(connection, counts, CONFIG)

    now = int(time.time()) // 10 * 10
    assert batch({("alice", now): 45}) == (0, 0)
    assert batch({("mallory", now + 2 * KEEP_WINDOWS_SECONDS): 1}) == (0, 0)  # two days ahead
    assert batch({("alice", now): 45}) == (1, 0)  # 90 failures: the email alert
    engine.dispose()
