"""How a service declares a worker (`Worker`), and what its code is given (`Context`)."""

import threading
from dataclasses import dataclass
from typing import Literal, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from shared.batch_size import BatchSize
from shared.config import Config, KafkaConfig
from shared.worker.progress import GroupProgress, PostgresProgress
from shared.worker.query_run import QueryRun


@dataclass(frozen=True)
class Context:
    """What a worker's own code gets, once per process."""

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
        """The progress of a worker declared with progress="postgres"."""
        assert isinstance(self.progress, PostgresProgress)
        return self.progress


class StartQuery(Protocol):
    def __call__(self, context: Context, run: QueryRun, source: DataFrame, checkpoint: str) -> StreamingQuery:
        """Start the worker's query for `run` on `source` (the Kafka records of
        this copy's partitions), checkpointed in the folder `checkpoint`,
        triggered by `run.trigger(its steady trigger)` (a run of one batch
        must not begin a second). Called on the main thread, once per query run."""


class Setup(Protocol):
    def __call__(self, context: Context) -> None:
        """Once per process, on the main thread, before the first query:
        threads a worker runs beside its queries start here."""


class WarmUp(Protocol):
    def __call__(self, spark: SparkSession, config: Config) -> None:
        """Once per process, on a thread of its own, when Spark has started
        on a local master before the group has answered: run the worker's
        topology on made-up records (shared.warm_up). The first query shares
        what that warms (classes initialized and generated, code compiled)
        and waits for none of it: its Spark jobs are cancelled as the first
        query starts (shared.worker.runner.WarmingUp)."""


@dataclass(frozen=True)
class Worker:
    """A worker, declared once (services/workers.py lists them all)."""

    name: str  # its app name: consumer group `<prefix><name>-app`
    topic: str  # its input topic, without the prefix
    batch_records: int  # a micro-batch's records unless MAX_OFFSETS_PER_TRIGGER says
    start_query: StartQuery
    # Where its progress lives: the group's committed offsets, or Postgres
    # beside its results (its batches then write there exactly once, and
    # their bytes are measured against MAX_BYTES_PER_TRIGGER).
    progress: Literal["group", "postgres"] = "group"
    read_headers: bool = False  # its source has the records' `headers` column
    setup: Setup | None = None
    warm_up: WarmUp | None = None

    @property
    def module(self) -> str:
        """The module `python -m` runs it as (the Procfile's command)."""
        return f"services.{self.name.replace('-', '_')}"

    @property
    def process_type(self) -> str:
        """Its Procfile process type."""
        return f"{self.name.replace('-', '_')}_worker"
