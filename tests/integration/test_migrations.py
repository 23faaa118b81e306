"""The schema migrates once, also when several processes start at once."""

import threading

from sqlalchemy import create_engine, text

from devstack.postgres import postgres_url, query
from shared.migrations import STEPS, migrate


def test_migrating_twice_changes_nothing_the_second_time(database_url):
    engine = create_engine(postgres_url(database_url))
    assert migrate(engine) == [name for name, _ in STEPS]
    assert migrate(engine) == []
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
            applied.extend(migrate(engine))
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
    assert sorted(applied) == sorted(name for name, _ in STEPS)


def test_window_totals_begin_with_the_counts_stored_before_them(database_url, monkeypatch):
    engine = create_engine(postgres_url(database_url))
    before = [step for step in STEPS if step[0] != "window_totals"]
    monkeypatch.setattr("shared.migrations.STEPS", before)  # a deployment of the version before
    migrate(engine)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO windowed_counts VALUES (to_timestamp(10), to_timestamp(20), 'a', 2),"
            " (to_timestamp(10), to_timestamp(20), 'b', 3), (to_timestamp(20), to_timestamp(30), 'a', 7)"))
    monkeypatch.undo()
    assert migrate(engine) == ["window_totals"]
    engine.dispose()
    totals = query(database_url, "SELECT extract(epoch FROM window_start)::int, words FROM window_totals")
    assert sorted(map(tuple, totals)) == [(10, 5), (20, 7)]


def test_a_workers_own_steps_follow_the_projects_once(database_url):
    engine = create_engine(postgres_url(database_url))
    own = [("a_table", "CREATE TABLE a_table (n int)")]
    assert migrate(engine, own) == [*(name for name, _ in STEPS), "a_table"]
    assert migrate(engine, own) == []
    engine.dispose()
    assert query(database_url, "SELECT count(*) FROM a_table") == [(0,)]
