"""A worker process's first steps: SIGTERM and SIGINT made a stop asked
for, its declaration imported, its configuration read, Spark's JVM launched
on a thread of its own, and its brokers' TLS checked while the JVM starts.
The lifecycle's modules (SQLAlchemy, the Kafka client, the group member:
about a fifth of a second) are imported while the JVM starts
(docs/decisions/start-up.md).

Each service's `__main__` calls `main` with the module that declares its
worker; everything the launch needs (the worker's name, whether its
progress lives in Postgres, its driver's JVM) is that declaration's.

The stop signal is `main`'s first step: a dyno stopped in its first
seconds, while its configuration is read or its brokers are away, stops in
order too. Spark's JVM ignores both signals (shared.levers.driver_command), and
Python stops it in order."""

import faulthandler
import importlib
import signal
import socket
import sys
import threading
from concurrent.futures import Future, wait
from dataclasses import dataclass
from types import FrameType

from py4j.java_gateway import JavaGateway

from shared import background
from shared import config as config_module
from shared.logs import log
from shared.spark import launch_jvm, set_jvm_environment
from shared.worker.spec import Worker
from shared.worker.stop_budget import StopRequest


def main(declared_in: str) -> None:
    """Run the one `Worker` that the module `declared_in` declares until
    SIGTERM or SIGINT, then exit 0 (`python -m services.aggregator`)."""
    stop = StopSignal()
    worker = declared_worker(declared_in)
    launched = begin(worker, stop)
    from shared.worker.runner import run  # while Spark's JVM starts

    run(worker, launched)


def declared_worker(module: str) -> Worker:
    """The module's one Worker; the process ends with one line if it has none or several."""
    found = [value for value in vars(importlib.import_module(module)).values() if isinstance(value, Worker)]
    if len(found) != 1:
        sys.exit(f"error: {module} must declare one shared.worker.Worker, not {len(found)}")
    return found[0]


@dataclass(frozen=True)
class Launched:
    worker: Worker
    config: config_module.Config
    gateway: "Future[JavaGateway]"  # to Spark's JVM, once it has started (shared.spark.session takes it)
    stop_requested: threading.Event  # set by SIGTERM or SIGINT; every loop of the worker checks it


def begin(worker: Worker, stop: "StopSignal") -> Launched:
    """Read the configuration (a mistake ends the process with one line,
    before any JVM has started), launch Spark's JVM, then check the brokers'
    TLS while it starts (a refused certificate ends the process with one
    line; brokers that are away are waited for, and a stop meanwhile exits 0)."""
    # `kill -USR1 <pid>` (heroku ps:exec) prints every thread's stack to
    # stderr: what a worker that logs nothing is waiting on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = config_module.load(needs_database=worker.progress == "postgres")
    set_jvm_environment(config.kafka, config.spark)
    gateway = background.call(lambda: launch_jvm(worker.name, config.spark, worker.jvm), name="jvm")
    # Imported only now: the check waits out outages as the workers do
    # (shared.outages), which brings kafka-python and SQLAlchemy, whose
    # import would otherwise hold up the JVM's launch.
    from shared.outages import StopRequested
    from shared.tls_check import check_tls
    try:
        check_tls(config.kafka, stop.requested)
    except StopRequested:
        _let_jvm_start(gateway)
        log("stopped", app=worker.name)
        raise SystemExit(0) from None
    except SystemExit:  # a refused certificate: its one line
        _let_jvm_start(gateway)
        raise
    return Launched(worker, config, gateway, stop.requested)


JVM_START_WAIT_S = 10  # at most; a stop must still end within Heroku's 30 s


def _let_jvm_start(gateway: "Future[JavaGateway]") -> None:
    """Wait until the JVM has said where its gateway listens (or failed to),
    before the process ends: its end removes the folder the JVM writes that
    to, and a JVM that found it gone would print a Java stack trace under
    the process's one line. A started JVM ends with this process, whose end
    closes its stdin."""
    wait([gateway], timeout=JVM_START_WAIT_S)


class StopSignal:
    """SIGTERM and SIGINT as the stop event every loop checks.

    Python runs a signal's handler on the main thread between two of its
    bytecodes, wherever that thread is: inside `log()` with its lock held,
    or inside an Event's own lock. A handler that took either would wait
    for itself for good, and Heroku would SIGKILL the dyno 30 s later. So
    the handler takes no lock and does no I/O: the interpreter's own C
    handler writes the signal's number to a socket (signal.set_wakeup_fd),
    and the thread `stop-signal` reads it there, logs `stop_requested` and
    sets `requested`.

    Threads: made on the main thread (Python sets handlers there only);
    `requested` is set by the `stop-signal` thread and read by any."""

    def __init__(self) -> None:
        self.requested = StopRequest()
        self._wakeups, writing_end = socket.socketpair()
        writing_end.setblocking(False)  # set_wakeup_fd needs it: a signal handler must never wait
        self._writing_end = writing_end  # kept open for the process's life
        signal.set_wakeup_fd(writing_end.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _noted)
        threading.Thread(target=self._watch, name="stop-signal", daemon=True).start()

    def _watch(self) -> None:
        while signals := self._wakeups.recv(64):
            for signum in signals:
                if signum in (signal.SIGTERM, signal.SIGINT):
                    log("stop_requested", signal=signal.Signals(signum).name)
                    self.requested.set()


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python handler, which must exist for the signal not to kill the
    process; the C handler has already written the signal to the socket."""
