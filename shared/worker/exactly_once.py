"""Exactly-once micro-batches into Postgres.

A micro-batch's results and the offsets it reached go into Postgres in one
transaction (shared.worker.progress.PostgresProgress, behind its fence), and
a starting worker resumes from those offsets, so a dyno restarted on an
empty disk neither loses nor repeats a batch, and two copies on the same
partitions still count every record once.
"""

import time
from collections.abc import Callable
from typing import Any, TypeVar

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame
from sqlalchemy import Connection

from shared import dead_letters
from shared.logs import log
from shared.offsets import batch_ranges
from shared.outages import StopRequested
from shared.worker.batch_size import BatchSize, measurement, observed
from shared.worker.lifecycle import Ended
from shared.worker.progress import PostgresProgress, StaleBatchError
from shared.worker.query_run import QueryRun
from shared.worker.sinks import PostgresSink

A = TypeVar("A")


def foreach_batch(progress: PostgresProgress, batch_size: BatchSize, run: QueryRun, checkpoint: str,
                  sink: PostgresSink[A], summarize: Callable[[DataFrame, int], A],
                  phase_s: float | None) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function for `run`'s query, checkpointed in
    `checkpoint`, that calls a PostgresSink's hooks as its class documents
    them (shared.worker.sinks): `summarize(batch, records)` (the sink's,
    after the worker's topology), then in the transaction that stores the
    offsets its dead letters and `write(connection, summary)`, then
    `after_commit()`; given `phase_s`, the batch then holds
    on until the next may begin that far past a second (`QueryRun.pace`).
    What `summarize` caches (persist) lives until the commit, or until the
    next batch begins if this one failed: nothing else of the process is cached.

    A batch that cannot finish for an expected reason is abandoned: nothing
    of it is stored, and the run ends (`run.end`), so the next run begins it
    again from Postgres's offsets. That is a stop asked for while Postgres is
    away, Spark failing to read the batch (a broker outage, a record it
    cannot convert), or a batch that another copy stored first. The function
    then returns instead of raising (Spark would print the Python traceback
    of a failed foreachBatch). Every later batch of an ending run is
    abandoned too: stored, it would leave the abandoned one's records as a gap."""

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        began = time.time()
        if run.ending is not None:
            run.abandon(batch_id)
            return
        ranges = batch_ranges(checkpoint, batch_id, run.starting_offsets)
        if not ranges:
            return
        try:
            batch.sparkSession.catalog.clearCache()
            records = sum(end - first for first, end in ranges.values())
            batch, observation = observed(batch) if batch_size.to_measure(records) else (batch, None)
            summary = summarize(batch, records)
            letters = sink.dead_letters(batch, summary)
            storing = time.monotonic()

            def store(connection: Connection) -> dict[str, Any]:
                kept = dead_letters.store_frame(connection, run.app, letters) if letters is not None else 0
                return {**sink.write(connection, summary), **({"dead_letters": kept} if kept else {})}
            fields = progress.commit(ranges, store)
        except StopRequested:
            run.abandon(batch_id)
            run.end(Ended.STOPPED)
            log("batch_abandoned", batch=batch_id, reason="stop requested while Postgres was unreachable")
            return
        except (Py4JJavaError, StaleBatchError) as error:
            run.abandon(batch_id)
            run.end(Ended.FAILED, error)  # the main loop logs it as query_failed
            return
        # The batch is stored: its line and what follows it come before Spark
        # is asked to do anything again, which a context stopped under the
        # batch now (a cluster's outage) would fail. (The observation was
        # filled by `summarize`'s first action: reading it runs no job.)
        size = measurement(observation)
        measured = {"rows_in": size[0], "bytes_in": size[1]} if size else {}
        run.report(batch_id, **{"postgres_ms": int((time.monotonic() - storing) * 1000), **measured, **fields})
        sink.after_commit()
        if size and batch_size.measured(*size):
            run.end(Ended.RESIZED)
        batch.sparkSession.catalog.clearCache()
        if phase_s is not None:
            run.pace(batch_id, began, phase_s)

    return write_batch
