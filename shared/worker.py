"""The lifecycle every worker shares.

A service gives its name, its input topic and a function that starts its
streaming query on a Kafka source; `run` does the rest:

* builds a SparkSession sized for the dyno (shared.spark) and meanwhile
  joins the consumer group `<prefix><name>-app`, which gives this copy its
  share of the topic's partitions (shared.group_member); if the group has
  not answered once Spark is up, warms Spark up on a thread of its own
  (shared.warm_up) while it waits;
* starts the query on those partitions from the offsets stored outside the
  dyno (the group's committed offsets by default; Postgres for the services
  that keep their progress there), on a fresh local checkpoint: a dyno's disk
  starts empty, so no local checkpoint is ever trusted;
* after each micro-batch, logs one key=value line and commits the batch's end
  offsets to the group, so Kafka's own tools show the worker's lag;
* restarts the query on its new partitions after a rebalance;
* restarts a failed query from the stored offsets, with backoff;
* on SIGTERM lets the running micro-batch finish, stops, and exits 0.
"""

import re
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from kafka.errors import KafkaError
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from shared import config as config_module
from shared import spark as spark_module
from shared.batch_size import BatchSize
from shared.exactly_once import PostgresProgress, engine_for
from shared.group_member import GroupMember, stop_gracefully
from shared.logs import log
from shared.migrations import migrate
from shared.offsets import Offsets, end_offsets, lag, unread_ranges
from shared.outages import StopRequested, backoff_seconds
from shared.tls_check import check_tls

# How Spark 4.2's Kafka source fails on a record timestamp it cannot convert
# to microseconds (a KafkaIllegalStateException; 4.0 raised ArithmeticException).
UNCONVERTIBLE_TIMESTAMP = "overflows when converting to Spark"
# A query that failed this many times in a row, each time with a task failing
# on the same exception, has the record it fails on searched for and skipped
# (skip_failing_record), unless the exception says nothing of a record: the
# broker, Spark's Kafka plumbing or the network (an outage), memory, or a
# class or native library missing from the slug (a bug of the build, which
# would otherwise have every record it meets skipped).
SEARCH_AFTER_FAILURES = 3
NOT_A_RECORD = re.compile(
    r"^(org\.apache\.kafka\.|org\.apache\.spark\.sql\.kafka010\.|java\.io\.|java\.net\.)|Timeout|OutOfMemory"
    r"|ClassNotFound|NoClassDefFound|UnsatisfiedLink|NoSuch(Method|Field)Error")


def starting_offsets(partitions, stored, start_from="earliest"):
    """Spark wants every partition named: stored ones resume, new ones begin
    at the earliest (-2) or latest (-1) offset."""
    default = -1 if start_from == "latest" else -2
    return {partition: stored.get(partition, default) for partition in partitions}


class BatchLog:
    """The one key=value line of each micro-batch.

    A service adds fields to its batch's line with `report`, from the thread
    that runs its foreachBatch function; `write` runs on Spark's listener
    thread once the batch is done, so the two meet under a lock."""

    def __init__(self, app: str):
        self.app = app
        self._fields: dict[int, dict] = {}  # batch id -> fields a service reported
        self.abandoned: set[int] = set()  # batches of this query run that stored nothing
        self._lock = threading.Lock()

    def report(self, batch_id: int, **fields) -> None:
        with self._lock:
            self._fields.setdefault(batch_id, {}).update(fields)

    def abandon(self, batch_id: int) -> None:
        """The batch stored nothing (see shared.exactly_once): no line, no commit."""
        with self._lock:
            self.abandoned.add(batch_id)

    def forget_reports(self) -> None:
        """Drop what a run that failed reported: the next run's ids start again."""
        with self._lock:
            self._fields.clear()
            self.abandoned.clear()

    def write(self, progress) -> None:
        observed = {name: value for row in progress.observedMetrics.values()
                    for name, value in row.asDict().items()}
        rows_out = progress.sink.numOutputRows
        fields = {"app": self.app, "batch": progress.batchId, "rows_in": progress.numInputRows,
                  **({"rows_out": rows_out} if rows_out >= 0 else {}),
                  "duration_ms": progress.durationMs.get("triggerExecution", 0), "lag": lag(progress),
                  **observed}
        with self._lock:
            fields.update(self._fields.pop(progress.batchId, {}))  # a service's own word wins
        log("batch", **fields)


