"""SIGTERM at the worst moment for a signal handler: while the main thread is
inside `log()`, holding its lock, blocked on a full stdout (a slow log drain)."""

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from devstack.local_stack import ROOT, wait_until

# The main thread logs without end, as a worker logs its batches, until the stop.
LOGS_UNTIL_STOPPED = """
from shared.worker.launch import StopSignal
from shared.logs import log
stop = StopSignal()
lines = 0
while not stop.requested.is_set():
    lines += 1
    log("tick", lines=lines, padding="x" * 100)
log("stopped", lines=lines)
"""
PIPE_BYTES = 4096  # the smallest pipe Linux makes: full within a few dozen lines
STOP_BUDGET_S = 30  # Heroku's SIGKILL after SIGTERM
WRITE_SYSCALL = {"x86_64": "1", "aarch64": "64"}[os.uname().machine]  # write(2)'s number


def blocked_writing_stdout(pid):
    """Whether the main thread is inside write(1, ...): /proc says which
    system call a blocked thread is in, and its first argument."""
    call = Path(f"/proc/{pid}/task/{pid}/syscall").read_text().split()
    return call[:2] == [WRITE_SYSCALL, "0x1"]


def test_a_sigterm_while_the_main_thread_is_inside_log_stops_the_process_cleanly():
    reading, writing = os.pipe()
    fcntl.fcntl(writing, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    process = subprocess.Popen([sys.executable, "-c", LOGS_UNTIL_STOPPED], cwd=ROOT, stdout=writing)
    os.close(writing)
    try:
        wait_until(lambda: blocked_writing_stdout(process.pid), 30, "the main thread blocked in log()'s write")
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        # The handler ran when the signal interrupted the write; the drain lets the main thread go on.
        output = []
        drain = threading.Thread(target=lambda: output.extend(iter(lambda: os.read(reading, 65536), b"")))
        drain.start()
        assert process.wait(STOP_BUDGET_S) == 0
        drain.join(STOP_BUDGET_S)
        assert time.monotonic() - signalled < STOP_BUDGET_S
    finally:
        process.kill()
        os.close(reading)
    lines = b"".join(output).decode().splitlines()
    assert "event=stop_requested dyno=local signal=SIGTERM" in lines
    assert lines[-1].startswith("event=stopped ")
