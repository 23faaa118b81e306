"""A worker process, from start to exit: `run(worker)`.

`run` enters each resource in one ExitStack (Spark's JVM, the group member,
the warm-up thread), so every exit path, a stop, an outage at start or a
bug, releases them in order: the group hears at once that this copy left,
instead of waiting out its session. `Supervisor.run` is the main loop: one
query run after another, each step chosen by shared.worker.lifecycle.
"""

import secrets
import tempfile
import threading
from concurrent.futures import Future
from contextlib import ExitStack
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from shared import background, dead_letters
from shared import config as config_module
from shared import spark as spark_module
from shared.levers import LEVERS
from shared.levers.small_first_batch import cold_batch
from shared.levers.warm_up import WarmingUp
from shared.logs import log
from shared.migrations import migrate
from shared.offsets import Offsets
from shared.outages import StopRequested
from shared.worker import errors, search, spark_kafka
from shared.worker.batch_size import BatchSize
from shared.worker.driver import Driver
from shared.worker.exactly_once import foreach_batch
from shared.worker.group_member import WAITING_POLL_S, GroupMember
from shared.worker.launch import Launched, StopSignal, begin
from shared.worker.lifecycle import BackOff, Ended, History, NewSession, Resume, RunEnded, Scan, Search, Stop, next_step
from shared.worker.progress import GroupProgress, PostgresProgress, engine_for, starting_offsets
from shared.worker.query_run import BETWEEN_TRIGGERS, BatchListener, QueryRun, Runs, stop_gracefully
from shared.worker.sinks import KafkaSink, PostgresSink
from shared.worker.spec import Context, Worker
from shared.worker.stop_budget import budget_of


def run(worker: Worker, launched: Launched | None = None) -> None:
    """Run `worker` until SIGTERM or SIGINT; then exit 0. `launched`: the
    process's first steps, which shared.worker.main took; without, they
    are taken here."""
    launched = launched or begin(worker, StopSignal())
    config, stop_requested = launched.config, launched.stop_requested
    runs = Runs()
    with ExitStack() as resources:  # released last in, first out
        try:
            driver, member, progress, warming = start(worker, launched, runs, resources)
            context = Context(config, progress, batch_size(worker, config), stop_requested)
            if isinstance(worker.sink, PostgresSink):
                worker.sink.open(context)
            driver.add_listener(BatchListener(worker.name, runs, member))
            log("start", app=worker.name, topic=member.topic, group=member.group_id)
            Supervisor(worker, driver, member, context, runs, warming).run()
        except StopRequested:  # asked for while a broker or Postgres was away
            pass
    log("stopped", app=worker.name)


def batch_size(worker: Worker, config: config_module.Config) -> BatchSize:
    """How many records `worker`'s batches read: MAX_OFFSETS_PER_TRIGGER or
    its own number. A Postgres worker measures the bytes of its batches
    against MAX_BYTES_PER_TRIGGER; a Kafka sink's stream through Spark."""
    records = config.spark.max_offsets_per_trigger or worker.batch_records
    return BatchSize(records, config.spark.max_bytes_per_trigger if worker.progress == "postgres" else None)


def start(worker: Worker, launched: Launched, runs: Runs,
          resources: ExitStack) -> tuple[Driver, GroupMember, GroupProgress | PostgresProgress, WarmingUp | None]:
    """Spark, this copy's group member and its progress store, each closed by
    `resources`. The group join (a broker holds a new group's first join 3 s)
    and the migration go on while Spark's JVM starts (2 to 3 s on 2 cores);
    the warm-up, while the group has still not answered. Raises StopRequested
    if a stop came first."""
    config, stop_requested = launched.config, launched.stop_requested
    spark_started = threading.Event()
    joining = background.call(lambda: join_group(worker, config, runs, stop_requested, spark_started),
                              name="join")
    resources.callback(_close_when_joined, joining)
    try:
        driver = Driver(lambda: spark_module.session(worker.name, config.kafka, config.spark, worker.jvm,
                                                     launched.gateway), config.spark.on_cluster, stop_requested)
    except BaseException:
        stop_requested.set()  # the group member gives up too
        raise
    finally:
        spark_started.set()
    resources.callback(driver.stop)
    spark = driver.session
    # Not on a cluster: a job waiting there for executors would hold the stop.
    warming = None
    if (LEVERS.warm_up and worker.warm_up and not joining.done() and not config.spark.on_cluster
            and not stop_requested.is_set()):
        warm_up = worker.warm_up
        warming = WarmingUp(spark, lambda: warm_up(spark, config))
        resources.callback(warming.end)
    return (driver, *joining.result(), warming)