class BatchListener(StreamingQueryListener):
    """What happens once a micro-batch is done: its offsets handed to the
    group member (which commits them from its own thread), records that
    retention removed reported, and its log line written.

    Spark calls these methods on its listener thread, behind the query: a
    report may arrive after the next batch began, or after the query
    stopped. They must not block: the next report waits behind them."""

    def __init__(self, context: "Context", member: GroupMember):
        self.context = context
        self.member = member
        self.last_batch: tuple[str, int] | None = None  # (run id, batch id): ids restart with each run

    def onQueryStarted(self, event):
        self.context.batch_log.forget_reports()

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        if (progress.runId, progress.batchId) == self.last_batch:
            return  # a progress report without a new batch
        self.last_batch = (progress.runId, progress.batchId)
        if progress.batchId in self.context.batch_log.abandoned:
            return
        self.member.commit(progress)
        if unread := unread_ranges(progress, self.context.starting_offsets):
            self.member.report_data_lost(unread)
        self.context.batch_log.write(progress)


class Stopper:
    """Turns SIGTERM and SIGINT into an event the main loop checks."""

    def __init__(self, requested: threading.Event):
        self.requested = requested
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._request)

    def _request(self, signum, frame):
        log("stop_requested", signal=signal.Signals(signum).name)
        self.requested.set()


@dataclass
class Context:
    """What a service's query gets to work with."""

    config: config_module.Config
    batch_log: BatchLog
    stop_requested: threading.Event
    batch_size: BatchSize  # how many records a batch reads
    # Workers that write to Postgres keep their offsets there, with their results.
    progress: PostgresProgress | None = None
    # Where the running query began, for each partition assigned to this copy;
    # set by the main thread before each query run starts.
    starting_offsets: Offsets = field(default_factory=dict)
    # Why a foreachBatch function gave up on a batch (shared.exactly_once):
    # the main thread then ends the query run and starts it again.
    run_error: Exception | None = None


class StartQuery(Protocol):
    def __call__(self, context: Context, source: DataFrame, checkpoint: str) -> StreamingQuery:
        """Start the service's query on `source` (the Kafka records of this
        copy's partitions), checkpointed in the folder `checkpoint`. Called
        on the main thread, once per query run."""


class Setup(Protocol):
    def __call__(self, context: Context) -> None:
        """Once per process, on the main thread, before the first query:
        threads a service runs beside its queries start here."""


class WarmUp(Protocol):
    def __call__(self, spark: SparkSession, config: config_module.Config) -> None:
        """Once per process, on a thread of its own, when Spark has started
        on a local master before the group has answered: run the service's
        topology on made-up records (shared.warm_up). The first query shares
        what that warms (classes initialized and generated, code compiled)
        and waits for none of it."""


def run(app: str, topic: str, start_query: StartQuery, *, batch_records: int, read_headers: bool = False,
        transactional: bool = False, setup: Setup | None = None, warm_up: WarmUp | None = None) -> None:
    """Run a worker until SIGTERM.

    batch_records: the most records of a micro-batch, unless MAX_OFFSETS_PER_TRIGGER says.
    read_headers: the source has the records' `headers` column.
    transactional: the worker writes each batch to Postgres together with its
    offsets (shared.exactly_once); its progress lives there, and the schema is
    migrated first.
    """
    config = config_module.load(needs_database=transactional)
    check_tls(config.kafka)
    # The JVM is started with SIGTERM ignored (the disposition is inherited),
    # so Heroku's SIGTERM to every process of the dyno does not stop Spark
    # under the running batch; Python stops it in order below.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop_requested = threading.Event()
    spark, member, progress, warming = start(config, app, topic, transactional, stop_requested, warm_up)
    # A foreachBatch worker measures the bytes of its batches; the text
    # processor's stream through Spark, from Kafka to Kafka.
    batch_size = BatchSize(config.spark.max_offsets_per_trigger or batch_records,
                           config.spark.max_bytes_per_trigger if transactional else None)
    try:
        if member is None:  # a stop came before the group was joined
            raise StopRequested
        context = Context(config, BatchLog(app), stop_requested, batch_size, progress)
        if setup:
            setup(context)
        spark.streams.addListener(BatchListener(context, member))
        log("start", app=app, topic=member.topic, group=member.group_id)
        run_queries(spark, context, member, topic, start_query, read_headers)
    except StopRequested:  # asked for while a broker or Postgres was away
        pass
    if warming:
        warming.join()  # a few seconds at most: Spark stopped under it would fail it
    spark.stop()
    if member is not None:
        member.close()
    log("stopped", app=app)


