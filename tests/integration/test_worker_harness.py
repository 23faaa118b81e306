"""The two Postgres workers' exactly-once batches on the in-process harness
(devstack.worker_testing): a real local Spark, broker and Postgres; a crash
at each step of a batch and a resume from Postgres's offsets, another copy
storing a batch first, a batch over the byte budget. Each case stores exactly
what was sent, once."""

from collections import Counter

import pytest

from devstack.postgres import query, stored_offsets, windowed_counts
from devstack.worker_testing import Harness, Step
from services.aggregator.worker import AGGREGATOR
from services.anomaly_detector.worker import ANOMALY_DETECTOR
from shared.worker.lifecycle import Ended
from tests.clock import T0

WORDS = ["alpha", "beta", "東京"] * 40  # 120 words, three batches of 40
EVENT_MS = [(T0 + 7 * n % 30) * 1000 for n in range(len(WORDS))]  # across three windows
EXPECTED_COUNTS = Counter(((ms // 1000) // 10 * 10, word) for word, ms in zip(WORDS, EVENT_MS, strict=True))


@pytest.fixture
def harnesses(spark, stack, prefix, database_url):
    """Harness(worker, environment) on the test's stack; each closed after it."""
    made = []

    def harness(worker, **environment):
        made.append(Harness(worker, spark, stack, prefix, database_url, environment))
        return made[-1]

    yield harness
    for each in made:
        each.close()


def send_words(harness):
    harness.send(WORDS, timestamps_ms=EVENT_MS, partition=0)


def stored(database_url, prefix, worker):
    return stored_offsets(database_url, f"{prefix}{worker.name}-app")


@pytest.mark.parametrize("step", list(Step))
def test_an_aggregator_crashed_at_any_step_of_a_batch_counts_each_word_once_after_its_resume(
        harnesses, database_url, prefix, step):
    aggregator = harnesses(AGGREGATOR, MAX_OFFSETS_PER_TRIGGER="40")
    send_words(aggregator)
    crashed = aggregator.run(crash=step)
    assert crashed.crashed and not crashed.stored_everything
    # Only a crash after the commit leaves its batch stored.
    assert stored(database_url, prefix, AGGREGATOR) == (40 if step is Step.AFTER_COMMIT else 0)
    assert aggregator.run().stored_everything
    assert windowed_counts(database_url)[0] == dict(EXPECTED_COUNTS)


def test_a_batch_another_copy_stored_first_is_given_up_and_counted_once(harnesses, database_url):
    first, second = harnesses(AGGREGATOR, MAX_OFFSETS_PER_TRIGGER="40"), harnesses(AGGREGATOR)
    send_words(first)
    # The second copy stores everything between the first one's summary and its transaction.
    ran = first.run(meanwhile=(Step.AFTER_SUMMARY, second.run))
    assert ran.ending is Ended.FAILED and ran.stored_everything and not ran.crashed
    assert windowed_counts(database_url)[0] == dict(EXPECTED_COUNTS)


def test_a_batch_over_the_byte_budget_ends_its_run_and_the_next_reads_fewer_records(harnesses, database_url):
    # 40 words of about 5 bytes: 200 bytes against a budget of 100.
    aggregator = harnesses(AGGREGATOR, MAX_OFFSETS_PER_TRIGGER="40", MAX_BYTES_PER_TRIGGER="100")
    send_words(aggregator)
    resized = aggregator.run()
    assert resized.ending is Ended.RESIZED and resized.batch_records < 40 and not resized.stored_everything
    for _ in range(len(WORDS)):  # each run stores a batch at least
        if (ran := aggregator.run()).stored_everything:
            break
        assert ran.ending is Ended.RESIZED  # each batch measured again, none stored twice
    assert windowed_counts(database_url)[0] == dict(EXPECTED_COUNTS)


def login_failures(count):
    return [f"user_id: alice | action: login failed | try {n}" for n in range(count)]


@pytest.mark.parametrize("step", list(Step))
def test_an_anomaly_detector_crashed_at_any_step_of_a_batch_raises_each_alert_once(
        harnesses, database_url, prefix, step):
    # The first batch (80 failures) crosses the email threshold, the second (40 more) the urgent one.
    detector = harnesses(ANOMALY_DETECTOR, MAX_OFFSETS_PER_TRIGGER="80")
    detector.send(login_failures(120), timestamps_ms=[T0 * 1000 + n for n in range(120)], partition=0)
    assert detector.run(crash=step).crashed
    assert stored(database_url, prefix, ANOMALY_DETECTOR) == (80 if step is Step.AFTER_COMMIT else 0)
    assert detector.run().stored_everything
    assert sorted(query(database_url, "SELECT user_id, severity FROM alert_outbox")) == [
        ("alice", "email"), ("alice", "urgent")]
    assert query(database_url, "SELECT user_id, count FROM failed_login_counts") == [("alice", 120)]
