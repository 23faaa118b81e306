"""The anomaly detector end to end: real broker (both modes), real Postgres,
the real worker; exactly the contract's alerts on the topic, once each."""

import datetime
import json
import random
import signal
import time

import pytest

from devstack.certificates import CertificateAuthority
from devstack.kafka_io import end_offsets, produce, read_all
from devstack.local_stack import wait_until
from devstack.postgres import query, stored_offsets
from services.anomaly_detector.topology import MAX_COUNT_BYTES
from services.anomaly_detector.worker import PART_BYTES
from tests.channel_servers import EventsApiServer, SmtpServer
from tests.checks import assert_no_secret_in, heroku_like
from tests.clock import T0

# T0: window A starts there; window B 10 s later
FAILURES_IN_A = {"u150": 150, "u101": 101, "u100": 100, "u60": 60, "u51": 51, "u50": 50, "split": 60}
EXPECTED = {
    ("u150", T0, "email"), ("u150", T0, "urgent"), ("u101", T0, "email"), ("u101", T0, "urgent"),
    ("u100", T0, "email"), ("u60", T0, "email"), ("u51", T0, "email"),
    ("split", T0, "email"), ("split", T0 + 10, "email"),
}
NO_USER_LINES = 7


def log_lines(seed=5):
    """(line, timestamp ms), shuffled so every user's failures span many batches."""
    def line(user, action):
        return f"user_id: {user} | timestamp: 2026-11-20 | ip_address: 10.1.2.3 | action: {action} | message: -"

    lines = [(line(user, "login failed"), (T0 * 1000) + i * 7 % 9_000)
             for user, n in FAILURES_IN_A.items() for i in range(n)]
    lines += [(line("split", "login failed"), (T0 + 10) * 1000 + i) for i in range(60)]
    lines += [(line("u0", "login succeeded"), T0 * 1000 + i) for i in range(40)]
    lines += [(line("", "login failed"), T0 * 1000) for _ in range(NO_USER_LINES)]
    random.Random(seed).shuffle(lines)
    return lines


def send(stack, prefix, lines, **how):
    produce(stack, prefix + "loglines", [text for text, _ in lines],
            timestamps_ms=[ms for _, ms in lines], **how)


def all_done(stack, prefix, database_url):
    """Every line stored and every alert published."""
    try:
        stored = stored_offsets(database_url, prefix + "anomaly-detector-app")
        pending = query(database_url, "SELECT count(*) FROM alert_outbox WHERE published_at IS NULL")[0][0]
    except Exception:  # noqa: BLE001 - Postgres not ready, or tables not there yet
        return False
    return stored == sum(end_offsets(stack, prefix + "loglines").values()) and pending == 0


def alerts_on_topic(stack, prefix):
    records = read_all(stack, prefix + "alerts", len(EXPECTED))
    alerts = [json.loads(r.value) for r in records]
    for record, alert in zip(records, alerts, strict=True):
        assert record.key.decode() == alert["user"]
    return alerts


def assert_exactly_the_contracts_alerts(alerts):
    def seconds(iso):
        return int(datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")
                   .replace(tzinfo=datetime.timezone.utc).timestamp())

    keys = [(a["user"], seconds(a["window_start"]), a["severity"]) for a in alerts]
    assert sorted(keys) == sorted(EXPECTED)  # each once: no loss, no repeat
    for alert in alerts:
        assert seconds(alert["window_end"]) - seconds(alert["window_start"]) == 10
        assert alert["threshold"] == {"email": 50, "urgent": 100}[alert["severity"]]
        assert alert["count"] > alert["threshold"]
        assert set(alert) == {"user", "window_start", "window_end", "count", "severity", "threshold"}


@pytest.fixture
def channels(tmp_path):
    """The pager (which fails twice first) and an SMTP server with STARTTLS,
    its certificate from a CA the worker trusts through SSL_CERT_FILE."""
    ca = CertificateAuthority("smtp-test-ca")
    (tmp_path / "ca.pem").write_text(ca.cert_pem)
    pager = EventsApiServer(ca, failures=2)
    smtp = SmtpServer(ca.issue("localhost", dns_names=["localhost"], server=True))
    smtp.environment = {"SSL_CERT_FILE": str(tmp_path / "ca.pem"), "SMTP_SERVER": "localhost",
                        "SMTP_PORT": str(smtp.port)}
    yield pager, smtp
    pager.stop()
    smtp.stop()


