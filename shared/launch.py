"""A worker process's first steps, taken before its modules are imported:
its configuration read, its brokers' TLS checked, and Spark's JVM launched
on a thread of its own. Importing the rest of a worker (PySpark's SQL
functions, SQLAlchemy, the Kafka client, the lifecycle: about half a
second) then overlaps the JVM's start instead of preceding it
(docs/decisions/start-up.md).

Each service's `__main__` declares its `Launch` and calls `begin` before it
imports its worker; shared.worker.run takes over what began (the main
thread's, as everything until then).

From `begin` on, SIGTERM and SIGINT are a stop asked for (`Stopper`), at
any moment of the process's life: a dyno stopped in its first seconds
stops in order too. Spark's JVM ignores both (shared.driver_launch), and
Python stops it in order."""

import faulthandler
import signal
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from types import FrameType

from py4j.java_gateway import JavaGateway

from shared import background
from shared import config as config_module
from shared.logs import log
from shared.spark import DriverJvm, launch_jvm, set_jvm_environment
from shared.tls_check import check_tls


@dataclass(frozen=True)
class Launch:
    """What a worker's process starts with, known before its modules are imported."""

    app: str  # the worker's name (shared.worker.Worker.name)
    needs_database: bool  # its progress lives in Postgres
    jvm: DriverJvm = DriverJvm()  # its driver's young generation and JIT


@dataclass(frozen=True)
class Launched:
    launch: Launch
    config: config_module.Config
    gateway: "Future[JavaGateway]"  # to Spark's JVM, once it has started (shared.spark.session takes it)
    stop_requested: threading.Event  # set by SIGTERM or SIGINT; every loop of the worker checks it


def begin(launch: Launch) -> Launched:
    """Read the configuration and check TLS (a mistake in either ends the
    process with one line, before any JVM has started), then launch Spark's JVM."""
    # `kill -USR1 <pid>` (heroku ps:exec) prints every thread's stack to
    # stderr: what a worker that logs nothing is waiting on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = config_module.load(needs_database=launch.needs_database)
    check_tls(config.kafka)
    stopper = Stopper()
    set_jvm_environment(config.kafka, config.spark)
    gateway = background.call(lambda: launch_jvm(launch.app, config.spark, launch.jvm), name="jvm")
    return Launched(launch, config, gateway, stopper.requested)


class Stopper:
    """Turns SIGTERM and SIGINT into the stop event every loop checks."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._request)

    def _request(self, signum: int, frame: FrameType | None) -> None:
        log("stop_requested", signal=signal.Signals(signum).name)
        self.requested.set()
