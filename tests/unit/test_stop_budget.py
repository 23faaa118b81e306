"""A stop's one deadline (shared.worker.stop_budget): every step draws on
it, so a step that began late shortens the stop's rest instead of pushing
its end past Heroku's SIGKILL."""

import threading
import time
from types import SimpleNamespace

import pytest

from shared.worker import query_run
from shared.worker.query_run import PROCESSING, QueryRun
from shared.worker.stop_budget import STEP_SECONDS, STOP_SECONDS, StopBudget, StopRequest, budget_of

HEROKU_SIGKILL_S = 30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stop_taking_all_it_is_allowed(late_s: float) -> float:
    """Seconds from the signal to the stop's end when the main thread
    notices it `late_s` later and every step waits out what it is allowed
    (a broker and Postgres away). The query's stop and the exit take their
    bound whatever is left: nothing the worker sets shortens them."""
    clock = Clock()
    budget = StopBudget(clock)
    clock.now += late_s
    for step in STEP_SECONDS:
        clock.now += STEP_SECONDS[step] if step in ("query_stop", "exit") else budget.allow(step)
    return clock.now - 1000.0


@pytest.mark.parametrize("late_s", [0, 1, 5, 10])
def test_a_stop_noticed_late_still_ends_within_its_budget(late_s):
    assert stop_taking_all_it_is_allowed(late_s) <= STOP_SECONDS


def test_a_stop_noticed_very_late_ends_before_herokus_sigkill():
    """Noticed 20 s late (the main thread held elsewhere), only the steps
    no budget can shorten remain."""
    assert stop_taking_all_it_is_allowed(20) < HEROKU_SIGKILL_S


def test_a_fresh_stop_gives_each_step_its_whole_bound():
    budget = StopBudget(Clock())
    assert [budget.allow(step) for step in STEP_SECONDS] == list(STEP_SECONDS.values())


def test_the_budget_begins_when_the_stop_is_asked_for_not_when_it_is_read():
    stop = StopRequest()
    stop.set()
    asked = stop.budget
    stop.set()  # a second stop asked for keeps the first one's deadline
    assert stop.budget is asked and asked.remaining() <= STOP_SECONDS
    assert budget_of(threading.Event()).remaining() == pytest.approx(STOP_SECONDS, abs=0.01)


def test_a_running_batch_is_cut_when_the_budget_leaves_it_no_time(capsys):
    """A stop noticed late: the batch that cannot finish (its broker away)
    is not waited for at all; the query is stopped at once."""
    clock = Clock()
    budget = StopBudget(clock)
    clock.now += STOP_SECONDS - 3  # the later steps' 10 s are more than is left
    stopped = threading.Event()
    run = QueryRun("echo", {0: 0})
    run.query = SimpleNamespace(lastProgress=None, status={"isTriggerActive": True, "message": PROCESSING},
                                stop=stopped.set, id="stuck")
    began = time.monotonic()
    query_run.stop_gracefully(run, budget)
    assert stopped.is_set() and time.monotonic() - began < 1
    assert "event=batch_cut dyno=local waited_s=0.0" in capsys.readouterr().out


def test_a_stop_with_no_time_left_cuts_no_batch_when_none_is_running(capsys):
    clock = Clock()
    budget = StopBudget(clock)
    clock.now += STOP_SECONDS
    stopped = threading.Event()
    run = QueryRun("echo", {0: 0})
    run.query = SimpleNamespace(lastProgress=None, status={"isTriggerActive": False, "message": "Waiting"},
                                stop=stopped.set, id="idle")
    query_run.stop_gracefully(run, budget)
    assert stopped.is_set() and "batch_cut" not in capsys.readouterr().out
