"""One query run: a Spark streaming query started on this copy's partitions
from the stored offsets, on a fresh local checkpoint, until it ends.

A QueryRun owns what belongs to one run and to no other: where it began,
the batches it gave up (abandoned: they stored nothing), the fields its
batches add to their log lines, and why it is ending. A report that Spark's
listener delivers late finds the run it belongs to by Spark's run id, so it
can never touch the next run. Every batch that stored something gets one
line: from Spark's report of it, or, once Spark's reports of the run ended
(`reports_ended`), from the service's own fields.

Threads:
- the main thread creates a run, starts and supervises its query
  (shared.worker.runner), reads `ending`, and ends its reports when Spark
  was lost under it;
- the thread Spark calls a foreachBatch function on (shared.worker.exactly_once)
  calls `abandon`, `end`, `report` and `pace` while a batch runs;
- Spark's listener thread calls BatchListener's methods after each batch,
  and as the query terminates;
- the member's `revoke` thread calls `Runs.revoke` in a rebalance (shared.worker.group_member).
Every field those threads share is behind the run's lock; a stop asked for
(`stop_gracefully`, or the run ending) is an event a paced batch waits on.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from py4j.java_gateway import JavaObject
from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from shared.levers import LEVERS
from shared.levers.json_listener import JsonReports
from shared.levers.phase import wait_for_phase
from shared.levers.small_first_batch import ONE_BATCH_TRIGGER
from shared.logs import log
from shared.offsets import Offsets, Ranges, end_offsets, lag, unread_ranges
from shared.worker import errors
from shared.worker.group_member import GroupMember
from shared.worker.lifecycle import Ended
from shared.worker.stop_budget import StopBudget
from shared.worker.triggers import STEADY_TRIGGER_S

PROCESSING = "Processing new data"  # Spark's status message while a micro-batch runs
BETWEEN_TRIGGERS = "Waiting for next trigger"  # and once each trigger is over, with or without a batch
KEPT_RUNS = 8  # late reports name a recent run; older ones are forgotten


class QueryRun:
    def __init__(self, app: str, starting_offsets: Offsets, one_batch: bool = False) -> None:
        self.app = app
        self.starting_offsets = starting_offsets  # {partition: next offset, or -2/-1}
        self.one_batch = one_batch  # it ends after its one trigger (a cold start's small first batch)
        self.query: StreamingQuery | None = None
        self._lock = threading.Lock()
        self._ending: tuple[Ended, BaseException | None] | None = None
        self._abandoned: set[int] = set()
        self._fields: dict[int, dict[str, Any]] = {}  # batch id -> fields the service reported
        self._reports_ended = False  # Spark reports none of the run's batches any more
        self._unreported: set[int] = set()  # batches logged without Spark's report
        self._reported_end: Offsets | None = None  # where the last batch the listener saw stored ended
        self._stop_asked = threading.Event()  # ends a paced batch's wait

    @property
    def id(self) -> str:
        assert self.query is not None
        return str(self.query.runId)

    def trigger(self, steady: str) -> str:
        """The processing-time trigger its query starts with: the worker's
        `steady` one, or for a run of one batch ONE_BATCH_TRIGGER, which
        never begins a second."""
        return ONE_BATCH_TRIGGER if self.one_batch else steady

    @property
    def ending(self) -> Ended | None:
        with self._lock:
            return self._ending[0] if self._ending else None

    @property
    def error(self) -> BaseException | None:
        """The error a foreachBatch function gave a batch up with, if any."""
        with self._lock:
            return self._ending[1] if self._ending else None

    def end(self, why: Ended, error: BaseException | None = None) -> None:
        """Ask the run to end; the first reason given wins. Its later batches store nothing."""
        with self._lock:
            if self._ending is None:
                self._ending = (why, error)
        self._stop_asked.set()

    def abandon(self, batch_id: int) -> None:
        """The batch stored nothing: no log line, no commit."""
        with self._lock:
            self._abandoned.add(batch_id)

    def abandoned(self, batch_id: int) -> bool:
        with self._lock:
            return batch_id in self._abandoned

    def report(self, batch_id: int, **fields: Any) -> None:
        """Fields for the batch's log line (a service's own word wins), or
        the line itself once Spark's reports ended."""
        with self._lock:
            if not self._reports_ended:
                self._fields.setdefault(batch_id, {}).update(fields)
                return
            self._unreported.add(batch_id)
        log_batch({"app": self.app, "batch": batch_id, **fields})

    def pace(self, batch_id: int, began: float, phase_s: float) -> None:
        """A stored batch that began at `began` (epoch seconds) holds its
        micro-batch open until the next one may begin `phase_s` past a
        second (shared.levers.phase), or a stop is asked for. Its
        line tells the wait apart (`waited_ms`), outside its `duration_ms`."""
        seconds = wait_for_phase(began, time.time(), phase_s, STEADY_TRIGGER_S)
        if seconds <= 0 or self._stop_asked.is_set():  # set as the run ends, too
            return
        waiting = time.monotonic()
        self._stop_asked.wait(seconds)
        with self._lock:
            if not self._reports_ended:  # else its line is written: the wait no longer matters
                self._fields.setdefault(batch_id, {})["waited_ms"] = int((time.monotonic() - waiting) * 1000)

    def ask_to_stop(self) -> None:
        """A paced batch stops waiting: its query is being stopped."""
        self._stop_asked.set()

    def stored_end(self) -> Offsets | None:
        """Where the run's last batch that stored anything ended: Spark's
        last progress, which is current, unless that batch was abandoned."""
        assert self.query is not None
        last = self.query.lastProgress
        if last is not None and not self.abandoned(last.batchId):
            return end_offsets(last)
        with self._lock:
            return self._reported_end

    def stored_a_batch(self) -> bool:
        """Whether its last batch went through."""
        assert self.query is not None
        last = self.query.lastProgress
        return last is not None and not self.abandoned(last.batchId)

    def stored_any_batch(self) -> bool:
        """Whether any of its batches went through: its last may be one that
        began as it ended, and stored nothing (stop_gracefully)."""
        if self.stored_a_batch():  # one call into the JVM, not one per recent batch
            return True
        assert self.query is not None
        return any(not self.abandoned(progress.batchId) for progress in self.query.recentProgress)

    def batch_done(self, progress: Any) -> dict[str, Any] | None:
        """Listener thread: the batch's fields for its log line, or None if
        it was abandoned or already logged as unreported."""
        with self._lock:
            if progress.batchId in self._abandoned or progress.batchId in self._unreported:
                return None
            self._reported_end = end_offsets(progress)
            return self._fields.pop(progress.batchId, {})

    def reports_ended(self) -> None:
        """Spark will report none of the run's batches any more: its query
        terminated, or its context was stopped under it (a batch may still
        be storing then). A batch the service stored gets its line from the
        service's fields alone, now or as it is stored; a report of it that
        still comes writes no second line."""
        with self._lock:
            self._reports_ended = True
            batches, self._fields = self._fields, {}
            self._unreported.update(batches)
        for batch_id, fields in sorted(batches.items()):
            log_batch({"app": self.app, "batch": batch_id, **fields})


