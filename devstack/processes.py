"""Worker processes as tests, benchmarks and `make run` start them, with
their key=value log lines; a benchmark's also sampled for RSS."""

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from devstack.local_stack import ROOT, wait_until


class Worker:
    """`python -m module` (or another command) in its own process group (so
    a signal reaches its JVM too, as on Heroku), its output in `log_path`."""

    def __init__(self, module: str, env: dict, log_path: Path | str, command: list[str] | None = None,
                 group_log_path: Path | str | None = None):
        self.log_path = log_path
        self.command = command
        self.env = env  # what it was started with (a test looks for its secrets in the output)
        # kafka-python's group lines (devstack.group_log), if kept
        self.group_log_path = Path(group_log_path) if group_log_path else None
        self._log = open(log_path, "w")
        keeping_group_log = ["devstack.group_log", str(group_log_path)] if group_log_path else []
        self.process = subprocess.Popen(command or [sys.executable, "-m", *keeping_group_log, module],
                                        cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.started = time.monotonic()

    def output(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def group_log(self) -> str:
        """kafka-python's group lines; "" if none were kept."""
        path = self.group_log_path
        return path.read_text(errors="replace") if path and path.exists() else ""

    def log_lines(self, event: str) -> list[dict[str, str]]:
        """The worker's key=value lines of one event, as dicts."""
        return [dict(pair.split("=", 1) for pair in shlex.split(line))
                for line in self.output().splitlines()
                if line.startswith(f"event={event} ")]

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def thread_stacks(self, timeout: float = 5) -> str:
        """Every Python thread's stack, as the worker prints it on SIGUSR1
        (shared.worker.runner): what a worker that went quiet waits on.
        "" if it is not a running `python -m` worker (SIGUSR1 would end a JVM)."""
        if self.command is not None or self.process.poll() is not None:
            return ""
        before = len(self.output())
        os.kill(self.process.pid, signal.SIGUSR1)  # Python's only, not its JVM's group
        seen: list[str] = []

        def dumped() -> bool:  # the dump appeared and stopped growing
            seen.append(self.output()[before:])
            return "most recent call first" in seen[-1] and len(seen) > 1 and seen[-1] == seen[-2]
        try:
            wait_until(dumped, timeout, "the worker's thread stacks")
        except TimeoutError:
            pass  # what it printed, if anything
        return seen[-1]

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def programs(self) -> list[psutil.Process]:
        """Python and its JVM. Not the JVM's short-lived spawn helpers
        (Hadoop running chmod on checkpoint files): they share its address
        space (posix_spawn uses CLONE_VM) and would count it twice."""
        root = psutil.Process(self.process.pid)
        return [p for p in (root, *root.children(recursive=True)) if _named(p, ("python", "java"))]

    def cpu_seconds(self) -> float:
        """User and system seconds of Python and its JVM so far."""
        return _cpu_seconds(self.programs())

    def group_gone(self) -> bool:
        """True once no process of its group (Python, its JVM, their children) is left."""
        self.process.poll()  # reaps the Python process once it exited
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return True
        return False


class WorkerProcesses:
    """The workers one test starts, each logging to its own file in `folder`."""

    def __init__(self, env: dict, folder: Path | str):
        self.env = {**os.environ, **env}
        self.folder = Path(folder)
        self.started: list[Worker] = []

    def start(self, module: str, command: list[str] | None = None, **extra_env: str) -> Worker:
        """`python -m module` (with kafka-python's group lines kept), or
        `command` that runs it."""
        name = f"{module.rsplit('.', 1)[-1]}-{len(self.started)}"
        # Its temporary files (each query run's checkpoint) in the test's
        # folder, not the machine's: kill_all leaves them behind.
        temporary = self.folder / f"{name}.tmp"
        temporary.mkdir()
        worker = Worker(module, {**self.env, "TMPDIR": str(temporary), **extra_env}, self.folder / f"{name}.log",
                        command, group_log_path=self.folder / f"{name}.kafka-group.log")
        self.started.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.signal(signal.SIGKILL)
                worker.wait(30)


# A spawn helper keeps its JVM's name until it runs its program, and may end
# between being listed and being read: it is left out, never an error (one
# ended a latency run on a busy hour).
def _named(process: psutil.Process, names: tuple[str, ...]) -> bool:
    try:
        return process.name() in names
    except psutil.NoSuchProcess:
        return False


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(process.cpu_times()[:2])
    return total


class MeasuredWorker(Worker):
    """A worker whose Python and JVM are sampled for RSS and CPU time."""

    def __init__(self, module: str, env: dict, log_path: Path | str, command: list[str] | None = None):
        super().__init__(module, {**os.environ, **env}, log_path, command)
        self.peak_rss = 0
        self.peak_rss_by_program: dict[str, int] = {}  # "python" / "java": the largest each reached
        self.cpu_s = 0.0  # user + system seconds of Python and its JVM, at the last sample
        self._sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self._sampling:
            try:
                tree = self.programs()
                rss = {p.name(): p.memory_info().rss for p in tree}
                self.cpu_s = _cpu_seconds(tree)
                self.peak_rss = max(self.peak_rss, sum(rss.values()))
                for name, size in rss.items():
                    self.peak_rss_by_program[name] = max(size, self.peak_rss_by_program.get(name, 0))
            except psutil.Error:
                pass
            time.sleep(0.2)

    def batches(self) -> list[dict[str, str]]:
        return self.log_lines("batch")

    def stop(self) -> None:
        self.signal(signal.SIGTERM)
        self.wait(60)
        self._sampling = False

    def peaks_mb(self) -> dict[str, float]:
        return {f"peak_rss_{name}_mb": size / 2**20 for name, size in self.peak_rss_by_program.items()}
