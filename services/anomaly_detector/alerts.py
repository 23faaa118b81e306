"""Alerts: decided once in Postgres, published to `<prefix>alerts` from an outbox.

The batch's transaction adds its failed-login counts and learns each window's
count before and after, so a threshold crossing is seen by exactly one batch
however the records were batched and however many copies run; the alerts go
into `alert_outbox` in that same transaction. A publisher thread sends them
after commit and marks them published. Each record carries its outbox id in
the `alert_id` header: an alert that a publisher may have sent without
marking it (a crash, a failed send or commit) is looked for on the topic by
that id before it is sent again (AlertPublisher).
"""

import datetime
import json
import threading
from collections.abc import Iterable
from typing import Any

from kafka import KafkaProducer
from psycopg2.extras import execute_values
from sqlalchemy import Connection, Engine, text

from shared import background
from shared.config import Config, KafkaConfig
from shared.logs import log
from shared.topic_reader import TopicReader

ALERTS_TOPIC = "alerts"  # the alerts' topic, without the prefix

Counts = dict[tuple[str, int], int]  # (user, window start in epoch seconds) -> failed logins


ADD_FAILURES = """
    INSERT INTO failed_login_counts (user_id, window_start, count) VALUES %s
    ON CONFLICT (user_id, window_start) DO UPDATE
    SET count = failed_login_counts.count + EXCLUDED.count
    RETURNING user_id, extract(epoch FROM window_start)::bigint, count"""
FAILURE_ROW = "(%s, to_timestamp(%s), %s)"

# Counts are kept for a day of event time behind the newest window of a batch,
# or behind Postgres's clock if that is earlier: a record stamped in the future
# (a producer's clock jump, milliseconds read as microseconds) must not prune
# the windows that are still filling. A record later than a day starts its
# window's count again; its alerts were already raised, and the outbox's
# unique key keeps them from being raised twice.
KEEP_WINDOWS_SECONDS = 24 * 3600
PRUNE_OLD_WINDOWS = """
    DELETE FROM failed_login_counts
    WHERE window_start < least(to_timestamp(%(newest_window)s), now()) - make_interval(secs => %(keep)s)"""

ADD_ALERTS = """
    INSERT INTO alert_outbox (user_id, window_start, severity, payload) VALUES %s
    ON CONFLICT (user_id, window_start, severity) DO NOTHING
    RETURNING id"""
ALERT_ROW = "(%s, to_timestamp(%s), %s, %s)"


