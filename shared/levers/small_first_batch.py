"""The small_first_batch lever: a cold process's first query run reads one
small batch of one partition, and ends (Ended.FIRST_BATCH). Off, its first
run reads full batches of every partition (docs/decisions/cold-start.md).

A cold JVM pays for its first tasks (classes generated and compiled, the
Kafka clients' first connections) and reads their records with code the
JIT has not compiled yet, so a small first batch commits progress sooner,
and the next run reads full batches on a warmer JVM. It reads one
partition, the one with the most waiting: one task pays that cold cost
once, where a task per partition paid it once each, at once on the same
cores, then ran a second wave. Small full batches gain nothing from it;
nor does a backlog of two small batches or fewer, which one batch stores
whole sooner.
"""

from collections.abc import Callable
from typing import NamedTuple

COLD_FRACTION = 200  # of a full batch's records
COLD_LEAST_RECORDS = 50_000 // COLD_FRACTION
COLD_BACKLOG_BATCHES = 2

# A query run meant to store one batch begins it as it starts, and its next
# trigger lies on the next multiple of this interval since the epoch, in
# 2069: the run is stopped with no batch running. On the steady trigger a
# second small batch would begin at once behind a cold first batch (longer
# than the interval), and the stop would wait for it.
ONE_BATCH_TRIGGER = "36500 days"


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
