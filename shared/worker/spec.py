"""How a service declares a worker (`Worker`: its topic, topology and sink),
and what its sink is given (`Context`).

What a declaration imports is imported before Spark's JVM is launched
(shared.worker.launch): the lifecycle's modules only for their types."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pyspark.sql import DataFrame, SparkSession

from shared.config import Config, KafkaConfig
from shared.dead_letters import TOPIC as DEAD_LETTERS_TOPIC
from shared.jvm_options import DriverJvm
from shared.worker.sinks import KafkaSink, PostgresSink

if TYPE_CHECKING:
    from shared.worker.batch_size import BatchSize
    from shared.worker.progress import GroupProgress, PostgresProgress


@dataclass(frozen=True)
class Context:
    """What a worker's sink gets, once per process (PostgresSink.open)."""

    config: Config
    progress: GroupProgress | PostgresProgress
    batch_size: BatchSize  # how many records the next query run's batches read
    stop_requested: threading.Event

    @property
    def kafka(self) -> KafkaConfig:
        assert self.config.kafka is not None  # a worker's config always has it
        return self.config.kafka

    @property
    def postgres(self) -> PostgresProgress:
        """The progress of a worker whose sink is a PostgresSink: its engine,
        consumer and topic, and `read` (a query retried through an outage)."""
        from shared.worker.progress import PostgresProgress  # loaded by then: the runner made it

        assert isinstance(self.progress, PostgresProgress)
        return self.progress


class Topology(Protocol):
    def __call__(self, records: DataFrame, run: int, /) -> DataFrame:
        """The worker's records -> what its sink takes: Spark SQL functions
        only, a pure function of its arguments. `records` has the Kafka
        source's columns (key, value, topic, partition, offset, timestamp,
        timestampType, and headers if the worker reads them). `run`: 31
        random bits, new for each query run, for a topology that tags what it
        writes so a re-sent batch can be told apart (the text processor); most ignore it."""


class WarmUp(Protocol):
    def __call__(self, spark: SparkSession, config: Config) -> None:
        """Once per process, on a thread of its own, when Spark has started
        on a local master before the group has answered: run the worker's
        topology on made-up records (shared.levers.warm_up). The first query shares
        what that warms (classes initialized and generated, code compiled)
        and waits for none of it: its Spark jobs are cancelled as the first
        query starts (shared.levers.warm_up.WarmingUp)."""


@dataclass(frozen=True)
class Worker:
    """A worker, declared once (services/workers.py lists them all): its
    input topic's records, through its topology, into its sink."""

    name: str  # its app name: consumer group `<prefix><name>-app`
    topic: str  # its input topic, without the prefix
    sink: KafkaSink | PostgresSink[Any]
    # Applied to the stream for a KafkaSink; to each batch, before its
    # summary, for a PostgresSink (whose batches are measured as read).
    topology: Topology | None = None
    batch_records: int = 100_000  # a micro-batch's records unless MAX_OFFSETS_PER_TRIGGER says
    read_headers: bool = False  # its records have the `headers` column
    warm_up: WarmUp | None = None
    # Its own tables: (name, SQL) steps applied once each, in order, after
    # the framework's (shared.migrations), as it starts. Name each after what
    # it makes: the names share one table with every other worker's.
    migrations: tuple[tuple[str, str], ...] = ()
    # Its driver's JVM: young generation and JIT, each worker's measured
    # (docs/decisions/memory.md, docs/decisions/jit.md).
    jvm: DriverJvm = DriverJvm()

    @property
    def progress(self) -> Literal["group", "postgres"]:
        """Where its progress lives: the group's committed offsets, or
        Postgres beside its results (its batches' bytes are then measured
        against MAX_BYTES_PER_TRIGGER)."""
        return "postgres" if isinstance(self.sink, PostgresSink) else "group"

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics it reads and writes, without the prefix: what the
        setup creates for it (services/workers.py)."""
        # A Kafka sink's dead letters go to a topic: a Postgres sink's to Postgres.
        written = (self.sink.topic, DEAD_LETTERS_TOPIC) if isinstance(self.sink, KafkaSink) else self.sink.topics
        return (self.topic, *written)

    @property
    def module(self) -> str:
        """The module `python -m` runs it as (the Procfile's command)."""
        return f"services.{self.name.replace('-', '_')}"

    @property
    def process_type(self) -> str:
        """Its Procfile process type."""
        return f"{self.name.replace('-', '_')}_worker"
