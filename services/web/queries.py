"""What the dashboard reads from Postgres, one function per question.

Each takes a connection of a read-only session and returns plain dicts ready
for JSON. Every query is bounded by an index (tables.py): the primary key
(window_start, word), windowed_counts_by_word, window_totals', alert_outbox's
id and created_at.
"""

import datetime
import json
from typing import Any

from sqlalchemy import Connection, text

CHANNEL_OF_SEVERITY = {"urgent": "pagerduty", "email": "email"}  # channels.py
PREVIEW_BYTES = 120  # a dead letter's value shown: its first bytes

LATEST_COMPLETE_WINDOW = text("""
    SELECT max(window_start) FROM windowed_counts
    WHERE window_start <= now() - make_interval(secs => :window_seconds)""")
TOP_WORDS = text("""
    SELECT word, sum(count)::bigint AS count FROM windowed_counts
    WHERE window_start >= :start AND window_start < :end
    GROUP BY word ORDER BY count DESC, word LIMIT :limit""")
# Times as ISO 8601 text from Postgres: a day of windows formatted in
# Python was most of a response's time.
ISO = """to_char(window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"""
WORD_SERIES = text(f"""
    SELECT {ISO}, count FROM windowed_counts
    WHERE word = :word AND window_start >= :start AND window_start < :end
    ORDER BY window_start""")
WORDS_PER_WINDOW = text(f"""
    SELECT {ISO}, words FROM window_totals
    WHERE window_start >= :start AND window_start < :end ORDER BY window_start""")
ALERTS = text("""
    SELECT id, user_id, window_start, severity, payload, created_at, published_at, delivered_at, refused_at
    FROM alert_outbox
    WHERE id > :since_id AND created_at >= :since
    ORDER BY id DESC LIMIT :limit""")
ALERT_TOTALS = text("""
    SELECT severity, count(*) AS raised, count(published_at) AS published, count(delivered_at) AS delivered,
           count(refused_at) AS refused
    FROM alert_outbox GROUP BY severity ORDER BY severity""")
DEAD_LETTERS = text(f"""
    SELECT worker, reason, topic, partition, "offset", timestamp_ms, skipped_at, value_bytes, replayed_at,
           substring(value FROM 1 FOR {PREVIEW_BYTES}) AS value_start
    FROM dead_letters WHERE skipped_at >= :since ORDER BY skipped_at DESC LIMIT :limit""")
DEAD_LETTER_COUNTS = text("""
    SELECT worker, reason, count(*) AS letters FROM dead_letters
    WHERE skipped_at >= :since GROUP BY worker, reason ORDER BY worker, reason""")
# Stored offsets only move forward and alert ids only grow: the offsets' sum
# changes with every stored batch, the highest id with every new alert.
PROGRESS_MARKER = text("""
    SELECT (SELECT sum(next_offset) FROM kafka_offsets), (SELECT max(id) FROM alert_outbox)""")


def iso(moment: datetime.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def latest_complete_window(connection: Connection, window_seconds: int) -> datetime.datetime | None:
    """The start of the newest window whose end has passed, if any."""
    return connection.execute(LATEST_COMPLETE_WINDOW, {"window_seconds": window_seconds}).scalar()


def top_words(connection: Connection, start: datetime.datetime, end: datetime.datetime, limit: int) -> list[dict]:
    """The `limit` words counted most in the windows starting in [start, end)."""
    rows = connection.execute(TOP_WORDS, {"start": start, "end": end, "limit": limit})
    return [{"word": word, "count": count} for word, count in rows]


def word_series(connection: Connection, word: str, start: datetime.datetime, end: datetime.datetime) -> list[dict]:
    rows = connection.execute(WORD_SERIES, {"word": word, "start": start, "end": end})
    return [{"window_start": window_start, "count": count} for window_start, count in rows]


def words_per_window(connection: Connection, start: datetime.datetime, end: datetime.datetime) -> list[dict]:
    rows = connection.execute(WORDS_PER_WINDOW, {"start": start, "end": end})
    return [{"window_start": window_start, "words": words} for window_start, words in rows]


def alerts(connection: Connection, since_id: int, since: datetime.datetime, limit: int) -> list[dict]:
    """The newest `limit` alerts with an id above `since_id` raised at or
    after `since`, newest first."""
    rows = connection.execute(ALERTS, {"since_id": since_id, "since": since, "limit": limit})
    return [_alert(row) for row in rows]


def _alert(row: Any) -> dict:
    alert = json.loads(row.payload)
    delivery = "delivered" if row.delivered_at else "refused" if row.refused_at else "pending"
    return {"id": row.id, "user": row.user_id, "window_start": alert["window_start"],
            "window_end": alert["window_end"], "count": alert["count"], "severity": row.severity,
            "threshold": alert["threshold"], "raised_at": iso(row.created_at),
            "published_at": iso(row.published_at), "channel": CHANNEL_OF_SEVERITY.get(row.severity),
            "delivery": delivery, "delivered_at": iso(row.delivered_at)}


def dead_letters(connection: Connection, since: datetime.datetime, limit: int) -> list[dict]:
    """The newest `limit` dead letters skipped at or after `since`, newest first."""
    rows = connection.execute(DEAD_LETTERS, {"since": since, "limit": limit})
    return [{"worker": row.worker, "reason": row.reason, "topic": row.topic, "partition": row.partition,
             "offset": row.offset, "timestamp_ms": row.timestamp_ms, "skipped_at": iso(row.skipped_at),
             "value_bytes": row.value_bytes, "value_start": escaped(row.value_start),
             "replayed_at": iso(row.replayed_at)} for row in rows]


def dead_letter_counts(connection: Connection, since: datetime.datetime | None = None) -> list[dict]:
    """Per worker and reason: the dead letters skipped at or after `since` (all if None)."""
    after = since or datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    rows = connection.execute(DEAD_LETTER_COUNTS, {"since": after})
    return [{"worker": row.worker, "reason": row.reason, "letters": row.letters} for row in rows]


def escaped(value: bytes | None) -> str | None:
    """Bytes as text a page can show: UTF-8 where it is, else \\x escapes,
    and every character that does not print (NUL, a newline) escaped too."""
    if value is None:
        return None
    decoded = bytes(value).decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in decoded)


def progress_marker(connection: Connection) -> tuple:
    """Changes whenever a batch is stored in Postgres or an alert is raised."""
    return tuple(connection.execute(PROGRESS_MARKER).one())


def alert_totals(connection: Connection) -> list[Any]:
    """Per severity: alerts raised, published, delivered and refused."""
    return list(connection.execute(ALERT_TOTALS).all())
