"""shared.logs: each event is one whole line, whichever thread logs it."""

import sys
import threading
import time

from shared.logs import log

THREADS, LINES = 4, 200


class YieldingStream:
    """A stdout whose every write lets the other threads run first, as a
    write to a pipe that is full may."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, text: str) -> int:
        time.sleep(0)  # gives the GIL up
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        time.sleep(0)


def test_threads_logging_at_once_never_share_a_line(monkeypatch):
    """A batch's line and an alert's, logged at once, came out as one line
    and an empty one (CI, 2026-11-28): the alert was lost to a log reader."""
    stream = YieldingStream()
    monkeypatch.setattr(sys, "stdout", stream)

    def logging(thread: int) -> None:
        for line in range(LINES):
            log("batch", thread=thread, line=line)

    threads = [threading.Thread(target=logging, args=(thread,)) for thread in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = "".join(stream.text).split("\n")
    assert lines.pop() == ""  # the last line's end
    assert len(lines) == THREADS * LINES
    assert all(line.startswith("event=batch ") and line.count("event=") == 1 for line in lines)
