"""A worker's background rounds (retention, alert delivery): a failed round
is one log line and the next round runs; a stop ends them."""

import threading

from devstack.local_stack import wait_until
from shared import background
from shared.logs import DYNO


def test_a_failed_round_is_one_line_and_the_next_round_runs_until_the_stop(capsys):
    rounds, stop = [], threading.Event()

    def work():
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ConnectionError("Postgres away")

    thread = background.every(0.01, work, name="test-rounds", failure_event="test_failed", stop_requested=stop)
    wait_until(lambda: len(rounds) >= 3, 10, "three rounds")
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert capsys.readouterr().out.splitlines() == [f"event=test_failed dyno={DYNO} error=ConnectionError"]
