"""This process's Spark: the SparkSession its query runs start on, and what
a Spark cluster's outage does to it.

A driver of a Spark cluster lives on the master and its executors. Two
outages take them away for good, and neither ends the process:

- the master removes the application (its executors failed in a row, or
  the master was stopped): Spark stops the driver's SparkContext under it;
- the master restarts (standalone, with no recovery mode): the new master
  knows nothing of the application and has its workers kill its executors,
  while the old SparkContext waits to be reconnected, for ever.

The supervisor asks `lost()` as it polls and before each query run; once
lost, it backs off and calls `renew()`, which starts a new SparkContext in
the same JVM: a new application on the master, resuming from the stored
offsets. A renewal that fails (the master is still away) leaves the driver
lost, and the supervisor tries again after a longer back-off. A new context
waits for the master to register it (60 s, when the master is away): a stop
asked for meanwhile ends the wait, and the process exits without it.

    running ──lost()──> lost ──renew()──> running
       │                  └─ renew() failed ─> lost (the next back-off is longer)
       └──stop()──> stopped  (at exit, from any state)

Threads: the main thread alone creates, renews and stops the session, and
asks `lost()`. A query's listener, added once, is added again to each new
session. A JVM thread that dies of an exception calls ThreadDeaths on a
Py4J thread.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors.exceptions.base import PySparkException
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from shared import background
from shared.logs import log
from shared.worker import errors
from shared.worker.query_run import stop_now

# A cluster replaces a lost executor in seconds; with none at all for this
# long, the master has forgotten the application (or is away): start anew.
EXECUTORLESS_SECONDS = 30.0


@dataclass
class Executors:
    """Whether a driver's executors are gone for good, from what it observes
    over time: how many are live, and how many it ever had (Spark's own
    record: an executor that came and went between two looks counts too).
    `now` is in seconds of a monotonic clock."""

    none_since: float | None = None

    def gone(self, live: int, ever: int, now: float) -> bool:
        if live > 0:
            self.none_since = None
            return False
        if ever == 0:
            return False  # a new application waits for its first executors as long as the cluster makes it
        if self.none_since is None:
            self.none_since = now
        return now - self.none_since >= EXECUTORLESS_SECONDS


class ThreadDeaths:
    """The JVM's handler of an exception no thread caught. When Spark stops
    a lost session's context (the master removed the application), the
    query running on it dies in its own thread of an exception nothing can
    catch: one line for that. Any other death is a bug, printed as Java
    prints it."""

    def __init__(self, jvm: Any, context_stopped: Callable[[], bool]) -> None:
        self._jvm = jvm
        self._context_stopped = context_stopped

    def uncaughtException(self, thread: Any, error: Any) -> None:  # noqa: N802 - Java's name
        if self._context_stopped():
            log("spark_thread_ended", thread=thread.getName(), error=error.toString().splitlines()[0][:300])
            return
        self._jvm.System.err.print(f'Exception in thread "{thread.getName()}" ')
        error.printStackTrace()

    class Java:
        implements = ["java.lang.Thread$UncaughtExceptionHandler"]


class Driver:
    """The session the main thread's query runs start on (the states above)."""

    def __init__(self, start: Callable[[], SparkSession], on_cluster: bool, stop_requested: threading.Event) -> None:
        self._start = start
        self._on_cluster = on_cluster
        self._stop_requested = stop_requested
        self._session: SparkSession | None = start()
        self._executors = Executors()
        self._listeners: list[StreamingQueryListener] = []
        if on_cluster:  # where Spark stops a context under its queries
            gateway = self._session.sparkContext._gateway
            assert gateway is not None  # Spark has started
            ensure_callback_server_started(gateway)
            handler = ThreadDeaths(gateway.jvm, self._context_stopped)
            gateway.jvm.java.lang.Thread.setDefaultUncaughtExceptionHandler(handler)

    @property
    def session(self) -> SparkSession:
        assert self._session is not None, "a query run starts only on a driver that is not lost"
        return self._session

    def add_listener(self, listener: StreamingQueryListener) -> None:
        self._listeners.append(listener)
        self.session.streams.addListener(listener)

    def lost(self) -> str | None:
        """Why this driver's Spark is gone for good, or None while it is not."""
        if self._session is None:
            return "no Spark session: its start failed"
        if self._context_stopped():
            return "Spark stopped the context: the cluster removed the application"
        if self._on_cluster:
            context = self._session.sparkContext._jsc.sc()
            # The driver is listed too; the status store lists the dead as well.
            live = len(context.statusTracker().getExecutorInfos()) - 1
            ever = context.statusStore().executorList(False).size() - 1
            if self._executors.gone(live, ever, time.monotonic()):
                return f"no executor for {EXECUTORLESS_SECONDS:.0f} s: the master forgot the application"
        return None

    def _context_stopped(self) -> bool:
        """Whether the session's context was stopped, or there is none; also
        from a Py4J thread (ThreadDeaths): the session is read once."""
        session = self._session
        java_context = session.sparkContext._jsc if session is not None else None
        return java_context is None or bool(java_context.sc().isStopped())

    def renew(self) -> None:
        """Stop the lost session and start a new one in the same JVM, unless
        a stop is asked for first."""
        self.stop()
        self._executors = Executors()
        starting = background.call(self._start, name="spark-session")
        while not starting.done():
            if self._stop_requested.wait(0.2):
                return  # still lost: the process exits, and the JVM with it
        try:
            self._session = starting.result()
            for listener in self._listeners:
                self._session.streams.addListener(listener)
        except (Py4JError, PySparkException) as error:  # the master still away: lost() says so
            log("spark_start_failed", error=errors.error_summary(error))

    def stop(self) -> None:
        """Stop the session, after its queries: a query still waiting on a lost
        cluster, stopped under it by its context, prints a stack trace."""
        if self._session is None:
            return
        if not self._context_stopped():  # a context Spark stopped has no query running
            for query in self._session.streams.active:
                stop_now(query)
        session, self._session = self._session, None
        session.stop()
