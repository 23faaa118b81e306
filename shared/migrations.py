"""The project's Postgres schema, migrated in order, once.

Each step runs once, in its own transaction, recorded in `schema_migrations`.
A transaction-scoped advisory lock serializes processes that start at once
(several dynos, or the release phase beside a restarting worker).
Add steps at the end; never edit one that has shipped.

    python -m shared.migrations      (the Procfile's `release`)
"""

from collections.abc import Sequence

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from shared import config as config_module
from shared.config import ConfigError
from shared.logs import log

LOCK_ID = 7_413_281  # any constant: the key of the advisory lock

# The words per window of the counts stored so far.
FILL_WINDOW_TOTALS = """
    INSERT INTO window_totals
    SELECT window_start, sum(count) FROM windowed_counts GROUP BY window_start"""

# (name, SQL): each applied once, in order; names are unique across the project.
Steps = Sequence[tuple[str, str]]

STEPS: Steps = [
    ("kafka_offsets", """
        CREATE TABLE kafka_offsets (
            consumer    text   NOT NULL,
            topic       text   NOT NULL,
            partition   int    NOT NULL,
            next_offset bigint NOT NULL,
            PRIMARY KEY (consumer, topic, partition))"""),
    ("windowed_counts", """
        CREATE TABLE windowed_counts (
            window_start timestamptz NOT NULL,
            window_end   timestamptz NOT NULL,
            word         text        NOT NULL,
            count        bigint      NOT NULL,
            PRIMARY KEY (window_start, word))"""),
    ("failed_login_counts", """
        CREATE TABLE failed_login_counts (
            user_id      text        NOT NULL,
            window_start timestamptz NOT NULL,
            count        bigint      NOT NULL,
            PRIMARY KEY (user_id, window_start))"""),
    ("alert_outbox", """
        CREATE TABLE alert_outbox (
            id              bigserial   PRIMARY KEY,
            user_id         text        NOT NULL,
            window_start    timestamptz NOT NULL,
            severity        text        NOT NULL,
            payload         text        NOT NULL,
            created_at      timestamptz NOT NULL DEFAULT now(),
            published_at    timestamptz,
            kafka_partition int,
            kafka_offset    bigint,
            delivered_at      timestamptz,
            delivery_attempts int         NOT NULL DEFAULT 0,
            next_delivery_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (user_id, window_start, severity))"""),
    ("failed_login_counts_by_window", """
        CREATE INDEX failed_login_counts_by_window ON failed_login_counts (window_start)"""),
    # The highest place (services/aggregator/topology.py) counted per words
    # partition and textlines partition, moved with the consumer's offsets.
    ("counted_places", """
        CREATE TABLE counted_places (
            consumer       text   NOT NULL,
            topic          text   NOT NULL,
            partition      int    NOT NULL,
            line_partition int    NOT NULL,
            line_offset    bigint NOT NULL,
            word_index     int    NOT NULL,
            PRIMARY KEY (consumer, topic, partition, line_partition))"""),
    # An alert a channel refused for good is set aside, not retried.
    ("alert_outbox_refused_at", """
        ALTER TABLE alert_outbox ADD COLUMN refused_at timestamptz"""),
    # The publisher and the delivery thread look for pending alerts every
    # second: these indexes hold only those, however long the outbox grows.
    ("alert_outbox_unpublished", """
        CREATE INDEX alert_outbox_unpublished ON alert_outbox (id) WHERE published_at IS NULL"""),
    ("alert_outbox_undelivered", """
        CREATE INDEX alert_outbox_undelivered ON alert_outbox (id)
        WHERE delivered_at IS NULL AND refused_at IS NULL"""),
    # Alerts a publisher began to send and has not marked yet (alerts.py).
    ("alert_sends", """
        CREATE TABLE alert_sends (
            alert_id     bigint      PRIMARY KEY,
            attempted_at timestamptz NOT NULL DEFAULT now())"""),
    # The dashboard's queries (services/web/queries.py): one word's series,
    # and the alerts raised since a time.
    ("windowed_counts_by_word", """
        CREATE INDEX windowed_counts_by_word ON windowed_counts (word, window_start)"""),
    ("alert_outbox_by_created_at", """
        CREATE INDEX alert_outbox_by_created_at ON alert_outbox (created_at)"""),
    # Words per window, added by the aggregator in each batch's transaction.
    # (An aggregator of the version before, still running while this step
    # runs, adds counts without totals until it stops.)
    ("window_totals", """
        CREATE TABLE window_totals (
            window_start timestamptz PRIMARY KEY,
            words        bigint      NOT NULL);
        """ + FILL_WINDOW_TOTALS),
]


# What libpq says of a server that cannot be talked to over TLS as the URL
# asks: a mistake to fix, not an outage to wait out.
TLS_REFUSALS = {
    "does not support SSL": "names a server that does not offer TLS",
    "certificate verify failed": "names a server whose certificate did not verify",
    "does not match host name": "names a server whose certificate is for another host",
}


def migrate(engine: Engine, own_steps: Steps = ()) -> list[str]:
    """Apply the steps not applied yet: STEPS, then `own_steps` (a worker's
    own, from its declaration: spec.Worker.migrations). The first thing
    every process does with Postgres: a server that refuses TLS ends it
    here (ConfigError), whatever the caller retries."""
    try:
        return _migrate(engine, [*STEPS, *own_steps])
    except OperationalError as error:
        for said, problem in TLS_REFUSALS.items():
            if said in str(error.orig):
                raise ConfigError("DATABASE_URL", problem) from None
        raise


def _migrate(engine: Engine, steps: Steps) -> list[str]:
    applied = []
    for name, statement in steps:
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": LOCK_ID})
            connection.execute(text(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"))
            done = connection.execute(text("SELECT 1 FROM schema_migrations WHERE name = :name"),
                                      {"name": name}).first()
            if not done:
                connection.execute(text(statement))
                connection.execute(text("INSERT INTO schema_migrations (name) VALUES (:name)"),
                                   {"name": name})
                applied.append(name)
    return applied


def main() -> None:
    config = config_module.load(needs_kafka=False, needs_database=True)
    engine = create_engine(config.database_url)
    applied = migrate(engine)
    engine.dispose()
    log("migrated", applied=",".join(applied) or "none", steps=len(STEPS))


if __name__ == "__main__":
    main()
