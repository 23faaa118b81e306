"""How many records a micro-batch reads: at most a number of records, and
about a number of bytes of keys and values.

Spark 4.2's Kafka source bounds a micro-batch by offsets alone
(`maxOffsetsPerTrigger`, read once when a query starts). So the foreachBatch
workers measure each batch that went through, and when its bytes per record
call for another number of records, the query run ends after that batch
and the next run starts at once with the new number, from the stored
offsets. A process's first batch reads one partition, bounded by records
alone, a 200th of a full batch's (`cold_batch`), and is measured like any
other; a batch of a few records only to measure them paid the first batch's
fixed cost twice (docs/decisions/batch-bytes.md).
"""

from collections.abc import Callable
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from shared.logs import log

# A process's first query run reads one batch (shared.worker.triggers.ONE_BATCH_TRIGGER)
# of a 200th of the full size: a cold JVM pays seconds for its first tasks
# (classes generated and compiled, the Kafka clients' first connections) and reads
# each of their records with code the JIT has not compiled yet, so a small
# first batch commits progress sooner, and the next run reads full batches
# on a warmer JVM. It reads one partition, the one with the most waiting: one
# task pays that cold cost once, where a task per partition paid it twice at
# once on the 2 cores, then ran a second wave. Full batches under 50,000
# records gain nothing from it. Nor does a backlog of two such batches or
# fewer: read in one batch it is all stored a second or more sooner, its
# first progress a few tenths later (docs/decisions/cold-start.md).
COLD_FRACTION = 200
COLD_LEAST_RECORDS = 50_000 // COLD_FRACTION
COLD_BACKLOG_BATCHES = 2


class ColdBatch(NamedTuple):
    partition: int  # the one it reads
    records: int  # at most


def cold_batch(records: int, waiting: Callable[[], dict[int, int]]) -> ColdBatch | None:
    """A cold process's first batch when full ones read `records` and
    `waiting()` records wait in each partition (asked of the brokers only
    when a small first batch is possible); None: a full batch of every partition."""
    first = records // COLD_FRACTION
    if first < COLD_LEAST_RECORDS:
        return None
    counts = waiting()
    if sum(counts.values()) <= COLD_BACKLOG_BATCHES * first:
        return None
    busiest = max(counts, key=lambda partition: (counts[partition], -partition))  # ties: the lowest
    return ColdBatch(busiest, first)


class BatchSize:
    """How many records the next query run's batches read (`records`):
    always `most_records` without a budget. Changed on the foreachBatch
    thread, read by the main thread when it starts a run."""

    def __init__(self, most_records: int, budget_bytes: int | None) -> None:
        self.most_records = self.records = most_records
        self.budget_bytes = budget_bytes

    def measured(self, records: int, size: int) -> bool:
        """A batch of `records` held `size` bytes of keys and values; whether
        the size changed (the running query reads batches of the old size:
        its run must end). Changing the size costs a query run, so it changes
        when a batch went over the budget, or when a batch at least half full
        could have been twice as large."""
        if records == 0 or self.budget_bytes is None:
            return False
        fitting = max(1, min(self.most_records, records * self.budget_bytes // max(size, 1)))
        over_budget = size > self.budget_bytes
        room_to_grow = 2 * records >= self.records and fitting >= 2 * self.records
        if (over_budget and fitting < self.records) or room_to_grow:
            log("batch_size", records=fitting, was=self.records, bytes_per_record=size // records)
            self.records = fitting
            return True
        return False


def observed(batch: DataFrame) -> tuple[DataFrame, Observation]:
    """`batch`, counting its records and their bytes as its first action reads it."""
    observation = Observation("input")
    return batch.observe(observation, F.count("*").alias("records"), F.sum(_bytes()).alias("bytes")), observation


def _bytes() -> Column:
    return F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0))


def measurement(observation: Observation) -> tuple[int, int] | None:
    """(records, bytes), or None if no action read the batch (then waiting
    for it would never end)."""
    if not observation._jo or not observation._jo.future().isCompleted():  # PySpark has no other way to ask
        return None
    metrics = observation.get
    return metrics["records"], metrics["bytes"] or 0