@heroku_like
def test_exactly_the_contracts_alerts_however_batched(stack, prefix, database_url, release, workers, channels):
    pager, smtp = channels
    send(stack, prefix, log_lines())
    worker = workers.start("services.anomaly_detector", MAX_OFFSETS_PER_TRIGGER="97",
                           PAGERDUTY_ROUTING_KEY="test-routing-key", PAGERDUTY_EVENTS_URL=pager.url,
                           **smtp.environment,
                           ALERT_EMAIL_FROM="alerts@example.test", ALERT_EMAIL_TO="ops@example.test")
    wait_until(lambda: all_done(stack, prefix, database_url), 180, "lines stored, alerts published")
    assert_exactly_the_contracts_alerts(alerts_on_topic(stack, prefix))

    urgent = {(u, w, s) for u, w, s in EXPECTED if s == "urgent"}
    emails = EXPECTED - urgent
    wait_until(lambda: len(pager.events) >= len(urgent) and len(smtp.messages) >= len(emails), 60,
               "alerts delivered to the pager and by email, the pager after two failures")
    assert sorted(e["payload"]["custom_details"]["user"] for e in pager.events) == sorted(u for u, _, _ in urgent)
    assert all(e["routing_key"] == "test-routing-key" and e["event_action"] == "trigger"
               and e["payload"]["custom_details"]["severity"] == "urgent" for e in pager.events)
    assert pager.refused == 2
    assert sorted(json.loads(m.get_payload())["user"] for _, m in smtp.messages) == \
        sorted(u for u, _, _ in emails)
    assert all(to == ["ops@example.test"] for to, _ in smtp.messages)
    batches = worker.log_lines("batch")
    assert len(batches) > 5
    assert sum(int(b.get("skipped_no_user", 0)) for b in batches) == NO_USER_LINES
    assert len(worker.log_lines("alert")) == len(EXPECTED)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert_no_secret_in(worker.output(), worker.env)  # the routing key too


def test_a_batch_too_large_to_list_its_counts_collects_them_in_parts(stack, prefix, database_url, release, workers):
    """The tests above read small batches, whose counts one job collects whole;
    a batch of more lines than one part holds at the longest user ids (here
    the backlog after the cold first batch) collects them in parts instead."""
    lines = 3 * PART_BYTES // MAX_COUNT_BYTES  # the cold run stores a batch of 2,500 first
    padding = [(f"user_id: u0 | action: login succeeded | {i}", T0 * 1000) for i in range(lines)]
    send(stack, prefix, log_lines(seed=9) + padding)
    worker = workers.start("services.anomaly_detector")
    wait_until(lambda: all_done(stack, prefix, database_url), 180, "lines stored, alerts published")
    assert_exactly_the_contracts_alerts(alerts_on_topic(stack, prefix))
    assert max(int(batch["rows_in"]) for batch in worker.log_lines("batch")) * MAX_COUNT_BYTES > PART_BYTES


def test_sigkill_mid_stream_then_restart_neither_loses_nor_repeats_an_alert(
        stack, prefix, database_url, release, workers):
    send(stack, prefix, log_lines(seed=6))
    rng = random.Random(8)
    for kill in range(2):
        worker = workers.start("services.anomaly_detector", MAX_OFFSETS_PER_TRIGGER="61")
        threshold = rng.randrange(150, 300) * (kill + 1)
        wait_until(lambda: stored_offsets(database_url) >= threshold, 240, f"{threshold} lines stored")
        worker.signal(signal.SIGKILL)
        worker.wait(30)
    workers.start("services.anomaly_detector", MAX_OFFSETS_PER_TRIGGER="61")
    wait_until(lambda: all_done(stack, prefix, database_url), 180, "lines stored, alerts published")
    assert_exactly_the_contracts_alerts(alerts_on_topic(stack, prefix))


def test_two_copies_at_once_raise_each_alert_once(stack, prefix, database_url, release, workers):
    send(stack, prefix, log_lines(seed=7))
    for n in (1, 2):
        workers.start("services.anomaly_detector", MAX_OFFSETS_PER_TRIGGER="83",
                      DYNO=f"anomaly_detector_worker.{n}")
    wait_until(lambda: all_done(stack, prefix, database_url), 240, "lines stored, alerts published")
    assert_exactly_the_contracts_alerts(alerts_on_topic(stack, prefix))


def test_a_line_stamped_two_days_ahead_neither_counts_nor_wipes_the_window_filling_now(
        stack, prefix, database_url, release, workers):
    """45 failures, one line two days ahead, 45 more, each in its own batch
    (each sent whole: a batch taking part of one would alert at its count)."""
    now_ms = int(time.time() * 1000)
    worker = workers.start("services.anomaly_detector")
    for number, (count, at_ms) in enumerate([(45, now_ms), (1, now_ms + 2 * 86_400_000), (45, now_ms)]):
        send(stack, prefix, [(f"user_id: alice | action: login failed | try {i}", at_ms) for i in range(count)],
             partition=0, at_once=True)
        wait_until(lambda: len(worker.log_lines("batch")) > number, 240, f"batch {number}")
    wait_until(lambda: all_done(stack, prefix, database_url), 60, "the alert published")
    batches = worker.log_lines("batch")
    assert [int(b["skipped_bad_time"]) for b in batches] == [0, 1, 0]
    assert [int(b["windows_pruned"]) for b in batches] == [0, 0, 0]
    alerts = [json.loads(r.value) for r in read_all(stack, prefix + "alerts", 1)]
    assert [(a["user"], a["count"], a["severity"]) for a in alerts] == [("alice", 90, "email")]
