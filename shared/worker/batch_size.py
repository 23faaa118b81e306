"""How many records a micro-batch reads: at most a number of records, and
about a number of bytes of keys and values.

Spark 4.2's Kafka source bounds a micro-batch by offsets alone
(`maxOffsetsPerTrigger`, read once when a query starts). So the foreachBatch
workers measure each batch that went through, and when its bytes per record
call for another number of records, the query run ends after that batch
and the next run starts at once with the new number, from the stored
offsets. A process's first batch reads one partition, bounded by records
alone (shared.levers.small_first_batch), and is measured like any
other; a batch of a few records only to measure them paid the first batch's
fixed cost twice (docs/decisions/batch-bytes.md). A batch too small to
make the size grow is measured only now and then (`SMALL_MEASURED_EVERY_S`):
the observation that measures it is a part of every steady batch's fixed cost.
"""

import time

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from shared.logs import log

# How often a batch that cannot make the size grow (under half of it) is
# measured, at least: it can still go over the budget, if its records grew
# long, and the size then shrinks at most this late.
SMALL_MEASURED_EVERY_S = 10.0


class BatchSize:
    """How many records the next query run's batches read (`records`):
    always `most_records` without a budget. Changed on the foreachBatch
    thread, read by the main thread when it starts a run."""

    def __init__(self, most_records: int, budget_bytes: int | None) -> None:
        self.most_records = self.records = most_records
        self.budget_bytes = budget_bytes
        self.measured_at: float | None = None  # monotonic, of the last batch measured

    def to_measure(self, records: int) -> bool:
        """Whether a batch of at most `records` records is to be measured: one
        that could make the size grow, or the first in SMALL_MEASURED_EVERY_S."""
        return (2 * records >= self.records or self.measured_at is None
                or time.monotonic() - self.measured_at >= SMALL_MEASURED_EVERY_S)

    def measured(self, records: int, size: int) -> bool:
        """A batch of `records` held `size` bytes of keys and values; whether
        the size changed (the running query reads batches of the old size:
        its run must end). Changing the size costs a query run, so it changes
        when a batch went over the budget, or when a batch at least half full
        could have been twice as large."""
        self.measured_at = time.monotonic()
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


def measurement(observation: Observation | None) -> tuple[int, int] | None:
    """(records, bytes), or None if the batch was not observed, or no action
    read it (then waiting for it would never end)."""
    if observation is None:
        return None
    if not observation._jo or not observation._jo.future().isCompleted():  # PySpark has no other way to ask
        return None
    metrics = observation.get
    return metrics["records"], metrics["bytes"] or 0