def start(config, app, topic, transactional, stop_requested, warm_up=None):
    """The SparkSession, this copy's group member and, for a worker that keeps
    its progress in Postgres, that progress with the schema migrated (no
    member nor progress when a stop came first), and the thread that warms
    Spark up, if any. The group join (a broker holds a new group's first join
    3 s) and the migration go on while Spark's JVM starts (2 to 3 s on 2
    cores, with the slug's class-data archive); the warm-up, while the group
    has still not answered."""
    spark_started = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        joined = pool.submit(join_group, config, app, topic, transactional, stop_requested, spark_started)
        try:
            spark = spark_module.session(app, config.kafka, config.spark)
        except BaseException:
            stop_requested.set()  # the group member gives up too
            raise
        finally:
            spark_started.set()
        Stopper(stop_requested)  # the JVM has started: SIGTERM now stops the worker in order
        warming = None
        # Only while the group has not answered: with the partitions there
        # before Spark, a warm-up beside the first query cost the aggregator
        # 0.6 s. Not on a cluster: a job waiting there for executors would
        # hold the stop.
        if warm_up and not joined.done() and not config.spark.on_cluster:
            warming = threading.Thread(target=timed_warm_up, args=(warm_up, spark, config), name="warm-up",
                                       daemon=True)
            warming.start()
        try:
            return spark, *joined.result(), warming
        except StopRequested:  # asked for while a broker or Postgres was away
            return spark, None, None, warming


def timed_warm_up(warm_up, spark, config):
    began = time.monotonic()
    warm_up(spark, config)
    log("warmed_up", seconds=round(time.monotonic() - began, 1))


def join_group(config, app, topic, transactional, stop_requested, spark_started):
    """This copy's group member, polled until the group has given it its
    partitions or Spark has started, and for a worker that keeps its progress
    in Postgres, that progress with the schema migrated. Runs on its own
    thread, while Spark starts; the member is the main thread's once this
    returns."""
    member = GroupMember(config.kafka, app, topic, stop_requested)
    try:
        progress = None
        if transactional:
            engine = engine_for(config.database_url)
            progress = PostgresProgress(engine, member.group_id, member.topic, stop_requested)
            progress.retrying(lambda: migrate(engine))
        while member.partitions is None and not spark_started.is_set() and not stop_requested.is_set():
            member.poll()
    except BaseException:
        member.close()
        raise
    return member, progress


