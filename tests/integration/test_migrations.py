"""The schema migrates once, also when several processes start at once."""

import threading

from sqlalchemy import create_engine, text

from devstack.postgres import postgres_url, query
from services.release import STEPS as RELEASE_STEPS
from shared.migrations import STEPS, migrate

EVERY_STEP = [name for name, _ in [*STEPS, *RELEASE_STEPS]]


def test_migrating_twice_changes_nothing_the_second_time(database_url):
    engine = create_engine(postgres_url(database_url))
    assert migrate(engine, RELEASE_STEPS) == EVERY_STEP
    assert migrate(engine, RELEASE_STEPS) == []
    engine.dispose()
    columns = query(database_url, "SELECT column_name, data_type FROM information_schema.columns"
                                  " WHERE table_name = 'windowed_counts' ORDER BY ordinal_position")
    assert [tuple(c) for c in columns] == [
        ("window_start", "timestamp with time zone"), ("window_end", "timestamp with time zone"),
        ("word", "text"), ("count", "bigint")]


def test_processes_starting_at_once_apply_each_step_once(database_url):
    applied, errors = [], []

    def one_process():
        engine = create_engine(postgres_url(database_url))
        try:
            applied.extend(migrate(engine, RELEASE_STEPS))
        except Exception as error:  # noqa: BLE001 - the assertion below reports it
            errors.append(error)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=one_process) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(applied) == sorted(EVERY_STEP)


def test_window_totals_begin_with_the_counts_stored_before_them(database_url):
    engine = create_engine(postgres_url(database_url))
    migrate(engine, [step for step in RELEASE_STEPS if step[0] != "window_totals"])  # the version before
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO windowed_counts VALUES (to_timestamp(10), to_timestamp(20), 'a', 2),"
            " (to_timestamp(10), to_timestamp(20), 'b', 3), (to_timestamp(20), to_timestamp(30), 'a', 7)"))
    assert migrate(engine, RELEASE_STEPS) == ["window_totals"]
    engine.dispose()
    totals = query(database_url, "SELECT extract(epoch FROM window_start)::int, words FROM window_totals")
    assert sorted(map(tuple, totals)) == [(10, 5), (20, 7)]


def test_a_workers_own_steps_follow_the_frameworks_once(database_url):
    engine = create_engine(postgres_url(database_url))
    own = [("a_table", "CREATE TABLE a_table (n int)")]
    assert migrate(engine, own) == [*(name for name, _ in STEPS), "a_table"]
    assert migrate(engine, own) == []
    engine.dispose()
    assert query(database_url, "SELECT count(*) FROM a_table") == [(0,)]


def test_the_release_makes_every_table_a_process_makes_of_its_own():
    from services.web.tables import MIGRATIONS as WEB_STEPS
    from services.workers import WORKERS

    names = {name for name, _ in RELEASE_STEPS}
    assert len(names) == len(RELEASE_STEPS)  # each step once
    for steps in [WEB_STEPS, *(worker.migrations for worker in WORKERS.values())]:
        assert {name for name, _ in steps} <= names
