"""Work a worker does off its main thread, each on a daemon thread of its own,
in one of three shapes: a call whose result is wanted, a thread, a loop."""

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from shared.logs import log

T = TypeVar("T")


def call(function: Callable[[], T], *, name: str) -> "Future[T]":
    """Start `function()` on a thread; its result or exception comes in the future."""
    future: Future[T] = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(function())
        except BaseException as error:  # noqa: BLE001 - handed to whoever asks for the result
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def thread(function: Callable[[], object], *, name: str) -> threading.Thread:
    """Start `function()` on a thread; an exception it raises is a bug, printed with its traceback."""
    started = threading.Thread(target=function, name=name, daemon=True)
    started.start()
    return started


def every(seconds: float, work: Callable[[], object], *, name: str, failure_event: str,
          stop_requested: threading.Event, wake: threading.Event | None = None) -> threading.Thread:
    """Start a thread that runs `work()` every `seconds`, or at once when
    `wake` is set, until a stop is asked for. A round that fails (Postgres
    away, say) is one log line; the next round tries again, and whatever the
    round left undone is still there."""
    # Without a wake event the wait is on the stop itself, so a stop ends it at once.
    waiting_on = wake or stop_requested

    def run() -> None:
        while not stop_requested.is_set():
            try:
                work()
            except Exception as error:  # noqa: BLE001 - logged; the next round retries
                log(failure_event, error=type(error).__name__)
            waiting_on.wait(seconds)
            if wake:
                wake.clear()

    return thread(run, name=name)
