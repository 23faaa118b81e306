"""How the foreachBatch workers size their micro-batches (shared.worker.batch_size)."""

from services.aggregator.topology import MAX_COPY_LINE_BYTES
from services.aggregator.worker import AGGREGATOR, COPY_PART_BYTES
from services.workers import WORKERS
from shared.levers.small_first_batch import COLD_FRACTION, COLD_LEAST_RECORDS, cold_batch
from shared.worker.batch_size import SMALL_MEASURED_EVERY_S, BatchSize


def test_a_batch_over_the_budget_makes_the_next_ones_fit_it():
    size = BatchSize(most_records=2_000_000, budget_bytes=1_000_000)
    assert size.measured(records=2_000_000, size=4_000_000) is True
    assert size.records == 500_000


def test_a_batch_within_the_budget_changes_nothing_unless_it_could_be_twice_as_large():
    size = BatchSize(most_records=2_000_000, budget_bytes=1_000_000)
    size.records = 500_000
    assert size.measured(records=500_000, size=600_000) is False  # fits 833,333: not worth a new query run
    assert size.measured(records=200_000, size=20_000) is False  # not half full: the backlog is read, nothing to gain
    assert size.records == 500_000
    assert size.measured(records=500_000, size=5_000) is True  # short records: as many as allowed
    assert size.records == 2_000_000


def test_without_a_budget_or_records_the_size_stays():
    size = BatchSize(most_records=100_000, budget_bytes=None)
    assert size.measured(records=100_000, size=10**12) is False
    assert size.records == 100_000
    size = BatchSize(most_records=100_000, budget_bytes=1)
    assert size.measured(records=0, size=0) is False
    assert size.records == 100_000


def test_one_record_over_the_budget_still_makes_batches_of_one():
    size = BatchSize(most_records=100, budget_bytes=1_000)
    assert size.measured(records=100, size=2_000_000) is True
    assert size.records == 1


def big_backlog() -> dict[int, int]:
    return {0: 2_000_000, 1: 5_000_000, 2: 3_000_000}


def test_a_cold_process_reads_a_fraction_of_a_full_batch_first_unless_that_would_be_too_few_records():
    for worker in WORKERS.values():
        first = cold_batch(worker.batch_records, big_backlog)
        assert first == (1, worker.batch_records // COLD_FRACTION), worker.name
    least = COLD_LEAST_RECORDS * COLD_FRACTION
    assert cold_batch(least, big_backlog) == (1, COLD_LEAST_RECORDS)
    assert cold_batch(least - 1, big_backlog) is None  # small batches already: no run to spare
    assert cold_batch(500, big_backlog) is None


def test_a_cold_first_batch_reads_the_partition_with_the_most_waiting():
    """One task pays the cold JVM's cost once: a task per partition paid it twice at once."""
    assert cold_batch(100_000, lambda: {0: 400, 1: 300, 2: 700}) == (2, 500)
    assert cold_batch(100_000, lambda: {3: 700, 1: 700, 2: 0}) == (1, 500)  # a tie: the lowest
    assert cold_batch(100_000, lambda: {5: 1_001}) == (5, 500)


def test_a_backlog_of_up_to_two_cold_batches_is_read_whole_by_the_first_batch():
    """A second query run costs a cold JVM more than those records do."""
    assert cold_batch(100_000, lambda: {0: 600, 1: 400}) is None
    assert cold_batch(100_000, lambda: {0: 600, 1: 401}) == (0, 500)
    assert cold_batch(100_000, lambda: {0: 0}) is None  # nothing waiting


def test_the_backlog_is_asked_for_only_when_a_small_first_batch_is_possible():
    def not_asked() -> dict[int, int]:
        raise AssertionError("the brokers asked for nothing")
    assert cold_batch(COLD_LEAST_RECORDS * COLD_FRACTION - 1, not_asked) is None


def test_the_aggregators_cold_first_batch_is_grouped_and_collected_by_one_spark_job():
    """However long its words, its COPY text fits the one part collected
    whole: a second job is a cold JVM's first of its kind."""
    first = cold_batch(AGGREGATOR.batch_records, big_backlog)
    assert first is not None and first.records * MAX_COPY_LINE_BYTES <= COPY_PART_BYTES


def test_a_batch_that_could_make_the_size_grow_is_always_measured_a_smaller_one_now_and_then():
    size = BatchSize(most_records=2_000_000, budget_bytes=1_000_000)
    size.records = 500_000
    assert size.to_measure(10) is True  # none measured yet
    size.measured(records=10, size=100)
    assert size.to_measure(250_000) is True  # half full: it could grow
    assert size.to_measure(249_999) is False
    assert size.measured_at is not None
    size.measured_at -= SMALL_MEASURED_EVERY_S  # as if that long ago
    assert size.to_measure(249_999) is True  # its records grown long since, it could be over the budget