def join_group(worker: Worker, config: config_module.Config, runs: Runs, stop_requested: threading.Event,
               spark_started: threading.Event) -> tuple[GroupMember, GroupProgress | PostgresProgress]:
    """This copy's group member, polled until the group has given it its
    partitions or Spark has started, and its progress store (for Postgres,
    with the schema migrated). Runs on its own thread while Spark starts;
    the member is the main thread's once this returns."""
    assert config.kafka is not None  # load() requires it
    kafka = config.kafka
    postgres: PostgresProgress | None = None
    if worker.progress == "postgres":
        # Before the broker: a Postgres that refuses TLS (a ConfigError) stops
        # the worker at start even while Kafka is down.
        engine = engine_for(config.database_url)
        postgres = PostgresProgress(engine, kafka.group_id(worker.name), kafka.topic(worker.topic), stop_requested)
        postgres.retrying(lambda: migrate(engine, worker.migrations))
    member = GroupMember(kafka, worker.name, worker.topic, stop_requested, on_revoke=runs.revoke)
    try:
        progress: GroupProgress | PostgresProgress = postgres or GroupProgress(member)
        while member.partitions is None and not spark_started.is_set() and not stop_requested.is_set():
            member.poll(WAITING_POLL_S)
    except BaseException:
        member.close()
        raise
    return member, progress


def start_query(worker: Worker, context: Context, run: QueryRun, source: DataFrame,
                checkpoint: str) -> StreamingQuery:
    """`worker`'s query for `run`: its topology over `source` (the records of
    this copy's partitions) into its sink, checkpointed in the folder
    `checkpoint`, on its sink's trigger (a run of one batch never begins a
    second). Called on the main thread, once per query run."""
    # New for every query run: a run's records reach each partition of a
    # Kafka sink in increasing order, and a re-sent batch always comes in a
    # new run (a failed task fails its query: see shared.spark).
    run_bits = secrets.randbits(31)
    topology, sink = worker.topology, worker.sink
    if isinstance(sink, KafkaSink):
        records = topology(source, run_bits) if topology else source
        return spark_kafka.kafka_sink(spark_kafka.with_dead_letters(records, worker.name, context.kafka, sink.topic),
                                      context.kafka, checkpoint, run.trigger(sink.trigger))

    def summarize(batch: DataFrame, records: int) -> Any:
        return sink.summarize(topology(batch, run_bits) if topology else batch, records)

    write_batch = foreach_batch(context.postgres, context.batch_size, run, checkpoint, sink, summarize,
                                sink.phase_s if LEVERS.phase else None)
    return (source.writeStream.foreachBatch(write_batch).trigger(processingTime=run.trigger(sink.trigger))
            .option("checkpointLocation", checkpoint).start())


def _close_when_joined(joining: "Future[tuple[GroupMember, GroupProgress | PostgresProgress]]") -> None:
    if joining.exception() is None:  # waits for the join thread: it ends once Spark started or a stop came
        joining.result()[0].close()


