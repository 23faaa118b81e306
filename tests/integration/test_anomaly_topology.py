"""The anomaly detector's parsing and counting on static DataFrames."""

import datetime

import pytest

from services.anomaly_detector.topology import (
    NO_USER,
    ROW_OVERHEAD_BYTES,
    Summary,
    counts_part,
    failed_logins,
    small_batch_counts,
    summary,
    summed_up,
)
from tests.clock import T0


def lines_frame(spark, lines, seconds=None):
    rows = [(line.encode() if isinstance(line, str) else line,
             datetime.datetime.fromtimestamp(T0 + (seconds or {}).get(i, 0), datetime.timezone.utc))
            for i, line in enumerate(lines)]
    return spark.createDataFrame(rows, "value binary, timestamp timestamp")


def count(spark, lines, seconds=None):
    counts = failed_logins(lines_frame(spark, lines, seconds), 10)
    return {(r.user, r.window_start): r["count"] for r in counts.collect()}


@pytest.mark.parametrize("line, user", [
    ("user_id: alice | timestamp: 2026-11-20 | ip_address: 10.0.0.1 | action: login failed | message: x", "alice"),
    ("bob|2026-11-20|10.0.0.2|login failed|bad password", "bob"),
    ("   user_id:carol   | action: login failed", "carol"),
    ("user_id :\tdave\t| action: login failed", "dave"),
    ("USER_ID: erin | action: login failed", "USER_ID: erin"),  # the label is lower-case
    ("  frank  | login failed", "frank"),
    ("user_id: Ærøskøbing-東京 | action: login failed", "Ærøskøbing-東京"),
    ("user_id: \"quoted\" | action: login failed", "\"quoted\""),
    ("user_id: '; DROP TABLE alerts; -- | action: login failed", "'; DROP TABLE alerts; --"),
    ("user_id: grace | action: login ok | message: earlier the login failed", "grace"),
    ("heidi login failed without any field separator", "heidi login failed without any field separator"),
    ("user_id: | action: login failed", NO_USER),
    ("   | login failed", NO_USER),
    ("|login failed", NO_USER),
    # What Postgres cannot keep in a key would fail the batch on every retry.
    ("é" * 1000 + "|login failed", "é" * 1000),  # 2,000 bytes: the most kept
    ("é" * 1000 + "x|login failed", NO_USER),
    ("nul\u0000user|login failed", NO_USER),
    (b"\xffuser|login failed", "\ufffduser"),  # decoded as Java decodes, before grouping
])
def test_user_ids_are_parsed_by_the_contract(spark, line, user):
    assert count(spark, [line]) == {(user, T0): 1}


def test_lines_without_login_failed_do_not_count(spark):
    assert count(spark, ["user_id: ivan | action: login succeeded", "judy|Login Failed", "", None]) == {}


def test_counts_per_user_and_window_of_the_kafka_timestamp(spark):
    lines = ["alice|login failed"] * 3 + ["bob|login failed"] * 2
    got = count(spark, lines, seconds={0: 0, 1: 9.999, 2: 10, 3: 5, 4: 3600})
    assert got == {("alice", T0): 2, ("alice", T0 + 10): 1, ("bob", T0): 1, ("bob", T0 + 3600): 1}


def test_lines_stamped_far_ahead_of_the_clock_are_skipped_without_a_window(spark):
    ahead = datetime.datetime.now(datetime.timezone.utc).timestamp() - T0
    got = count(spark, ["alice|login failed"] * 3,
                seconds={0: ahead + 2 * 86400, 1: ahead + 1800, 2: 0})
    soon = int(T0 + ahead + 1800) // 10 * 10
    assert got == {(NO_USER, None): 1, ("alice", soon): 1, ("alice", T0): 1}


def test_a_batchs_counts_in_parts_are_its_users_counts_each_once_and_the_summary_adds_them_up(spark):
    users = [f"user{u}" for u in range(699)] + ["Ærøskøbing"]  # bytes, not characters, in user_bytes
    lines = [f"{users[i % 700]}|login failed" for i in range(2000)] + ["|login failed"] * 3 + ["zed|login failed"]
    frame = lines_frame(spark, lines, seconds={len(lines) - 1: 10**10})
    counts = failed_logins(frame, 10)
    parts = [counts_part(counts, 4, part).collect() for part in range(4)]
    assert all(100 < len(part) < 250 for part in parts)  # 700 users, spread
    assert sorted((r.user, r.window_start, r["count"]) for part in parts for r in part) == sorted(
        (users[u], T0, 3 if u < 600 else 2) for u in range(700))
    result = summary(counts)
    assert result == Summary(users=700, failed_logins=2000, no_user=3, bad_time=1,
                             user_bytes=sum(len(user.encode()) + ROW_OVERHEAD_BYTES for user in users))
    # A small batch's counts come whole from one stage (no shuffle), and
    # Python sums them up as Spark does.
    small = small_batch_counts(frame, 10)
    assert "Exchange" not in small._jdf.queryExecution().executedPlan().toString()
    users, small_result = summed_up(small.collect())
    assert small_result == result
    assert users == {(r.user, r.window_start): r["count"] for part in parts for r in part}
