"""The lifecycle every worker shares.

A service gives its name, its input topic and a function that starts its
streaming query on a Kafka source; `run` does the rest:

* builds a SparkSession sized for the dyno (shared.spark);
* starts the query from the offsets stored outside the dyno (the consumer
  group's committed offsets by default; Postgres for the services that keep
  their progress there), on a fresh local checkpoint: a dyno's disk starts
  empty, so no local checkpoint is ever trusted;
* after each micro-batch, logs one key=value line and commits the batch's end
  offsets to the consumer group `<prefix><name>-app`, so Kafka's own tools
  show the worker's lag;
* restarts a failed query from the stored offsets, with backoff;
* on SIGTERM lets the running micro-batch finish, stops, and exits 0.
"""

import json
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQueryListener

from shared import config as config_module
from shared import spark as spark_module
from shared.exactly_once import PostgresProgress, engine_for
from shared.logs import log
from shared.migrations import migrate
from shared.tls_check import check_tls

GRACEFUL_STOP_SECONDS = 20  # Heroku sends SIGKILL 30 s after SIGTERM
MAX_BACKOFF_SECONDS = 30


class ConsumerGroup:
    """A worker's consumer group: where its progress shows, and by default lives."""

    def __init__(self, kafka, app, topic):
        self.group_id = kafka.group_id(app)
        self.topic = kafka.topic(topic)
        self._admin = KafkaAdminClient(**kafka.kafka_python_kwargs())
        self._lock = threading.Lock()

    def _call(self, method, *args, timeout=60):
        """An admin call, retried while Kafka says the error is passing."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._lock:
                    return method(*args)
            except KafkaError as error:
                if not error.retriable or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def partitions(self):
        (description,) = self._call(self._admin.describe_topics, [self.topic])
        return sorted(partition["partition_index"] for partition in description["partitions"])

    def committed(self):
        """{partition: next offset} as committed by this group."""
        offsets = self._call(self._admin.list_group_offsets, {self.group_id: None})[self.group_id]
        return {tp.partition: meta.offset for tp, meta in offsets.items()
                if tp.topic == self.topic and meta.offset >= 0}

    def commit(self, offsets):
        if not offsets:
            return
        self._call(self._admin.alter_group_offsets, self.group_id, {
            TopicPartition(self.topic, partition): OffsetAndMetadata(offset, "", -1)
            for partition, offset in offsets.items()})

    def close(self):
        self._admin.close()


def starting_offsets(partitions, stored, start_from="earliest"):
    """Spark wants every partition named: stored ones resume, new ones begin
    at the earliest (-2) or latest (-1) offset."""
    default = -1 if start_from == "latest" else -2
    return {partition: stored.get(partition, default) for partition in partitions}


def end_offsets(progress):
    """{partition: next offset} that a finished micro-batch reached."""
    (source,) = progress.sources
    (offsets,) = json.loads(source.endOffset).values()
    return {int(partition): offset for partition, offset in offsets.items()}


def lag(progress):
    (source,) = progress.sources
    if not source.latestOffset:
        return 0
    (latest,) = json.loads(source.latestOffset).values()
    end = end_offsets(progress)
    return sum(max(0, offset - end.get(int(partition), 0)) for partition, offset in latest.items())


class BatchLog(StreamingQueryListener):
    """One log line per finished micro-batch, and its offsets committed."""

    def __init__(self, app, group):
        self.app = app
        self.group = group
        self.extra_fields = {}  # batch id -> fields a service reported
        self.last_batch = None  # (run id, batch id): batch ids restart with each run

    def report(self, batch_id, **fields):
        """Called by a service during a batch: fields for that batch's line."""
        self.extra_fields.setdefault(batch_id, {}).update(fields)

    def onQueryStarted(self, event):
        self.extra_fields.clear()  # left by a run that failed

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        if (progress.runId, progress.batchId) == self.last_batch:
            return  # a progress report without a new batch
        self.last_batch = (progress.runId, progress.batchId)
        try:
            self.group.commit(end_offsets(progress))
            committed = "yes"
        except Exception as error:  # the next batch commits again
            committed = f"no ({type(error).__name__})"
        rows_out = progress.sink.numOutputRows
        log("batch", app=self.app, batch=progress.batchId,
            rows_in=progress.numInputRows,
            **({"rows_out": rows_out} if rows_out >= 0 else {}),
            duration_ms=progress.durationMs.get("triggerExecution", 0),
            lag=lag(progress), committed=committed,
            **self.extra_fields.pop(progress.batchId, {}))


class Stopper:
    """Turns SIGTERM and SIGINT into an event the main loop checks."""

    def __init__(self):
        self.requested = threading.Event()
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
    # Workers that write to Postgres keep their offsets there, with their results.
    progress: PostgresProgress = None
    partitions: tuple = ()  # of the input topic, when the query started


def run(app, topic, start_query, *, transactional=False):
    """Run a worker until SIGTERM.

    start_query(context, source, checkpoint_folder) -> StreamingQuery.
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
    spark = spark_module.session(app)
    stopper = Stopper()
    group = ConsumerGroup(config.kafka, app, topic)
    context = Context(config, BatchLog(app, group), stopper.requested)
    if transactional:
        engine = engine_for(config.database_url)
        migrate(engine)
        context.progress = PostgresProgress(engine, group.group_id, group.topic, stopper.requested)
    spark.streams.addListener(context.batch_log)
    log("start", app=app, topic=group.topic, group=group.group_id)

    failures = 0
    while not stopper.requested.is_set():
        stored = context.progress.stored() if transactional else group.committed()
        context.partitions = tuple(group.partitions())
        offsets = starting_offsets(context.partitions, stored, spark_module.start_from())
        source = spark_module.kafka_stream(spark, config.kafka, topic, app, offsets)
        with tempfile.TemporaryDirectory(prefix=f"{app}-checkpoint-") as checkpoint:
            query = start_query(context, source, checkpoint)
            error = supervise(query, stopper.requested)
        if error is None:
            if query.lastProgress:  # the listener may not have had it yet
                group.commit(end_offsets(query.lastProgress))
            break
        failures = failures + 1 if query.lastProgress is None else 1  # reset by a batch done
        backoff = min(MAX_BACKOFF_SECONDS, 2 ** failures)
        log("query_failed", app=app, error=_error_summary(error), retry_in_s=backoff)
        stopper.requested.wait(backoff)

    spark.stop()
    group.close()
    log("stopped", app=app)


def supervise(query, stop_requested):
    """Wait for the query to fail or a stop to be asked for; return its error."""
    try:
        while query.isActive and not stop_requested.is_set():
            query.awaitTermination(1)
    except StreamingQueryException as error:  # raised once the query has failed
        return error
    if query.isActive:
        stop_gracefully(query)
        return None
    return query.exception()


def stop_gracefully(query):
    """Let the running micro-batch finish, then stop before the next begins."""
    deadline = time.monotonic() + GRACEFUL_STOP_SECONDS
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def _error_summary(error):
    """The innermost exception line: a failed query wraps the Python error of
    a foreachBatch function in pages of Spark's own text."""
    text = str(error)
    causes = re.findall(r"^([\w.]*(?:Error|Exception)): (.+)$", text, re.MULTILINE)
    line = "{}: {}".format(*causes[-1]) if causes else (text.strip() or type(error).__name__)
    return line.splitlines()[0][:300]
