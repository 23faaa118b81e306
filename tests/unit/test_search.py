"""The search for a record that fails every batch it is in
(shared.worker.search), on a partition simulated in memory: each query run
stores its batches in order until one holds a poison record."""

import threading
from dataclasses import dataclass, field

from shared.worker import search
from shared.worker.lifecycle import Ended, RunEnded

FAILURE = RunEnded(Ended.FAILED, error="x", cause="java.lang.NumberFormatException")


@dataclass
class Partition:
    """Records 0..end of partition 0; a batch with a poison record fails its run."""

    end: int
    poison: set[int]
    runs: list[tuple[int, int]] = field(default_factory=list)  # (first, records a batch) of each run
    interrupt_at_run: int | None = None  # a stop, a resize or an outage ends this run short

    def run(self, partition: int, first: int, records: int, until: int) -> tuple[int, bool] | None:
        self.runs.append((first, records))
        if len(self.runs) == self.interrupt_at_run:
            return None
        stored = first
        while stored < until:
            batch = range(stored, min(stored + records, self.end))
            if self.poison & set(batch):
                return stored, True
            stored = batch.stop
        return stored, False


def test_bisect_finds_the_record_in_log2_runs_storing_what_went_through():
    partition = Partition(end=1000, poison={150})
    assert search.bisect(partition.run, 0, 0, 200) == 150
    assert len(partition.runs) == 8  # log2 of 200 records, as the docstring says
    assert partition.runs[-1] == (150, 1)


def test_no_failing_record_in_the_range_returns_none_after_one_run():
    partition = Partition(end=1000, poison={600})
    assert search.bisect(partition.run, 0, 0, 200) is None
    assert partition.runs == [(0, 200)]


def test_an_interrupted_run_ends_the_search_without_a_skip():
    """A resize, a rebalance, an outage or a stop during the search."""
    partition = Partition(end=1000, poison={150}, interrupt_at_run=3)
    assert search.bisect(partition.run, 0, 0, 200) == search.INTERRUPTED


class Worker:
    """What a search asks of the worker running it: one partition in memory."""

    kafka = None
    topic = "t.textlines"

    def __init__(self, partition: Partition, stored: int = 0) -> None:
        self.partition = partition
        self.stored = stored
        self.stop_requested = threading.Event()
        self.skipped: list[tuple[int, int, dict]] = []

    def search_from(self):
        return {0: self.stored}

    def batch_records(self):
        return 200

    def offset_range(self, partition, starting):
        return starting, self.partition.end

    def partition_run(self, cause):
        def run(partition, first, records, until):
            outcome = self.partition.run(partition, first, records, until)
            if outcome is not None:
                self.stored = outcome[0]
            return outcome
        return run

    def skip(self, partition, offset, letter_reason, **why):
        self.skipped.append((partition, offset, {"letter": letter_reason, **why}))
        self.stored = offset + 1


def test_two_poison_records_side_by_side_are_skipped_one_search_each():
    """e2e: test_a_record_that_fails_its_batch_each_time_is_found_and_skipped_alone."""
    worker = Worker(Partition(end=600, poison={150, 151}))
    first = search.search(worker, FAILURE, FAILURE.cause)
    assert first.skipped
    assert worker.skipped == [(0, 150, {"letter": "failing", "reason": "failing", "error": FAILURE.cause})]
    second = search.search(worker, FAILURE, FAILURE.cause)
    assert second.skipped and worker.skipped[1][:2] == (0, 151)
    assert worker.stored == 152


def test_a_resize_during_a_search_ends_it_with_nothing_skipped():
    worker = Worker(Partition(end=600, poison={150}, interrupt_at_run=2))
    ended = search.search(worker, FAILURE, FAILURE.cause)
    assert (ended.skipped, ended.stopped, worker.skipped) == (False, False, [])
    assert worker.stored == 0  # the first run stored nothing: its first batch held the poison


def test_a_stop_during_a_search_is_reported_as_a_stop():
    worker = Worker(Partition(end=600, poison={150}, interrupt_at_run=2))
    worker.stop_requested.set()
    assert search.search(worker, FAILURE, FAILURE.cause).stopped


def test_during_a_rebalance_there_is_nothing_to_search():
    worker = Worker(Partition(end=600, poison={150}))
    worker.search_from = lambda: None
    assert not search.search(worker, FAILURE, FAILURE.cause).skipped
    assert worker.partition.runs == []
