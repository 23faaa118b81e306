"""Where a worker's results go: the two sinks a worker declares (spec.Worker.sink).

A worker never builds its streaming query: the framework reads its input
topic on this copy's partitions, applies its topology, and starts the
query for its sink (shared.worker.runner.start_query), one query run at a
time, each on a fresh local checkpoint.

- `KafkaSink`: the topology's records to a topic, and those whose
  `dead_letter` column is set (shared.dead_letters.dead_letter) to the
  dead-letters topic instead. Progress: the group's
  committed offsets, committed once the batch's records are written. At
  least once: a batch re-sent after a crash is written again, in a new
  query run (its topology's `run` differs), so a reader that must count
  each record once can tell the repeats apart (the text processor's
  `place` header, shared.events).
- `PostgresSink`: each batch's results and the offsets it reached in one
  Postgres transaction, behind a fence on those offsets: exactly once,
  across crashes, restarts on an empty disk and two copies on the same
  partitions (shared.worker.exactly_once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from shared.worker.triggers import BACK_TO_BACK, STEADY_TRIGGER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from sqlalchemy import Connection

    from shared.worker.spec import Context

__all__ = ["BACK_TO_BACK", "STEADY_TRIGGER", "KafkaSink", "PostgresSink"]

S = TypeVar("S")


@dataclass(frozen=True)
class KafkaSink:
    """The topology's records (columns `key`, `value` and, if it makes them,
    `headers`, as Spark's Kafka sink takes them) written to `<prefix><topic>`;
    a record whose `dead_letter` column (if it has one) is not null is a
    dead letter instead, written to `<prefix>dead-letters`."""

    topic: str  # without the prefix
    trigger: str = STEADY_TRIGGER  # how often a batch may begin (shared.spark)


class PostgresSink(Generic[S]):
    """Each micro-batch stored once in Postgres. Subclass it and fill the
    hooks; `S` is what `summarize` hands to `write`.

    A batch calls, in this order, on the thread Spark calls the foreachBatch
    function on, while the micro-batch runs (the query waits for them; they
    may block, as a Postgres outage blocks them):

    1. `summarize(batch, records)`: Spark's side. `batch` holds the batch's
       records (after the worker's topology, if it has one); `records` is
       how many it holds at most (its offsets' span). It may run Spark jobs
       and cache (persist) DataFrames: they stay cached until the batch's
       transaction is committed, or until the next batch begins. It must
       store nothing: a batch given up (an outage, a stop, another copy
       that stored it first) is summarized again by the run that reads it next.
    2. `dead_letters(batch, summary)`: the batch's records as read
       (before the worker's topology) with a column `dead_letter`, as
       `shared.dead_letters.dead_letter(reason)` makes it: a letter for
       each record it skips, null for the others; or None (the summary
       counted none: then no job runs). The framework stores the letters
       in the batch's transaction, before `write`. Make the reason a
       column of its own first (`select("*", reason.alias("reason"))`):
       Spark evaluates an expression once in every place that names it.
    3. `write(connection, summary)`: inside the transaction that moves this
       copy's stored offsets past the batch. Everything it writes through
       `connection` is stored exactly when those offsets are, once. In an
       outage the whole transaction is tried again: `write` must depend on
       `summary` and the database alone. It returns fields for the batch's
       log line: `rows_out`, and `skipped_<why>` for each record it left out.
    4. `after_commit()`: once the transaction is committed, once per stored
       batch. A crash just before it loses the call, never the batch: what
       must happen for every batch belongs in `write` (an outbox row), and
       `after_commit` only hastens it (wakes a thread that reads the outbox).

    Before any of them, `open(context)` runs once per process on the main
    thread, before the first query: the threads a worker runs beside its
    batches (retention, an alert publisher) start there.
    """

    # How often a batch may begin: STEADY_TRIGGER (at most once a second),
    # or BACK_TO_BACK (as the last ends) for results due within a second.
    trigger: ClassVar[str] = STEADY_TRIGGER
    # Given, a steady batch that ends early holds on until the next may begin
    # that far past a second (shared.worker.query_run.QueryRun.pace).
    phase_s: ClassVar[float | None] = None
    # The topics it writes to besides Postgres (without the prefix), made
    # with the worker's input topic by the setup (services/workers.py).
    topics: ClassVar[tuple[str, ...]] = ()

    def open(self, context: Context) -> None:
        """Once per process, on the main thread, before the first query."""

    def summarize(self, batch: DataFrame, records: int) -> S:
        raise NotImplementedError

    def dead_letters(self, batch: DataFrame, summary: S) -> DataFrame | None:
        return None

    def write(self, connection: Connection, summary: S) -> dict[str, Any]:
        raise NotImplementedError

    def after_commit(self) -> None:
        """Once the batch's transaction is committed."""
