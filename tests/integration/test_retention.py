"""RETENTION_HOURS on a real Postgres: rows past it deleted in short
transactions, younger ones and alerts not yet published kept, and no
channel sent an alert older than it."""

import threading

from sqlalchemy import text

from devstack.postgres import postgres_url, query
from services.aggregator import worker as aggregator
from services.anomaly_detector import worker as anomaly_detector
from services.anomaly_detector.alerts import payload
from services.anomaly_detector.channels import ChannelDelivery, PagerDuty
from services.release import STEPS as RELEASE_STEPS
from shared import retention
from shared.migrations import migrate
from shared.worker.progress import engine_for
from tests.channel_servers import EventsApiServer


def migrated_engine(database_url):
    engine = engine_for(postgres_url(database_url))
    migrate(engine, RELEASE_STEPS)
    return engine


def test_counts_past_the_retention_are_deleted_a_few_thousand_at_a_time(database_url, capsys):
    engine = migrated_engine(database_url)
    old_rows = 2 * retention.ROWS_PER_DELETE + 1
    with engine.begin() as connection:
        connection.execute(text("""
            INSERT INTO windowed_counts (window_start, window_end, word, count)
            SELECT now() - interval '2 hours', now() - interval '2 hours' + interval '10 s', 'w' || n, 1
            FROM generate_series(1, :old) n
            UNION ALL
            SELECT now() - interval '30 minutes', now(), 'kept' || n, 1 FROM generate_series(1, 10) n"""),
            {"old": old_rows})
    counts = {"windowed_counts": aggregator.RETENTION["windowed_counts"]}
    cleaner = retention.Retention(engine, counts, 1, threading.Event())
    assert cleaner.delete_old_rows() == {"windowed_counts": old_rows}
    engine.dispose()
    assert query(database_url, "SELECT count(*) FROM windowed_counts WHERE word LIKE 'kept%'") == [(10,)]
    assert query(database_url, "SELECT count(*) FROM windowed_counts") == [(10,)]
    assert f"event=retention dyno=local table=windowed_counts deleted={old_rows} hours=1" in capsys.readouterr().out


def add_alert(engine, user, hours_ago, published):
    with engine.begin() as connection:
        window = connection.execute(text(
            "SELECT extract(epoch FROM now() - make_interval(hours => :h))::bigint / 10 * 10"),
            {"h": hours_ago}).scalar()
        connection.execute(text(
            "INSERT INTO alert_outbox (user_id, window_start, severity, payload, published_at)"
            " VALUES (:user, to_timestamp(:window), 'urgent', :payload, CASE WHEN :published THEN now() END)"),
            {"user": user, "window": window, "published": published,
             "payload": payload(user, window, 10, 101, "urgent", 100)})


def test_published_alerts_past_the_retention_are_deleted_and_never_delivered(database_url, trusted_ca):
    engine = migrated_engine(database_url)
    add_alert(engine, "old-published", 3, True)
    add_alert(engine, "old-unpublished", 3, False)
    add_alert(engine, "new", 0, True)
    pager = EventsApiServer(trusted_ca)
    try:
        ChannelDelivery(engine, [PagerDuty("key", pager.url)], 1, threading.Event()).deliver_due()
    finally:
        pager.stop()
    cleaner = retention.Retention(engine, anomaly_detector.RETENTION, 1, threading.Event())
    assert cleaner.delete_old_rows() == {"alert_outbox": 1}
    engine.dispose()
    assert [e["payload"]["custom_details"]["user"] for e in pager.events] == ["new"]
    assert sorted(query(database_url, "SELECT user_id FROM alert_outbox")) == [("new",), ("old-unpublished",)]
