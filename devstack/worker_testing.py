"""A worker's batches tested in this process, in seconds: the harness for
any worker, yours included.

Its batches run as a worker runs them (shared.worker.runner.start_query,
shared.worker.exactly_once, shared.worker.query_run), on a local Spark,
reading a real broker's topic and storing into a real Postgres (the dev
stack's: the tests' `stack` and `database_url` fixtures) or, for a
KafkaSink, a topic of that broker. A run can crash at any step of a batch,
and the next run resumes as a dyno restarted on an empty disk resumes: from
the stored offsets (Postgres's, or the group's), on a fresh checkpoint.

    harness = Harness(MY_WORKER, spark, stack, prefix, database_url)
    harness.send(["GET /a 200", "GET /b 404"])
    assert harness.run(crash=Step.IN_TRANSACTION).crashed   # its first batch dies in its transaction
    assert harness.run().stored_everything                  # resumed: each record stored once
    ... then read the worker's tables (or topic) and compare with what was sent

A crash is at its step of the run's first batch that read records: nothing
of the batch after that step runs, and the harness ends the run. The steps,
in a batch's order (`Step.of(worker)`):

  a PostgresSink's (shared.worker.sinks.PostgresSink; its query fails with
  `Crashed`, and Spark prints the traceback):
    AFTER_SUMMARY   `summarize` returned; nothing is stored yet
    IN_TRANSACTION  `write` returned inside the batch's transaction, which is rolled back
    AFTER_COMMIT    the transaction (results and offsets) is committed; `after_commit` never runs
  a KafkaSink's:
    BEFORE_OFFSETS  the batch's records are in the topic; the group's offsets
                    are not committed (the process dies before its commit)

Besides crashes, a run meets what a dyno meets: `stop()` (SIGTERM: the
batch running finishes, the run ends STOPPED) and `postgres_away()` (the
network to Postgres cut, for this harness alone, until `postgres_back()`).

One harness is one process. A Postgres sink's harness joins no consumer
group (its progress is Postgres's); a Kafka sink's joins the worker's
group, as the worker does, and commits as it does. The sink is opened
once (its threads stop with `close`), and every run after a crash shares
it, as the framework's runs after a failure do; a stopped harness runs no
more (a new Harness is the restarted process).
"""

import dataclasses
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import Connection

from devstack.kafka_io import end_offsets, produce
from devstack.local_stack import wait_until
from devstack.network_cut import NetworkCut
from devstack.postgres import postgres_url
from shared.config import load
from shared.migrations import migrate
from shared.offsets import Offsets, Ranges
from shared.worker import Context, KafkaSink, PostgresSink, Worker
from shared.worker.group_member import GroupMember
from shared.worker.lifecycle import Ended
from shared.worker.progress import GroupProgress, PostgresProgress, engine_for, starting_offsets
from shared.worker.query_run import BatchListener, QueryRun, Runs, stop_gracefully, stop_now
from shared.worker.runner import batch_size, start_query
from shared.worker.spark_kafka import kafka_stream
from shared.worker.stop_budget import StopRequest


class Step(Enum):
    AFTER_SUMMARY = "after_summary"
    IN_TRANSACTION = "in_transaction"
    AFTER_COMMIT = "after_commit"
    BEFORE_OFFSETS = "before_offsets"

    @staticmethod
    def of(worker: Worker) -> tuple["Step", ...]:
        """The steps a batch of `worker`'s sink takes, in order."""
        if isinstance(worker.sink, KafkaSink):
            return (Step.BEFORE_OFFSETS,)
        return (Step.AFTER_SUMMARY, Step.IN_TRANSACTION, Step.AFTER_COMMIT)


class Crashed(Exception):
    """What a crash raises at its step of a Postgres sink's batch."""


@dataclass(frozen=True)
class Ran:
    """How a run ended."""

    ending: Ended | None  # the reason the framework ended it, if it did (RESIZED, FAILED, STOPPED ...)
    crashed: bool  # it crashed at the step it was given
    stored_everything: bool  # the stored offsets reached the end of every partition
    batch_records: int  # what the next run's batches read (a batch may have measured a new size)


