"""A stop's time, as one deadline that each of its steps draws on.

Heroku SIGKILLs a dyno 30 s after SIGTERM. A stop takes these steps, one
after another, and in an outage each may wait out its whole bound: the
running batch's end (it cannot finish while its records are on a broker
that is away), the query's stop, the group's last commit, the leave, then
Spark's stop and the JVM's exit. The deadline begins when the stop is
asked for (the signal, not the moment the main thread notices it), and a
step is given what is left of it after the steps behind it are kept their
time: a step that began late is shortened, never the whole stop lengthened.

Threads: a `StopRequest` is set by the `stop-signal` thread (or by the
worker itself) and read by any; `StopBudget` is read-only once made.
"""

import threading
import time
from collections.abc import Callable
from typing import Literal

from shared.spark import STOP_TIMEOUT_MS

STOP_SECONDS = 25  # Heroku's 30, less room for a loaded machine
Step = Literal["batch", "query_stop", "commit", "leave", "exit"]
# Each step's bound, in the order a stop takes them. The query's stop is
# bounded by the session (spark.sql.streaming.stopTimeout: shared.spark),
# and the exit (Spark's stop, the JVM's end) by nothing the worker sets:
# both are kept their time, whatever is left.
STEP_SECONDS: dict[Step, float] = {
    "batch": 10,
    "query_stop": STOP_TIMEOUT_MS / 1000,
    "commit": 4,
    "leave": 4,  # the consumer's close, then a static member's removal
    "exit": 2,
}


class StopBudget:
    """The deadline of one stop, STOP_SECONDS after it was asked for."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ends = clock() + STOP_SECONDS

    def remaining(self) -> float:
        return max(0.0, self._ends - self._clock())

    def allow(self, step: Step) -> float:
        """Seconds `step` may take now: its bound, and never what the steps
        after it are kept."""
        steps = list(STEP_SECONDS)
        kept = sum(STEP_SECONDS[later] for later in steps[steps.index(step) + 1:])
        return max(0.0, min(STEP_SECONDS[step], self.remaining() - kept))

    def allow_ms(self, step: Step) -> int:
        return int(self.allow(step) * 1000)


class StopRequest(threading.Event):
    """The stop event every loop of a worker checks, which remembers when
    it was first set: its stop's budget begins then."""

    def __init__(self) -> None:
        super().__init__()
        self._budget: StopBudget | None = None
        self._setting = threading.Lock()  # never taken by a signal handler: the stop-signal thread sets it

    def set(self) -> None:
        with self._setting:
            if self._budget is None:
                self._budget = StopBudget()
        super().set()

    @property
    def budget(self) -> StopBudget:
        """The stop's budget; one that begins now if no stop was asked for
        (a rebalance's handover, bounded alike)."""
        return self._budget or StopBudget()


def budget_of(stop: threading.Event) -> StopBudget:
    """`stop`'s budget, for a plain Event too (the tests' own): one that begins now."""
    return stop.budget if isinstance(stop, StopRequest) else StopBudget()