def run_queries(spark, context, member, topic, start_query, read_headers):
    """Run the query on this copy's partitions, again after each rebalance,
    each failure and each change of the batch size, until a stop is asked for."""
    app, stop_requested = context.batch_log.app, context.stop_requested
    failures = 0
    while (partitions := member.wait_for_partitions(stop_requested)) is not None:
        context.starting_offsets = resume_offsets(context, member, partitions)
        source = spark_module.kafka_stream(spark, context.config.kafka, topic, app,
                                           context.starting_offsets, context.batch_size.records, read_headers)
        with tempfile.TemporaryDirectory(prefix=f"{app}-checkpoint-") as checkpoint:
            query = start_run(context, member, start_query, source, checkpoint)
            error = supervise(query, context, member)
        if error is None or stop_requested.is_set():
            if stop_requested.is_set():
                member.commit_last(query, context.batch_log.abandoned)
            continue  # stopping, the group gave this copy other partitions, or batches change size
        summary = _error_summary(error)
        if UNCONVERTIBLE_TIMESTAMP in str(error) and (skip_unreadable_records(
                spark, context, member, topic, start_query, read_headers)
                or stop_requested.is_set()):
            continue
        stored_a_batch = (query.lastProgress is not None
                          and query.lastProgress.batchId not in context.batch_log.abandoned)
        failures = 1 if stored_a_batch else failures + 1
        cause = failing_record_cause(error)
        if failures >= SEARCH_AFTER_FAILURES and cause and (
                skip_failing_record(spark, context, member, topic, start_query, read_headers, cause)
                or stop_requested.is_set()):
            # The next failure searches at once: bad records often come in runs.
            failures = SEARCH_AFTER_FAILURES - 1
            continue
        backoff = backoff_seconds(failures)
        log("query_failed", app=app, error=summary, retry_in_s=backoff)
        member.wait(backoff, stop_requested)


def start_run(context, member, start_query, source, checkpoint):
    """Start a query run on `source`, with no batch given up on yet."""
    context.run_error = None
    context.batch_size.changed = False
    return member.start(lambda: start_query(context, source, checkpoint))


def resume_offsets(context, member, partitions):
    """Where a query run on `partitions` begins: the offsets stored with the
    results in Postgres, or else committed to the group."""
    stored = context.progress.stored() if context.progress else member.committed()
    return starting_offsets(partitions, stored, context.config.spark.start_from)


def skip_unreadable_records(spark, context, member, topic, start_query, read_headers):
    """A record whose Kafka timestamp Spark cannot convert fails Spark's
    Kafka source on every retry (Spark allows no consumer interceptor to mend
    it). Finds the first such record of each partition within the next batch,
    runs the query over the records before it alone, then stores the offsets
    past it. Returns whether there was one."""
    if context.progress:  # the failed run may have stored batches before the one it failed in
        context.starting_offsets = resume_offsets(context, member, member.partitions)
    log("unreadable_record_scan", topic=member.topic,
        partitions=",".join(map(str, sorted(context.starting_offsets))))
    try:
        unreadable = member.first_unreadable(context.starting_offsets, context.batch_size.records)
    except KafkaError:  # the broker went away: the main loop retries with backoff
        return False
    if context.stop_requested.is_set():
        return False
    run = PartitionRun(spark, context, member, topic, start_query, read_headers)
    for partition, (first, offset) in sorted(unreadable.items()):
        if offset > first:
            outcome = run(partition, first, offset - first, until=offset)
            if outcome is None or outcome[0] < offset:
                return False  # failed or stopping: the main loop retries or stops
        skip_record(context, member, partition, offset, reason="timestamp_beyond_spark")
    return bool(unreadable)


def failing_record_cause(error) -> str | None:
    """The class of the exception at the root of a failed query's `error`
    (a StreamingQueryException, or the Py4JJavaError a foreachBatch function
    met), if a task threw it while reading records (not Spark planning a
    batch, not Python) and it says something of them (NOT_A_RECORD)."""
    root = None
    while error is not None and root is None:  # query.exception() holds its Java error in its cause
        root = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
        error = getattr(error, "_cause", None)
    if root is None:
        return None
    while root.getCause() is not None:
        root = root.getCause()
    name = root.getClass().getName()
    in_a_task = any(frame.getClassName() == "org.apache.spark.scheduler.Task" for frame in root.getStackTrace())
    return name if in_a_task and not NOT_A_RECORD.search(name) else None