class Runs:
    """This process's query runs, the current one and a few before it, by
    Spark's run id. The main thread starts them; the listener looks them up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, QueryRun] = OrderedDict()
        self.current: QueryRun | None = None

    def start(self, run: QueryRun, member: GroupMember, start_query: Callable[[], StreamingQuery]) -> None:
        """Start the run's query. A listener report of its first batch waits
        for the lock, so it always finds the run. A rebalance that took the
        partitions while the query started ends the run at once (REVOKED):
        the revoke had no run to stop, and nothing the run stores is committed."""
        with self._lock:
            run.query = start_query()
            self._by_id[run.id] = run
            while len(self._by_id) > KEPT_RUNS:
                self._by_id.popitem(last=False)
            self.current = run
            accepted = member.begin_run(run.id)
        if not accepted:  # stopped outside the lock: the listener looks runs up under it
            run.end(Ended.REVOKED)
            stop_now(run.query)

    def of(self, run_id: str) -> QueryRun | None:
        with self._lock:
            return self._by_id.get(run_id)

    def revoke(self) -> Offsets | None:
        """The group is taking this copy's partitions (on the member's
        `revoke` thread, while the main thread waits in the member's poll):
        the current run's batch finishes, its query stops, and where it
        ended is committed."""
        run = self.current
        if run is None or run.query is None or not run.query.isActive:
            return None
        run.end(Ended.REVOKED)
        stop_gracefully(run, StopBudget())
        return run.stored_end()


class Commits(Protocol):
    """Where BatchListener hands each batch's offsets (a GroupMember, which
    commits them on the main thread): called on Spark's listener thread, so
    neither method may block."""

    def report(self, run_id: str, offsets: Offsets, batch_ms: int) -> None: ...

    def report_unread(self, ranges: Ranges) -> None: ...


class BatchListener(StreamingQueryListener):
    """After each micro-batch: its offsets handed to the group member (which
    commits them from the main thread), records that retention removed
    handed over to be looked up, and its one key=value log line written.

    Spark calls these methods on its listener thread, behind the query: a
    report may arrive after the next batch began, or after the query
    stopped. They must not block: the next report waits behind them."""

    def __init__(self, app: str, runs: Runs, member: Commits) -> None:
        self.app = app
        self.runs = runs
        self.member = member
        self.last_batch: tuple[str, int] | None = None  # (run id, batch id): ids restart with each run
        self._java: JavaObject | None = None

    @property
    def _jlistener(self) -> JavaObject:
        """What `spark.streams.addListener` registers with Spark: JsonReports
        instead of PySpark's own adapter (unless the lever is off)."""
        if not LEVERS.json_listener:
            return super()._jlistener
        if self._java is None:
            assert SparkContext._jvm is not None
            wrapper = getattr(SparkContext._jvm, "org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper")
            self._java = wrapper(JsonReports(self))
        return self._java

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if run := self.runs.of(str(event.runId)):  # after the query's last progress report
            run.reports_ended()

    def onQueryProgress(self, event: Any) -> None:
        self.batch_done(event.progress)

    def batch_done(self, progress: Any) -> None:
        run_id = str(progress.runId)
        if (run_id, progress.batchId) == self.last_batch:
            return  # a progress report without a new batch
        self.last_batch = (run_id, progress.batchId)
        run = self.runs.of(run_id)
        fields = run.batch_done(progress) if run else None
        if run is None or fields is None:
            return
        line = {**batch_fields(self.app, progress), **fields}
        line["duration_ms"] -= line.get("waited_ms", 0)  # a paced batch's wait is not its work
        self.member.report(run_id, end_offsets(progress), line["duration_ms"])
        if unread := unread_ranges(progress, run.starting_offsets):
            self.member.report_unread(unread)
        if progress.numInputRows == 0:
            return  # a new run's first trigger on a stream with nothing waiting: no batch to tell of
        log_batch(line)