class Supervisor:
    """The main thread's loop: query runs on this copy's partitions, one
    after another, each next step as shared.worker.lifecycle decides."""

    def __init__(self, worker: Worker, driver: Driver, member: GroupMember, context: Context,
                 runs: Runs, warming: WarmingUp | None) -> None:
        self.worker, self.driver, self.member, self.context, self.runs = worker, driver, member, context, runs
        self.warming = warming
        self.kafka = context.kafka
        self.topic = member.topic
        self.stop_requested = context.stop_requested

    def run(self) -> None:
        history = History()
        cold = LEVERS.small_first_batch  # until a run has stored a batch
        while (partitions := self.member.wait_for_partitions()) is not None:
            if self.warming:
                self.warming.cut()  # the query needs the cores now
            if lost := self.driver.lost():  # while it backed off, or since its last run
                ended = RunEnded(Ended.SPARK_LOST, error=lost)
            else:
                records = self.context.batch_size.records
                starting = self.resume_from(partitions)
                first = cold_batch(records, lambda: self.waiting(starting)) if cold else None
                if first is not None:
                    starting, records = {first.partition: starting[first.partition]}, first.records
                query_run, error = self.run_query(starting, records, one_batch=first is not None)
                cold = cold and not query_run.stored_any_batch()
                ended = self.outcome(query_run, error)
            step, history = next_step(ended, history)
            while True:
                match step:
                    case Stop():
                        return
                    case Resume():
                        break
                    case BackOff(seconds=seconds, error=error_line):
                        log("query_failed", app=self.worker.name, error=error_line, retry_in_s=seconds)
                        self.member.wait(seconds)
                        break
                    case NewSession(seconds=seconds, error=error_line):
                        log("spark_lost", app=self.worker.name, error=error_line, retry_in_s=seconds)
                        self.member.wait(seconds)
                        if not self.stop_requested.is_set():
                            self.driver.renew()
                        break
                    case Scan():
                        step, history = next_step(search.scan(self, ended), history)
                    case Search(cause=cause):
                        step, history = next_step(search.search(self, ended, cause), history)

    def run_query(self, starting: Offsets, records: int, until: tuple[int, int] | None = None,
                  one_batch: bool = False) -> tuple[QueryRun, BaseException | None]:
        """One query run from `starting`, `records` a batch, until it ends
        (or, given `until` = (partition, offset), stored what is before that
        offset; or, with `one_batch`, its one trigger is over: it then ends
        FIRST_BATCH, its query started with ONE_BATCH_TRIGGER).
        Returns the run and the error the query failed with, if any."""
        worker = self.worker
        query_run = QueryRun(worker.name, starting, one_batch)
        source = spark_kafka.kafka_stream(self.driver.session, self.kafka, worker.topic, worker.name, starting,
                                           records, worker.read_headers)
        with tempfile.TemporaryDirectory(prefix=f"{worker.name}-checkpoint-") as checkpoint:
            self.runs.start(query_run, self.member,
                            lambda: start_query(worker, self.context, query_run, source, checkpoint))
            error = self.supervise(query_run, until)
        if self.driver.lost():
            query_run.reports_ended()
        if self.stop_requested.is_set():
            query_run.end(Ended.STOPPED)
        self.member.end_run(query_run.id, query_run.stored_end())
        return query_run, error

    def supervise(self, query_run: QueryRun, until: tuple[int, int] | None) -> StreamingQueryException | None:
        """Keep the group membership while the query runs, until it fails,
        or its run is ending (a stop, a rebalance, a batch given up, a new
        batch size), or it reached `until` or, for a run of one batch, its
        one trigger is over; then stop it after its running batch, if any."""
        query, one_batch = query_run.query, query_run.one_batch
        assert query is not None

        def reached_its_end() -> bool:
            if one_batch:  # its one trigger is over (one that found no records would never have a next)
                return query_run.stored_a_batch() or query.status["message"] == BETWEEN_TRIGGERS
            return until is not None and (query_run.stored_end() or {}).get(until[0], -1) >= until[1]

        while (query.isActive and query_run.ending is None and not self.stop_requested.is_set()
               and not reached_its_end()):
            # A search's runs and a cold first run are short: notice their end sooner.
            self.member.poll(0.1 if until or one_batch else 0.5)
            if self.driver.lost():
                query_run.end(Ended.SPARK_LOST)  # its batch will never finish: the new session's run reads it again
        if one_batch and query_run.ending is None and reached_its_end():
            query_run.end(Ended.FIRST_BATCH)  # the next run reads full batches
            if query_run.stored_a_batch():
                # Committed now, not after the query's stop: a cold start's
                # first progress, as a lag alarm sees it.
                self.member.commit_now(query_run.id, query_run.stored_end() or {})
        if query_run.ending is Ended.SPARK_LOST:
            return None
        if query.isActive:
            stop_gracefully(query_run, budget_of(self.stop_requested))
        return query.exception()  # None unless the query failed

    def outcome(self, query_run: QueryRun, error: BaseException | None) -> RunEnded:
        """How the run ended: a stop wins (a batch that failed as the stop
        came, in an outage, is not retried), then a reason the run was
        given, then a failure."""
        if self.stop_requested.is_set():
            return RunEnded(Ended.STOPPED)
        if lost := self.driver.lost():  # a batch failed by a cluster's outage is not a record's failure
            return RunEnded(Ended.SPARK_LOST, query_run.stored_a_batch(), error=lost)
        ending = query_run.ending
        if ending in (Ended.STOPPED, Ended.REVOKED, Ended.RESIZED, Ended.FIRST_BATCH):
            return RunEnded(ending)
        return errors.failed(query_run.error or error, query_run.stored_a_batch())

    def resume_from(self, partitions: tuple[int, ...]) -> Offsets:
        """Where a run on `partitions` begins: the stored offsets."""
        return starting_offsets(partitions, self.context.progress, self.context.config.spark.start_from)

    def waiting(self, starting: Offsets) -> dict[int, int]:
        """How many records wait in each partition from `starting` on."""
        return {partition: end - first for partition, (first, end) in self.member.offset_ranges(starting).items()}

    # What shared.worker.search needs.

    def search_from(self) -> Offsets | None:
        partitions = self.member.partitions
        return self.resume_from(partitions) if partitions else None

    def batch_records(self) -> int:
        return self.context.batch_size.records

    def offset_range(self, partition: int, starting: int) -> tuple[int, int]:
        return self.member.offset_range(partition, starting)

    def partition_run(self, cause: str | None) -> search.PartitionRun:
        def run_on(partition: int, first: int, records: int, until: int) -> tuple[int, bool] | None:
            query_run, error = self.run_query({partition: first}, records, until=(partition, until))
            if self.stop_requested.is_set():
                return None
            stored = self.context.progress.stored().get(partition, first)
            if stored >= until:
                return stored, False
            failure = self.outcome(query_run, error)
            return (stored, True) if cause is None or failure.cause == cause else None
        return run_on

    def skip(self, partition: int, offset: int, letter_reason: str, **why: str) -> None:
        """Store the offset past one record, unread, and keep it as a dead letter."""
        letter = dead_letters.read(self.kafka, self.worker.name, self.topic, partition, offset, letter_reason,
                                   self.stop_requested)
        self.context.progress.skip(partition, offset, letter)
        log("skipped_record", topic=self.topic, partition=partition, offset=offset, **why)
