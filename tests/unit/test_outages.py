"""An outage during a step (a batch's commit to Postgres, a call to the
broker) delays it and never fails it; a stop ends the wait (shared.outages)."""

import threading

import pytest
from kafka.errors import KafkaConnectionError
from sqlalchemy.exc import OperationalError

from shared import outages
from shared.outages import StopRequested, kafka_outage, postgres_outage


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(outages, "backoff_seconds", lambda failures, most=30: 0)


def failing(times, error):
    calls = []

    def action():
        calls.append(len(calls))
        if len(calls) <= times:
            raise error
        return "committed"
    return action, calls


def test_a_commit_during_a_postgres_outage_waits_it_out_and_commits_once(capsys):
    action, calls = failing(2, OperationalError("COMMIT", {}, ConnectionRefusedError()))
    assert postgres_outage(threading.Event()).retry(action) == "committed"
    assert len(calls) == 3
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("event=postgres_unavailable" in line for line in lines)
    assert "error=ConnectionRefusedError" in lines[0]


def test_another_error_is_not_an_outage_and_is_raised_at_once():
    action, calls = failing(1, ValueError("a bug"))
    with pytest.raises(ValueError):
        postgres_outage(threading.Event()).retry(action)
    assert len(calls) == 1


def test_a_stop_during_an_outage_ends_the_wait():
    stop = threading.Event()
    stop.set()
    action, calls = failing(10, KafkaConnectionError())
    with pytest.raises(StopRequested):
        kafka_outage(stop).retry(action)
    assert len(calls) == 1