def skip_failing_record(spark, context, member, topic, start_query, read_headers, cause) -> bool:
    """A query failed again and again, a task failing on `cause` each time.
    For each partition in turn, runs the query on it alone over the records
    the failing batch held, with half as many records a batch after each
    failure (what goes through is stored), until a batch of one record
    fails: that record is skipped. log2 of a batch's records in query runs
    (8 for 200). Returns whether it skipped one; gives up on a stop, on
    another error (an outage meanwhile), and when every partition's records
    went through."""
    if not member.partitions:  # a rebalance began meanwhile
        return False
    context.starting_offsets = resume_offsets(context, member, member.partitions)
    log("failing_record_search", topic=member.topic, error=cause,
        partitions=",".join(map(str, sorted(context.starting_offsets))))
    run = PartitionRun(spark, context, member, topic, start_query, read_headers, cause)
    for partition, starting in sorted(context.starting_offsets.items()):
        first, end = member.offset_range(partition, starting)
        last = min(end, first + context.batch_size.records)  # if here, the failing record is before it
        size = last - first
        while size > 0:
            outcome = run(partition, first, size, until=last)
            if outcome is None:
                return False
            first, failed = outcome  # a failed run stored what it could
            if not failed:
                break  # not in this partition
            if size == 1:
                skip_record(context, member, partition, first, reason="failing", error=cause)
                return True
            last, size = first + size, size // 2  # the failing batch began at `first`
    return False


class PartitionRun:
    """A query run on one partition alone, to find the record it fails on."""

    def __init__(self, spark, context, member, topic, start_query, read_headers, cause=None):
        self.spark, self.context, self.member, self.topic = spark, context, member, topic
        self.start_query, self.read_headers, self.cause = start_query, read_headers, cause

    def __call__(self, partition: int, first: int, records: int, until: int) -> tuple[int, bool] | None:
        """Run the query on `partition` from `first`, `records` a batch,
        until it stored the records before `until` or failed. Returns (where
        what it stored ends, whether it failed short of `until`, with a task
        failing on `cause` if given); None on a stop or on another error."""
        context, member = self.context, self.member
        context.starting_offsets = {partition: first}
        source = spark_module.kafka_stream(self.spark, context.config.kafka, self.topic, context.batch_log.app,
                                           context.starting_offsets, records, self.read_headers)
        with tempfile.TemporaryDirectory(prefix=f"{context.batch_log.app}-checkpoint-") as checkpoint:
            query = start_run(context, member, self.start_query, source, checkpoint)
            while (query.isActive and context.run_error is None and not context.stop_requested.is_set()
                   and not context.batch_size.changed and self._stored(query, partition, first) < until):
                member.poll(0.1)
            stop_gracefully(query)
            member.forget(query)
        if context.progress:
            stored = context.progress.stored().get(partition, first)
        else:  # the listener's commit may have been forgotten with the query
            stored = self._stored(query, partition, first)
            member.commit_now({partition: stored})
        if context.stop_requested.is_set():
            return None
        if stored >= until:
            return stored, False
        error = context.run_error or query.exception()
        return (stored, True) if self.cause is None or failing_record_cause(error) == self.cause else None

    def _stored(self, query, partition, first):
        """Where the run's last batch that went through ended."""
        last = query.lastProgress
        if last is None or last.batchId in self.context.batch_log.abandoned:
            return first
        return end_offsets(last).get(partition, first)


def skip_record(context, member, partition, offset, **why):
    """Store the offset past one record, unread."""
    if context.progress:
        context.progress.commit({partition: (offset, offset + 1)}, lambda connection: {})
    else:
        member.commit_now({partition: offset + 1})
    log("skipped_record", topic=member.topic, partition=partition, offset=offset, **why)


def supervise(query, context, member):
    """Keep the group membership while the query runs; return the query's
    error once it fails or gives up on a batch, or None once it was stopped
    (by a stop asked for, a rebalance or a new batch size)."""
    try:
        while (query.isActive and not context.stop_requested.is_set() and context.run_error is None
               and not context.batch_size.changed):
            member.poll()
            query.awaitTermination(0.01)
    except StreamingQueryException as error:  # raised once the query has failed
        return error
    if query.isActive:
        stop_gracefully(query)
    return context.run_error or query.exception()


def _error_summary(error):
    """The innermost exception line: a failed query wraps the Python error of
    a foreachBatch function in pages of Spark's own text."""
    text = str(error)
    causes = re.findall(r"([\w.$]*(?:Error|Exception)): ([^\n]+)", text)
    line = "{}: {}".format(*causes[-1]) if causes else f"{type(error).__name__}: {text.strip()}"
    return line.splitlines()[0][:300]