def crossings(before: int, after: int, thresholds: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (severity, threshold) pairs a count crosses going from before to after."""
    return [(severity, threshold) for severity, threshold in thresholds
            if before <= threshold < after]


def payload(user: str, window_start: int, window_seconds: int, count: int, severity: str, threshold: int) -> str:
    def iso(seconds: int) -> str:
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    return json.dumps({"user": user, "window_start": iso(window_start),
                       "window_end": iso(window_start + window_seconds), "count": count,
                       "severity": severity, "threshold": threshold}, ensure_ascii=False)


def record_failures(connection: Connection, parts: Iterable[Counts], config: Config) -> tuple[int, int]:
    """In the batch's transaction: add the counts of each of `parts` (dicts
    {(user, window_start): n}, read one at a time), put the alerts they cause
    in the outbox, and drop windows a day older than the newest (or than
    now). Returns how many alerts, and how many windows dropped."""
    alerts, newest_windows = 0, []
    raw: Any = connection.connection  # psycopg2's, whose cursor is a context manager
    with raw.cursor() as cursor:
        for counts in parts:
            if counts:
                alerts += _add_failures(cursor, counts, config)
                newest_windows.append(max(window for _, window in counts))
        if not newest_windows:
            return 0, 0
        cursor.execute(PRUNE_OLD_WINDOWS, {"newest_window": max(newest_windows), "keep": KEEP_WINDOWS_SECONDS})
        return alerts, cursor.rowcount


def _add_failures(cursor: Any, counts: Counts, config: Config) -> int:
    """Add `counts` and put the alerts they cause in the outbox; how many."""
    thresholds = (("email", config.email_threshold), ("urgent", config.urgent_threshold))
    totals = execute_values(cursor, ADD_FAILURES, [(user, window, n) for (user, window), n in counts.items()],
                            template=FAILURE_ROW, page_size=5000, fetch=True)
    alerts = [(user, window, severity, payload(user, window, config.window_seconds, after, severity, threshold))
              for user, window, after in totals
              for severity, threshold in crossings(after - counts[(user, window)], after, thresholds)]
    return len(execute_values(cursor, ADD_ALERTS, alerts, template=ALERT_ROW, page_size=5000,
                              fetch=True)) if alerts else 0


PENDING = text("""
    SELECT id, user_id, severity, payload FROM alert_outbox WHERE published_at IS NULL
    ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED""")
TRIED = text("SELECT alert_id, attempted_at FROM alert_sends WHERE alert_id = ANY(:ids)")
NOTE_ATTEMPTS = text("""
    INSERT INTO alert_sends (alert_id) SELECT unnest(CAST(:ids AS bigint[]))
    ON CONFLICT (alert_id) DO NOTHING""")
# How far before an attempt, by the clock of the Postgres that noted it, the
# records of that attempt may be stamped by the clock of the dyno that sent them.
CLOCK_SKEW_MS = 300_000
READ_TIMEOUT_S = 60


class AlertPublisher:
    """Sends the outbox to `<prefix>alerts`: woken after each batch's commit,
    and every second in case a send failed.

    Before it sends, the publisher notes the attempt in `alert_sends`, in a
    transaction of its own that survives a crash. A pending alert with an
    attempt may already be on the topic (its publisher died, or failed to
    mark it, after sending): it is looked for there, by its `alert_id`
    header, before it is sent again. The outbox rows stay locked from the
    moment they are read until they are marked, so no two copies send the
    same alert at once."""

    def __init__(self, engine: Engine, kafka: KafkaConfig, stop_requested: threading.Event) -> None:
        self.engine = engine
        self.kafka = kafka
        self.topic = kafka.topic(ALERTS_TOPIC)
        self.stop_requested = stop_requested
        self.producer = KafkaProducer(**kafka.kafka_python_kwargs(), acks="all", linger_ms=0)
        self._wake = threading.Event()

    def start(self) -> None:
        # The outbox keeps an alert whose round failed.
        background.every(1.0, self.publish_all, name="alert-publisher", failure_event="alert_publish_failed",
                         stop_requested=self.stop_requested, wake=self._wake)

    def wake(self) -> None:
        """Publish now rather than within the second. Called on the thread
        of the foreachBatch function once a batch's alerts are committed;
        never blocks."""
        self._wake.set()

    def publish_all(self) -> None:
        while self.publish_pending() and not self.stop_requested.is_set():
            pass

    def publish_pending(self, limit: int = 500) -> int:
        """Publish up to `limit` unpublished alerts; returns how many."""
        with self.engine.begin() as connection:
            rows = connection.execute(PENDING, {"limit": limit}).all()
            if not rows:
                return 0
            tried: dict[int, datetime.datetime] = {
                alert_id: at for alert_id, at in connection.execute(TRIED, {"ids": [row.id for row in rows]}).all()}
            found = self._on_topic(set(tried), since=min(tried.values())) if tried else []
            if tried:
                self._mark(connection, found)
                log("alerts_reconciled", tried=len(tried), already_on_topic=len(found))
                already = {alert_id for alert_id, _, _ in found}
                rows = [row for row in rows if row.id not in already]
            with self.engine.begin() as attempts:  # committed before anything is sent
                attempts.execute(NOTE_ATTEMPTS, {"ids": [row.id for row in rows]})
            sends = [(row, self.producer.send(self.topic, key=row.user_id.encode(),
                                              value=row.payload.encode(),
                                              headers=[("alert_id", str(row.id).encode())]))
                     for row in rows]
            self.producer.flush()
            published = [(row, future.get(timeout=30)) for row, future in sends]
            self._mark(connection, [(row.id, meta.partition, meta.offset) for row, meta in published])
        for row, _ in published:
            log("alert", severity=row.severity, alert=row.payload)
        return len(published) + len(found)

    def _on_topic(self, alert_ids: set[int], since: datetime.datetime) -> list[tuple[int, int, int]]:
        """(alert id, partition, offset) of the alerts among `alert_ids` that
        are on the topic, read from a little before `since` to its end.
        Records without a numeric `alert_id` header (another producer's) are
        passed over."""
        found = []
        with TopicReader(self.kafka, self.topic) as reader:
            reader.seek(reader.at_time(int(since.timestamp() * 1000) - CLOCK_SKEW_MS))
            for record in reader.records(reader.latest(), READ_TIMEOUT_S):
                alert_id = dict(record.headers or []).get("alert_id", b"")
                if alert_id.isdigit() and int(alert_id) in alert_ids:
                    found.append((int(alert_id), record.partition, record.offset))
        return found

    @staticmethod
    def _mark(connection: Connection, published: list[tuple[int, int, int]]) -> None:
        if published:
            connection.execute(text(
                "UPDATE alert_outbox SET published_at = now(), kafka_partition = :partition,"
                " kafka_offset = :offset WHERE id = :id AND published_at IS NULL"),
                [{"id": i, "partition": p, "offset": o} for i, p, o in published])
            connection.execute(text("DELETE FROM alert_sends WHERE alert_id = ANY(:ids)"),
                               {"ids": [i for i, _, _ in published]})
