"""The three workers' batches on the in-process harness
(devstack.worker_testing): a real local Spark, broker and Postgres. For the
Postgres workers, a crash at each step of a batch and a resume from
Postgres's offsets, another copy storing a batch first (the fence), a stop
inside a batch, a stop while Postgres is away (the batch abandoned), a
batch over the byte budget; for the text processor, a crash between a
batch's words and its offsets, whose words the aggregator then counts once.
Each case stores exactly what was sent, once."""

import re
from collections import Counter

import pytest

from devstack.kafka_io import end_offsets
from devstack.postgres import query, stored_offsets, windowed_counts
from devstack.worker_testing import Step
from services.aggregator.worker import AGGREGATOR
from services.anomaly_detector.worker import ANOMALY_DETECTOR
from services.text_processor.worker import TEXT_PROCESSOR
from shared.worker.lifecycle import Ended
from tests.clock import T0

WORDS = ["alpha", "beta", "東京"] * 40  # 120 words, three batches of 40
EVENT_MS = [(T0 + 7 * n % 30) * 1000 for n in range(len(WORDS))]  # across three windows
EXPECTED_COUNTS = Counter(((ms // 1000) // 10 * 10, word) for word, ms in zip(WORDS, EVENT_MS, strict=True))


def send_words(harness):
    harness.send(WORDS, timestamps_ms=EVENT_MS, partition=0)


def stored(database_url, prefix, worker):
    return stored_offsets(database_url, f"{prefix}{worker.name}-app")


@pytest.mark.parametrize("step", Step.of(AGGREGATOR))
def test_an_aggregator_crashed_at_any_step_of_a_batch_counts_each_word_once_after_its_resume(
        harnesses, database_url, prefix, step):
    aggregator = harnesses(AGGREGATOR, MAX_OFFSETS_PER_TRIGGER="40")
    send_words(aggregator)
    crashed = aggregator.run(crash=step)
    assert crashed.crashed and not crashed.stored_everything
    # Only a crash after the commit leaves its batch stored.
    assert stored(database_url, prefix, AGGREGATOR) == (40 if step is Step.AFTER_COMMIT else 0)
    assert aggregator.run().stored_everything
    counted_once(database_url)


def counted_once(database_url):
    assert windowed_counts(database_url)[0] == dict(EXPECTED_COUNTS)


def login_failures(harness):
    # The first batch (80 failures) crosses the email threshold, the second (40 more) the urgent one.
    harness.send([f"user_id: alice | action: login failed | try {n}" for n in range(120)],
                 timestamps_ms=[T0 * 1000 + n for n in range(120)], partition=0)


def alerted_once(database_url):
    assert sorted(query(database_url, "SELECT user_id, severity FROM alert_outbox")) == [
        ("alice", "email"), ("alice", "urgent")]
    assert query(database_url, "SELECT user_id, count FROM failed_login_counts") == [("alice", 120)]


# (worker, its batch's records, what it is sent, what must then be stored)
POSTGRES_WORKERS = [pytest.param(AGGREGATOR, 40, send_words, counted_once, id="aggregator"),
                    pytest.param(ANOMALY_DETECTOR, 80, login_failures, alerted_once, id="anomaly_detector")]


@pytest.mark.parametrize(("worker", "batch", "send", "exact"), POSTGRES_WORKERS)
def test_a_batch_another_copy_stored_first_is_given_up_and_stored_once(harnesses, database_url, worker, batch,
                                                                       send, exact):
    first, second = harnesses(worker, MAX_OFFSETS_PER_TRIGGER=str(batch)), harnesses(worker)
    send(first)
    # The second copy stores everything between the first one's summary and its transaction.
    ran = first.run(meanwhile=(Step.AFTER_SUMMARY, second.run))
    assert ran.ending is Ended.FAILED and ran.stored_everything and not ran.crashed
    exact(database_url)


@pytest.mark.parametrize(("worker", "batch", "send", "exact"), POSTGRES_WORKERS)
def test_a_stop_inside_a_batch_stores_that_batch_and_the_next_process_the_rest_once(
        harnesses, database_url, prefix, worker, batch, send, exact):
    first = harnesses(worker, MAX_OFFSETS_PER_TRIGGER=str(batch))
    send(first)
    ran = first.run(meanwhile=(Step.AFTER_SUMMARY, first.stop))
    assert ran.ending is Ended.STOPPED
    # The batch the stop came in finished (and, back to back, maybe the next,
    # begun before the main thread saw the stop).
    assert stored(database_url, prefix, worker) >= batch
    assert harnesses(worker).run().stored_everything
    exact(database_url)


@pytest.mark.parametrize(("worker", "batch", "send", "exact"), POSTGRES_WORKERS)
def test_a_stop_while_postgres_is_away_abandons_the_batch_and_the_next_process_stores_it_once(
        harnesses, database_url, prefix, capsys, worker, batch, send, exact):
    first = harnesses(worker, MAX_OFFSETS_PER_TRIGGER=str(batch))
    send(first)

    def away_then_stop():
        first.postgres_away()
        first.stop()

    ran = first.run(meanwhile=(Step.AFTER_SUMMARY, away_then_stop))
    assert ran.ending is Ended.STOPPED and not ran.crashed
    assert stored(database_url, prefix, worker) == 0  # nothing of the abandoned batch
    abandoned = [line for line in capsys.readouterr().out.splitlines() if "event=batch_abandoned" in line]
    assert len(abandoned) == 1 and abandoned[0].endswith('reason="stop requested while Postgres was unreachable"')
    first.postgres_back()
    assert harnesses(worker).run().stored_everything
    exact(database_url)


@pytest.mark.parametrize(("worker", "batch", "budget", "send", "exact"), [
    # 40 words, key and value about 5 bytes each: about 400 bytes against 100.
    pytest.param(AGGREGATOR, 40, 100, send_words, counted_once, id="aggregator"),
    # 80 lines of about 45 bytes: about 3,600 bytes against 1,800.
    pytest.param(ANOMALY_DETECTOR, 80, 1800, login_failures, alerted_once, id="anomaly_detector")])
def test_a_batch_over_the_byte_budget_ends_its_run_and_the_next_reads_fewer_records(
        harnesses, database_url, worker, batch, budget, send, exact):
    harness = harnesses(worker, MAX_OFFSETS_PER_TRIGGER=str(batch), MAX_BYTES_PER_TRIGGER=str(budget))
    send(harness)
    resized = harness.run()
    assert resized.ending is Ended.RESIZED and resized.batch_records < batch and not resized.stored_everything
    for _ in range(120):  # each run stores a batch at least
        if (ran := harness.run()).stored_everything:
            break
        assert ran.ending is Ended.RESIZED  # each batch measured again, none stored twice
    exact(database_url)


@pytest.mark.parametrize("step", Step.of(ANOMALY_DETECTOR))
def test_an_anomaly_detector_crashed_at_any_step_of_a_batch_raises_each_alert_once(
        harnesses, database_url, prefix, step):
    detector = harnesses(ANOMALY_DETECTOR, MAX_OFFSETS_PER_TRIGGER="80")
    login_failures(detector)
    assert detector.run(crash=step).crashed
    assert stored(database_url, prefix, ANOMALY_DETECTOR) == (80 if step is Step.AFTER_COMMIT else 0)
    assert detector.run().stored_everything
    alerted_once(database_url)


LINES = ["The quick brown fox", "jumps over the lazy dog", "東京 is big"] * 20
LINE_MS = [(T0 + n // 2) * 1000 for n in range(len(LINES))]  # two a second: three windows
EXPECTED_WORD_COUNTS = Counter(((ms // 1000) // 10 * 10, word) for line, ms in zip(LINES, LINE_MS, strict=True)
                               for word in re.split(r"\W+", line.lower()) if word)


def test_words_a_text_processor_sent_again_after_a_crash_before_its_offsets_are_counted_once(
        harnesses, stack, prefix, database_url):
    text = harnesses(TEXT_PROCESSOR, MAX_OFFSETS_PER_TRIGGER="20")
    text.send(LINES, timestamps_ms=LINE_MS, partition=0)
    crashed = text.run(crash=Step.BEFORE_OFFSETS)
    assert crashed.crashed and not crashed.stored_everything
    assert text.progress.stored() == {}  # the group committed nothing: its first batch is sent again
    assert text.run().stored_everything
    words = sum(end_offsets(stack, prefix + "words").values())
    first_batch = sum(len(re.split(r"\W+", line)) for line in LINES[:20])
    assert words >= sum(EXPECTED_WORD_COUNTS.values()) + first_batch  # the first batch's words, twice
    assert harnesses(AGGREGATOR).run().stored_everything
    assert windowed_counts(database_url)[0] == dict(EXPECTED_WORD_COUNTS)


def test_a_text_processor_stopped_inside_a_batch_commits_it_and_the_next_process_resumes_past_it(
        harnesses, database_url):
    first = harnesses(TEXT_PROCESSOR, MAX_OFFSETS_PER_TRIGGER="20")
    first.send(LINES, timestamps_ms=LINE_MS, partition=0)
    ran = first.run(meanwhile=(Step.BEFORE_OFFSETS, first.stop))
    assert ran.ending is Ended.STOPPED and not ran.stored_everything
    assert first.progress.stored()[0] >= 20  # the batch the stop found, committed
    first.close()  # leaves the group
    assert harnesses(TEXT_PROCESSOR).run().stored_everything
    assert harnesses(AGGREGATOR).run().stored_everything
    assert windowed_counts(database_url)[0] == dict(EXPECTED_WORD_COUNTS)