class Harness:
    def __init__(self, worker: Worker, spark: SparkSession, stack: Any, prefix: str, database_url: str | None = None,
                 environment: dict[str, str] | None = None) -> None:
        """`worker` runs on `stack`'s broker (its topics made with `prefix`)
        and, for a PostgresSink, the Postgres at `database_url`, migrated;
        `environment` adds variables to the worker's configuration."""
        self.worker, self.spark, self.stack = worker, spark, stack
        self._postgres: NetworkCut | None = None
        environ = {**stack.environment(prefix), "RETENTION_HOURS": "0", **(environment or {})}
        if isinstance(worker.sink, PostgresSink):
            assert database_url, "a PostgresSink's harness needs the tests' database_url"
            address = urlsplit(database_url)
            self._postgres = NetworkCut(address.hostname or "localhost", address.port or 5432)
            environ["DATABASE_URL"] = self._postgres.through(database_url)
        self.config = load(environ)
        assert self.config.kafka is not None
        self.kafka = self.config.kafka
        self.stop_requested = StopRequest()
        # What the next run does at a step of its first batch with records.
        self._crash: Step | None = None
        self._crashed = False
        self._meanwhile: dict[Step, Callable[[], object]] = {}
        self._closed = False
        self.member: GroupMember | None = None
        self.progress: GroupProgress | PostgresProgress
        if isinstance(worker.sink, KafkaSink):
            stack.broker.create_topics(prefix, names=list(worker.topics))  # as its declaration says
            self.runs = Runs()
            self.member = GroupMember(self.kafka, worker.name, worker.topic, self.stop_requested,
                                      on_revoke=self.runs.revoke)
            self.progress = GroupProgress(self.member)
            self._listener = BatchListener(worker.name, self.runs, _CrashingCommits(self.member, self))
            spark.streams.addListener(self._listener)
            self._worker = worker
            self.partitions = self.member.wait_for_partitions() or ()
        else:
            stack.broker.create_topics(prefix, names=[worker.topic])
            self.engine = engine_for(self.config.database_url)
            migrate(self.engine, worker.migrations)
            self.progress = PostgresProgress(self.engine, self.kafka.group_id(worker.name),
                                             self.kafka.topic(worker.topic), self.stop_requested)
            # What the test sees stored: Postgres itself, not through the cut.
            self._observed = PostgresProgress(engine_for(postgres_url(database_url)), self.progress.consumer,
                                              self.progress.topic, threading.Event())
            self._worker = dataclasses.replace(worker, sink=_Crashing(worker.sink, self))
        self.context = Context(self.config, self.progress, batch_size(worker, self.config), self.stop_requested)
        if isinstance(self._worker.sink, PostgresSink):
            self._worker.sink.open(self.context)

    def send(self, values: list[Any], **produced: Any) -> None:
        """Records to the worker's input topic (devstack.kafka_io.produce's
        keywords: timestamps_ms, key, headers, partition)."""
        produce(self.stack, self.kafka.topic(self.worker.topic), values, **produced)

    def run(self, crash: Step | None = None, meanwhile: tuple[Step, Callable[[], object]] | None = None,
            timeout: float = 60) -> Ran:
        """One query run from the stored offsets, until what was sent is
        stored, the framework ends the run, it crashes at `crash`, or a stop
        is asked for (its running batch then finishes first, as a worker's
        does). `meanwhile`: (a step, something done there in its first
        batch, on that step's thread), such as another copy's whole run
        (`other.run`) between this batch's summary and its transaction."""
        assert not self.stop_requested.is_set(), "a stopped harness is a stopped process: make a new Harness"
        assert crash is None or crash in Step.of(self.worker), f"a batch of {self.worker.name} has no step {crash}"
        self._crash, self._crashed, self._meanwhile = crash, False, dict([meanwhile] if meanwhile else [])
        worker = self._worker
        ends = end_offsets(self.stack, self.kafka.topic(worker.topic))
        partitions = self.partitions if self.member else tuple(sorted(ends))
        run = QueryRun(worker.name, starting_offsets(partitions, self.progress))
        source = kafka_stream(self.spark, self.kafka, worker.topic, worker.name, run.starting_offsets,
                              self.context.batch_size.records, worker.read_headers)
        # A query whose stop timed out (stop_now) may still be writing its
        # checkpoint as the directory goes: what it leaves is left, as a dyno's
        # disk would be, rather than failing the run that stopped it.
        with tempfile.TemporaryDirectory(prefix=f"{worker.name}-harness-", ignore_cleanup_errors=True) as checkpoint:
            if self.member:
                self.runs.start(run, self.member, lambda: start_query(worker, self.context, run, source, checkpoint))
            else:
                run.query = start_query(worker, self.context, run, source, checkpoint)
            query = run.query
            assert query is not None
            try:
                wait_until(lambda: self._over(run, ends), timeout, f"{worker.name}'s run to store everything or end")
                if self.stop_requested.is_set() and not self._crashed:
                    stop_gracefully(run, self.stop_requested.budget)
            finally:
                stop_now(query)
            if self.member:  # a crashed process commits nothing more
                self.member.end_run(run.id, None if self._crashed else run.stored_end())
        # A stop wins, as it does for the framework (Supervisor.outcome): a
        # batch begun as the stop came may have failed as its query stopped.
        ending = Ended.STOPPED if self.stop_requested.is_set() else run.ending
        return Ran(ending, self._crashed, self._stored(ends), self.context.batch_size.records)

    def _over(self, run: QueryRun, ends: dict[int, int]) -> bool:
        if self.member:
            self.member.poll(0.05)  # the membership kept and the offsets committed, as a worker's main loop does
        assert run.query is not None
        return (self._crashed or self.stop_requested.is_set() or run.ending is not None or not run.query.isActive
                or self._stored(ends))

    def _stored(self, ends: dict[int, int]) -> bool:
        stored = (self._observed if self._postgres else self.progress).stored()
        return all(stored.get(partition, 0) >= end for partition, end in ends.items())

    def stop(self) -> None:
        """SIGTERM: the running batch finishes (or is abandoned, if it cannot
        store), the run ends STOPPED, and this harness runs no more."""
        self.stop_requested.set()

    def postgres_away(self) -> None:
        """Cut this harness's network to Postgres: its connections drop, new ones fail."""
        assert self._postgres is not None
        self._postgres.cut()

    def postgres_back(self) -> None:
        assert self._postgres is not None
        self._postgres.restore()

    def close(self) -> None:
        """Stop the sink's threads (each ends at its next wake), leave the group,
        let Postgres go. Once: a later call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.stop_requested.set()
        if self.member:
            self.spark.streams.removeListener(self._listener)
            self.member.close()
        else:
            self.engine.dispose()
            self._observed.engine.dispose()
        if self._postgres:
            self._postgres.close()

    def reached(self, step: Step) -> bool:
        """A batch reached `step`: what the run does there, once. True once
        the run has crashed, there or at a step before."""
        if (then := self._meanwhile.pop(step, None)) is not None:
            then()
        if self._crash is step:
            self._crash, self._crashed = None, True
        return self._crashed


class _Crashing(PostgresSink[Any]):
    """The worker's Postgres sink, with the harness's crash at its step."""

    def __init__(self, sink: PostgresSink[Any], harness: Harness) -> None:
        self.sink, self.harness = sink, harness
        self.trigger = sink.trigger  # type: ignore[misc]  # the worker's, on this instance
        self.phase_s = sink.phase_s  # type: ignore[misc]

    def open(self, context: Context) -> None:
        self.sink.open(context)

    def summarize(self, batch: DataFrame, records: int) -> Any:
        summary = self.sink.summarize(batch, records)
        self._reached(Step.AFTER_SUMMARY)
        return summary

    def dead_letters(self, batch: DataFrame, summary: Any) -> DataFrame | None:
        return self.sink.dead_letters(batch, summary)

    def write(self, connection: Connection, summary: Any) -> dict[str, Any]:
        fields = self.sink.write(connection, summary)
        self._reached(Step.IN_TRANSACTION)
        return fields

    def after_commit(self) -> None:
        self._reached(Step.AFTER_COMMIT)
        self.sink.after_commit()

    def _reached(self, step: Step) -> None:
        if self.harness.reached(step):
            raise Crashed(step.value)


class _CrashingCommits:
    """The group member as Spark's listener hands it a Kafka sink's batches
    (shared.worker.query_run.Commits), with the harness's crash between a
    batch's records and its offsets: from the crash on, nothing reaches the member."""

    def __init__(self, member: GroupMember, harness: Harness) -> None:
        self.member, self.harness = member, harness

    def report(self, run_id: str, offsets: Offsets, batch_ms: int) -> None:
        if not self.harness.reached(Step.BEFORE_OFFSETS):
            self.member.report(run_id, offsets, batch_ms)

    def report_unread(self, ranges: Ranges) -> None:
        self.member.report_unread(ranges)