def log_batch(line: dict[str, Any]) -> None:
    """A batch's one line, its figures in l2met's form too. A batch Spark did
    not report has the service's own figures alone (no duration_ms, lag)."""
    log("batch", **line, **l2met(line["app"], line))


def l2met(app: str, line: dict[str, Any]) -> dict[str, Any]:
    """The batch's figures again in l2met's form, which Heroku's log-based
    metrics add-ons chart with no code: counts add up, a measure is a
    duration, a sample is a level."""
    skipped = sum(int(value) for name, value in line.items() if name.startswith("skipped_"))
    return {f"count#{app}.rows_in": line["rows_in"], f"count#{app}.rows_out": line.get("rows_out", 0),
            f"count#{app}.skipped": skipped,
            **({f"measure#{app}.batch_ms": f"{line['duration_ms']}ms"} if "duration_ms" in line else {}),
            **({f"sample#{app}.lag": line["lag"]} if "lag" in line else {})}


def batch_fields(app: str, progress: Any) -> dict[str, Any]:
    """A batch's log line as Spark's progress tells it."""
    observed = {name: value for row in progress.observedMetrics.values() for name, value in row.asDict().items()}
    rows_out = progress.sink.numOutputRows
    return {"app": app, "batch": progress.batchId, "rows_in": progress.numInputRows,
            **({"rows_out": rows_out} if rows_out >= 0 else {}),
            "duration_ms": progress.durationMs.get("triggerExecution", 0), "lag": lag(progress), **observed}


def stop_gracefully(run: QueryRun, budget: StopBudget) -> None:
    """Let the micro-batch that is processing data finish (a paced one
    without its wait), then stop the run's query. On a
    backlog the next batch begins at once, with no gap between batches to
    wait for: that one is cut short as it begins. Its offsets are never
    stored, so the next run reads its records again (a word it sent already
    is counted once: see docs/architecture.md, "Exactly once, end to end").
    A trigger still asking Kafka for offsets has nothing to finish: during a
    broker outage it would hold the stop for a minute. A batch that did not
    finish in the budget's time for it (its broker away, say) is cut, and logged."""
    query = run.query
    assert query is not None
    run.ask_to_stop()
    last = query.lastProgress
    done = last.batchId if last is not None else -1  # the last batch finished when the stop was asked for
    allowed = budget.allow("batch")
    deadline = time.monotonic() + allowed
    while True:
        status = query.status
        if not (status["isTriggerActive"] and status["message"] == PROCESSING):
            break
        last = query.lastProgress
        if last is not None and last.batchId > done:
            break
        if time.monotonic() >= deadline:
            log("batch_cut", waited_s=round(allowed, 1))
            break
        time.sleep(0.05)
    stop_now(query)


_STOP_TIMED_OUT: set[str] = set()  # ids of queries whose stop timed out


def stop_now(query: StreamingQuery) -> None:
    """Stop the query, its running batch cut; a query whose thread did not
    end within spark.sql.streaming.stopTimeout (shared.spark) is logged.
    Its thread was interrupted and stays stuck (in a call to a broker that is
    away): a second stop, as the session stops, would wait as long again."""
    query_id = str(query.id)
    if query_id in _STOP_TIMED_OUT:
        return
    try:
        query.stop()
    except (Py4JJavaError, CapturedException) as error:
        _STOP_TIMED_OUT.add(query_id)
        log("query_stop_timed_out", error=errors.error_summary(error))
