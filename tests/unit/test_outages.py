"""An outage during a step (a batch's commit to Postgres, a call to the
broker) delays it and never fails it; a stop ends the wait (shared.outages)."""

import gc
import os
import threading

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaConnectionError, KafkaTimeoutError
from sqlalchemy.exc import OperationalError

from shared import outages
from shared.outages import StopRequested, kafka_client, kafka_outage, postgres_outage
from tests.checks import broker_away


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


@pytest.mark.parametrize("make", [KafkaConsumer, KafkaAdminClient])
def test_a_kafka_client_that_cannot_reach_its_broker_leaves_no_thread_or_socket_behind(make):
    def left() -> tuple[int, int]:
        gc.collect()  # a closed client's sockets may wait for it
        return threading.active_count(), len(os.listdir("/proc/self/fd"))

    before = left()
    for _ in range(3):  # as a retry in an outage makes one after another
        with pytest.raises(KafkaTimeoutError):
            kafka_client(make, bootstrap_servers=[broker_away()], bootstrap_timeout_ms=100)
    assert left() == before
