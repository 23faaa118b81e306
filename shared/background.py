"""Work a worker does beside its queries, on a daemon thread of its own."""

import threading
from collections.abc import Callable

from shared.logs import log


def every(seconds: float, work: Callable[[], object], *, name: str, failure_event: str,
          stop_requested: threading.Event) -> threading.Thread:
    """Start a thread that runs `work()` every `seconds` until a stop is asked
    for. A round that fails (Postgres away, say) is one log line; the next
    round tries again, and whatever the round left undone is still there."""

    def run():
        while not stop_requested.is_set():
            try:
                work()
            except Exception as error:  # noqa: BLE001 - logged; the next round retries
                log(failure_event, error=type(error).__name__)
            stop_requested.wait(seconds)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
