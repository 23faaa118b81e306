"""The warm_up lever: a worker's topology run on made-up Kafka records
while its group is joined (`WarmingUp`; a worker's `warm_up` makes the
records with `kafka_records`).

A JVM's first batch pays for what no class-data archive keeps: static
initializers (Spark's ICU case mapping), classes generated and compiled, and
code not yet compiled by the JIT. A broker holds a new group's first join
3 s, so running the topology once on made-up records mostly fills time the
worker would spend waiting (docs/decisions/warm-up.md).
"""

import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from shared import background
from shared.logs import log

RECORDS = 1000


def kafka_records(spark: SparkSession, values: list[str], headers: Column | None = None) -> DataFrame:
    """RECORDS rows with the Kafka source's columns (and `headers`, if
    given), stamped now, with values taken in turn from `values`."""
    value = F.element_at(F.array(*map(F.lit, values)), (F.col("id") % len(values) + 1).cast("int"))
    columns = [value.cast("binary").alias("key"), value.cast("binary").alias("value"), F.lit("t").alias("topic"),
               (F.col("id") % 2).cast("int").alias("partition"), F.col("id").alias("offset"),
               F.current_timestamp().alias("timestamp"), F.lit(0).alias("timestampType")]
    return spark.range(RECORDS).select(*columns, *([headers.alias("headers")] if headers is not None else []))


class WarmingUp:
    """The worker's warm-up (spec.WarmUp) on a thread of its own, in time the
    worker would otherwise spend waiting: it begins when Spark is up before
    the group has answered, and `cut` cancels its Spark jobs as the first
    query run starts. Beside a query it would compete with it for the cores:
    on a backlog, a warm-up that went on beside the first batch delayed the
    first commit (docs/decisions/warm-up.md). No cancel stops the planning
    of a job (in the JVM thread PySpark pins to the warm-up's thread), which
    went on beside the first batch: the cut gives that JVM thread the lowest
    CPU priority, so it runs only on a core nothing else wants.

    Threads: the main thread creates it and calls `cut` and `end`; the
    warm-up runs on its own thread, its jobs in a job group of its own.
    Under the lock: whether it was cut, and its JVM thread's Linux id
    while the warm-up runs."""

    def __init__(self, spark: SparkSession, warm_up: Callable[[], None]) -> None:
        self._spark = spark
        # Cancelled for good by the cut: a name no other job will have.
        self.job_group = f"warm-up-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._cut = threading.Event()
        self.jvm_thread: int | None = None
        self._thread = background.thread(lambda: self._run(warm_up), name="warm-up")

    def _run(self, warm_up: Callable[[], None]) -> None:
        began = time.monotonic()
        # interruptOnCancel: a cancelled task stops at once, not at its next record.
        self._spark.sparkContext.setJobGroup(self.job_group, "warm-up", interruptOnCancel=True)
        jvm_thread = pinned_jvm_thread(self._spark, self.job_group[:15])
        with self._lock:
            self.jvm_thread = jvm_thread
            if self._cut.is_set():
                _lowest_priority(jvm_thread)
        cut = False
        try:
            warm_up()
        except Exception:
            if not self._cut.is_set():
                raise  # a bug: printed with its traceback; the first batch is only colder
            cut = True
        finally:
            with self._lock:  # the JVM thread ends with this one: its id may then be another's
                self.jvm_thread = None
        log("warmed_up", seconds=round(time.monotonic() - began, 1), cut=str(cut).lower())

    def cut(self) -> None:
        """Cancel the warm-up's running job and any it starts after this,
        and leave what it does meanwhile the cores no one else wants."""
        with self._lock:
            if self._cut.is_set():
                return
            self._cut.set()
            _lowest_priority(self.jvm_thread)
        self._spark.sparkContext._jsc.sc().cancelJobGroupAndFutureJobs(self.job_group)

    def end(self) -> None:
        """Cut, and wait for the thread: Spark stopped under it would fail it."""
        self.cut()
        self._thread.join()


def _lowest_priority(thread: int | None) -> None:
    """Linux's lowest CPU priority (nice 19) for one thread of the JVM, for
    good: only a privileged process may raise a priority again."""
    if thread is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, thread, 19)
        except OSError:  # it ended meanwhile
            pass


def pinned_jvm_thread(spark: SparkSession, name: str) -> int | None:
    """The Linux thread id of the JVM thread that runs this Python thread's
    Py4J calls (PySpark pins one to each Python thread), renamed `name` to
    be found among the JVM's threads (Linux keeps 15 characters of it).
    None if the JVM is not this process's child or no thread has that name."""
    context = spark.sparkContext
    jvm_process = getattr(context._gateway, "proc", None)
    if jvm_process is None or context._jvm is None:
        return None
    context._jvm.java.lang.Thread.currentThread().setName(name)
    found = []
    for task in Path(f"/proc/{jvm_process.pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() == name[:15]:
                found.append(int(task.name))
        except OSError:  # a thread that ended meanwhile
            continue
    return found[0] if len(found) == 1 else None
