"""A worker's exactly-once batches tested in this process, in seconds: the
harness for a worker whose sink is a PostgresSink, yours included.

Its batches run as a worker runs them (shared.worker.runner.start_query,
shared.worker.exactly_once), on a local Spark, reading a real broker's topic
and storing into a real Postgres (the dev stack's: the tests' `stack` and
`database_url` fixtures). A run can crash at any step of a batch, and the
next run resumes as a dyno restarted on an empty disk resumes: from the
offsets stored in Postgres, on a fresh checkpoint.

    harness = Harness(MY_WORKER, spark, stack, prefix, database_url)
    harness.send(["GET /a 200", "GET /b 404"])
    assert harness.run(crash=Step.IN_TRANSACTION).crashed   # its first batch dies in its transaction
    assert harness.run().stored_everything                  # resumed: each record stored once
    ... then read the worker's tables and compare with what was sent

A crash is `Crashed`, raised at its step of the run's first batch that read
records: nothing of the batch after that step runs, its query fails with it
(Spark prints the traceback), and the harness ends the run. The steps, in a
batch's order (shared.worker.sinks.PostgresSink):

    AFTER_SUMMARY   `summarize` returned; nothing is stored yet
    IN_TRANSACTION  `write` returned inside the batch's transaction, which is rolled back
    AFTER_COMMIT    the transaction (results and offsets) is committed; `after_commit` never runs

No consumer group is joined: a Postgres sink's progress is Postgres's. One
harness is one process: the sink is opened once (its threads stop with
`close`), and every run after a crash shares it, as the framework's runs
after a failure do.
"""

import dataclasses
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import Connection

from devstack.kafka_io import end_offsets, produce
from devstack.local_stack import wait_until
from devstack.postgres import postgres_url
from shared.config import load
from shared.migrations import migrate
from shared.worker import Context, PostgresSink, Worker
from shared.worker.lifecycle import Ended
from shared.worker.progress import PostgresProgress, engine_for, starting_offsets
from shared.worker.query_run import QueryRun, stop_now
from shared.worker.runner import batch_size, start_query
from shared.worker.spark_kafka import kafka_stream


class Step(Enum):
    AFTER_SUMMARY = "after_summary"
    IN_TRANSACTION = "in_transaction"
    AFTER_COMMIT = "after_commit"


class Crashed(Exception):
    """What a crash raises at its step."""


@dataclass(frozen=True)
class Ran:
    """How a run ended."""

    ending: Ended | None  # the reason the framework ended it, if it did (RESIZED, FAILED ...)
    crashed: bool  # its query failed with Crashed
    stored_everything: bool  # Postgres's offsets reached the end of every partition
    batch_records: int  # what the next run's batches read (a batch may have measured a new size)


class Harness:
    def __init__(self, worker: Worker, spark: SparkSession, stack: Any, prefix: str, database_url: str,
                 environment: dict[str, str] | None = None) -> None:
        """`worker` runs on `stack`'s broker (its topics made with `prefix`)
        and the Postgres at `database_url`, migrated; `environment` adds
        variables to the worker's configuration."""
        assert isinstance(worker.sink, PostgresSink), "the harness runs a PostgresSink's batches"
        self.worker, self.spark, self.stack = worker, spark, stack
        self.config = load({**stack.environment(prefix), "DATABASE_URL": database_url, "RETENTION_HOURS": "0",
                            **(environment or {})})
        assert self.config.kafka is not None
        self.kafka = self.config.kafka
        stack.broker.create_topics(prefix, names=[worker.topic])  # a topic of its own, made as its declaration says
        self.engine = engine_for(postgres_url(database_url))
        migrate(self.engine, worker.migrations)
        self.stop_requested = threading.Event()
        self.progress = PostgresProgress(self.engine, self.kafka.group_id(worker.name),
                                         self.kafka.topic(worker.topic), self.stop_requested)
        self.context = Context(self.config, self.progress, batch_size(worker, self.config), self.stop_requested)
        # What the next run does at a step of its first batch with records.
        self._crash: Step | None = None
        self._meanwhile: dict[Step, Callable[[], object]] = {}
        self._sink: _Crashing = _Crashing(worker.sink, self)
        self._sink.open(self.context)

    def send(self, values: list[Any], **produced: Any) -> None:
        """Records to the worker's input topic (devstack.kafka_io.produce's
        keywords: timestamps_ms, key, headers, partition)."""
        produce(self.stack, self.kafka.topic(self.worker.topic), values, **produced)

    def run(self, crash: Step | None = None, meanwhile: tuple[Step, Callable[[], object]] | None = None,
            timeout: float = 60) -> Ran:
        """One query run from the offsets stored in Postgres, until what was
        sent is stored, the framework ends the run, or it crashes at `crash`.
        `meanwhile`: (a step, something done there in its first batch), such
        as another copy's whole run (`other.run`) between this batch's
        summary and its transaction."""
        self._crash, self._meanwhile = crash, dict([meanwhile] if meanwhile else [])
        worker = dataclasses.replace(self.worker, sink=self._sink)
        ends = end_offsets(self.stack, self.kafka.topic(worker.topic))
        run = QueryRun(worker.name, starting_offsets(tuple(sorted(ends)), self.progress))
        source = kafka_stream(self.spark, self.kafka, worker.topic, worker.name, run.starting_offsets,
                              self.context.batch_size.records, worker.read_headers)
        with tempfile.TemporaryDirectory(prefix=f"{worker.name}-harness-") as checkpoint:
            query = run.query = start_query(worker, self.context, run, source, checkpoint)
            try:
                wait_until(lambda: self._stored(ends) or run.ending is not None or not query.isActive,
                           timeout, f"{worker.name}'s run to store everything or end")
            finally:
                stop_now(query)
        error = query.exception()
        return Ran(run.ending, error is not None and Crashed.__name__ in str(error), self._stored(ends),
                   self.context.batch_size.records)

    def _stored(self, ends: dict[int, int]) -> bool:
        stored = self.progress.stored()
        return all(stored.get(partition, 0) >= end for partition, end in ends.items())

    def close(self) -> None:
        """Stop the sink's threads (each ends at its next wake) and let Postgres go."""
        self.stop_requested.set()
        self.engine.dispose()

    def reached(self, step: Step) -> None:
        """A batch reached `step`: what the run does there, once."""
        if (then := self._meanwhile.pop(step, None)) is not None:
            then()
        if self._crash is step:
            self._crash = None
            raise Crashed(step.value)


class _Crashing(PostgresSink[Any]):
    """The worker's sink, with the harness's crash at its step."""

    def __init__(self, sink: PostgresSink[Any], harness: Harness) -> None:
        self.sink, self.harness = sink, harness
        self.trigger = sink.trigger  # type: ignore[misc]  # the worker's, on this instance
        self.phase_s = sink.phase_s  # type: ignore[misc]

    def open(self, context: Context) -> None:
        self.sink.open(context)

    def summarize(self, batch: DataFrame, records: int) -> Any:
        summary = self.sink.summarize(batch, records)
        self.harness.reached(Step.AFTER_SUMMARY)
        return summary

    def write(self, connection: Connection, summary: Any) -> dict[str, Any]:
        fields = self.sink.write(connection, summary)
        self.harness.reached(Step.IN_TRANSACTION)
        return fields

    def after_commit(self) -> None:
        self.harness.reached(Step.AFTER_COMMIT)
        self.sink.after_commit()
