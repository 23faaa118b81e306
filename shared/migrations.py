"""Postgres schemas, migrated in order, once: the framework's own table
(STEPS), then a process's own steps (a worker's declaration's
`migrations`, the web's tables, or all of them for the release:
services/release.py).

Each step runs once, in its own transaction, recorded in `schema_migrations`.
A transaction-scoped advisory lock serializes processes that start at once
(several dynos, or the release phase beside a restarting worker).
Add steps at the end; never edit one that has shipped.
"""

from collections.abc import Sequence

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from shared import config as config_module
from shared import dead_letters
from shared.config import ConfigError
from shared.logs import log

LOCK_ID = 7_413_281  # any constant: the key of the advisory lock

# (name, SQL): each applied once, in order; names are unique across the project.
Steps = Sequence[tuple[str, str]]

# The framework's own: where a PostgresSink's worker resumes (shared.worker.progress).
STEPS: Steps = [
    ("kafka_offsets", """
        CREATE TABLE kafka_offsets (
            consumer    text   NOT NULL,
            topic       text   NOT NULL,
            partition   int    NOT NULL,
            next_offset bigint NOT NULL,
            PRIMARY KEY (consumer, topic, partition))"""),
    # Every worker's skipped records (shared.dead_letters).
    dead_letters.TABLE,
    dead_letters.COPIED_IN,
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


def migrate_all(own_steps: Steps) -> None:
    """The release's process (services.release): STEPS and `own_steps` at
    DATABASE_URL, and one line."""
    config = config_module.load(needs_kafka=False, needs_database=True)
    engine = create_engine(config.database_url)
    applied = migrate(engine, own_steps)
    engine.dispose()
    log("migrated", applied=",".join(applied) or "none", steps=len(STEPS) + len(own_steps))
