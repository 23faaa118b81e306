"""Reading Postgres from tests and benchmarks."""

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text


def postgres_url(url):
    """A SQLAlchemy URL for a postgres:// one (tests read Postgres on their own)."""
    return "postgresql+psycopg2://" + url.split("://", 1)[1]


def query(database_url, sql, **parameters):
    engine = create_engine(postgres_url(database_url))
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql), parameters).all()
    finally:
        engine.dispose()


def windowed_counts(database_url):
    """{(window_start epoch s, word): count}, and every row's window_end - window_start."""
    rows = query(database_url, "SELECT extract(epoch FROM window_start)::bigint, word, count,"
                               " extract(epoch FROM window_end - window_start)::int FROM windowed_counts")
    return {(start, word): count for start, word, count, _ in rows}, {length for *_, length in rows}


def window_totals(database_url):
    """{window_start epoch s: words}, as the aggregator adds them up for the dashboard."""
    rows = query(database_url, "SELECT extract(epoch FROM window_start)::bigint, words FROM window_totals")
    return dict(rows)


# How far the transactional workers are: the next offsets they stored.
STORED_OFFSETS = "SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets WHERE consumer LIKE :consumer"


def stored_offsets(database_url, consumer="%"):
    return query(database_url, STORED_OFFSETS, consumer=consumer)[0][0]


@contextmanager
def table_locked(database_url, table) -> Iterator[None]:
    """`table` locked in SHARE mode until the block ends: a transaction that
    writes to it waits there (readers go on)."""
    engine = create_engine(postgres_url(database_url))
    try:
        with engine.begin() as connection:
            connection.execute(text(f"LOCK TABLE {table} IN SHARE MODE"))
            yield
    finally:
        engine.dispose()


def waiting_on_a_lock(database_url, statement):
    """Whether a session of this database waits on a lock in a statement that contains `statement`."""
    return query(database_url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                               " AND wait_event_type = 'Lock' AND query LIKE :statement",
                 statement=f"%{statement}%")[0][0] > 0
