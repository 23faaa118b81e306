"""The aggregator end to end: real broker (both modes), real Postgres, the
real worker; the table must hold exactly the expected counts, whatever
happens to the worker or the database."""

import random
import signal
import threading
import time
from collections import Counter

import pytest

from devstack.kafka_io import committed_offsets, end_offsets, produce
from devstack.local_stack import wait_until
from devstack.postgres import query, stored_offsets, window_totals, windowed_counts
from tests.checks import heroku_like
from tests.clock import T0

VOCABULARY = ["alpha", "beta", "gamma", "δέλτα", "東京", "x"]


@pytest.fixture(autouse=True)
def migrated(release):
    """The release phase runs before the workers, as on Heroku."""


def word_records(count, seed, late_every=7):
    """(word, event time ms, record timestamp ms); every `late_every`-th arrives an hour late."""
    rng = random.Random(seed)
    records = []
    for n in range(count):
        event_ms = (T0 + rng.randrange(0, 60)) * 1000 + rng.randrange(1000)
        arrives_ms = event_ms + (3_600_000 if n % late_every == 0 else rng.randrange(500))
        records.append((rng.choice(VOCABULARY), event_ms, arrives_ms))
    return records


def send(stack, prefix, records):
    produce(stack, prefix + "words", [word for word, _, _ in records],
            timestamps_ms=[arrives for _, _, arrives in records],
            headers=[[("event_time", str(event).encode())] for _, event, _ in records])


def expected_counts(records, window_seconds=10):
    return Counter(((event // 1000) // window_seconds * window_seconds, word)
                   for word, event, _ in records)


def stored_total(database_url, prefix):
    return stored_offsets(database_url, prefix + "aggregator-app")


def everything_stored(stack, prefix, database_url):
    try:
        return stored_total(database_url, prefix) == sum(end_offsets(stack, prefix + "words").values())
    except Exception:  # noqa: BLE001 - the table may not exist yet, or Postgres is down
        return False


def assert_exact(database_url, expected):
    counts, lengths = windowed_counts(database_url)
    assert counts == dict(expected)
    assert lengths == {10}
    totals = Counter()
    for (start, _), count in expected.items():
        totals[start] += count
    assert window_totals(database_url) == dict(totals)  # kept in the same transactions


@heroku_like
def test_words_across_windows_some_late_give_exactly_the_expected_rows(stack, prefix, database_url, workers):
    records = word_records(3000, seed=1)
    send(stack, prefix, records)
    # No header: the record's own timestamp is the event time.
    produce(stack, prefix + "words", ["plain"] * 3, timestamps_ms=[(T0 + 95) * 1000] * 3)
    # Words Postgres cannot keep in a key are skipped, and do not stall the
    # worker; a word with tabs or backslashes needs no escaping by anyone.
    incompressible = "".join(random.Random(2).choices("abcdefghijklmnopqrstuvwxyz", k=3000))
    odd = [incompressible, "a\u0000b", b"\xff", b"\xfe", "tab\there", "back\\slash"]
    produce(stack, prefix + "words", odd, timestamps_ms=[(T0 + 95) * 1000] * len(odd))
    # Event times Spark or Postgres cannot hold, or two days ahead: skipped and counted.
    two_days_ahead_ms = int((time.time() + 2 * 86400) * 1000)
    produce(stack, prefix + "words", ["overflow", "ancient", "future"],
            timestamps_ms=[T0 * 1000, T0 * 1000, two_days_ahead_ms],
            headers=[[("event_time", b"99999999999999999")], [("event_time", b"-300000000000000")], []])
    # A record timestamp Spark cannot even read: skipped by offset.
    produce(stack, prefix + "words", ["beyond"], timestamps_ms=[2**62], partition=0)
    expected = expected_counts(records) + Counter(
        {(T0 + 90, "plain"): 3, (T0 + 90, "tab\there"): 1, (T0 + 90, "back\\slash"): 1})

    worker = workers.start("services.aggregator")
    wait_until(lambda: everything_stored(stack, prefix, database_url), 240, "all words stored")
    assert_exact(database_url, expected)
    wait_until(lambda: committed_offsets(stack, prefix + "aggregator-app", prefix + "words")
               == end_offsets(stack, prefix + "words"), 30, "lag visible in the consumer group")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    batches = worker.log_lines("batch")
    assert sum(int(b["skipped_bad_key"]) for b in batches) == 4
    assert sum(int(b["skipped_bad_time"]) for b in batches) == 3
    assert len(worker.log_lines("skipped_record")) == 1
    # Each skipped record kept once as a dead letter, its value as it was sent.
    letters = query(database_url, "SELECT worker, topic, reason, value, timestamp_ms FROM dead_letters")
    assert {row.worker for row in letters} == {"aggregator"} and {row.topic for row in letters} == {prefix + "words"}
    assert sorted((row.reason, bytes(row.value)) for row in letters) == sorted(
        [("bad_key", value if isinstance(value, bytes) else value.encode()) for value in odd[:4]]
        + [("bad_time", word.encode()) for word in ("overflow", "ancient", "future")] + [("unreadable", b"beyond")])
    assert [row.timestamp_ms for row in letters if row.reason == "unreadable"] == [2**62]
    # Spark failed on that record inside the foreachBatch function: skipped, no traceback.
    assert "Traceback" not in worker.output()
    # A cold first batch outlasts the trigger's second: its own line says how
    # long it took, not a warning of Spark's as well.
    assert "logger=ProcessingTimeExecutor" not in worker.output()


def test_a_steady_batch_holds_on_until_half_a_second_past_the_second(stack, prefix, database_url, workers):
    """Spark begins steady batches on the second, before the text processor's
    batch of that second has written its words: the aggregator's stored batch
    holds on (`waited_ms` on its line, outside `duration_ms`) so that the
    next one begins half a second past it (shared.levers.phase)."""
    worker = workers.start("services.aggregator")

    def paced():
        return [int(batch["waited_ms"]) for batch in worker.log_lines("batch") if "waited_ms" in batch]

    sent = []
    for n in range(30):  # small batches, each sent as the last is stored; the first ones run on a cold JVM
        records = word_records(20, seed=10 + n)
        send(stack, prefix, records)
        sent += records
        wait_until(lambda: everything_stored(stack, prefix, database_url), 60, f"{len(sent)} words stored")
        if len(paced()) >= 3:
            break
    assert len(paced()) >= 3
    assert all(0 < waited < 2000 for waited in paced())  # at most to the phase after the next second
    assert_exact(database_url, expected_counts(sent))


class SteadyInput:
    """Sends batches of words in the background until `total` are sent."""

    def __init__(self, stack, prefix, total, chunk=500):
        self.records = word_records(total, seed=2)
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stack, prefix, chunk), daemon=True)
        self._thread.start()

    def _run(self, stack, prefix, chunk):
        for start in range(0, len(self.records), chunk):
            send(stack, prefix, self.records[start:start + chunk])
        self.done.set()


def test_sigkill_at_random_moments_loses_and_doubles_nothing(stack, prefix, database_url, workers):
    rng = random.Random(3)
    small = {"MAX_OFFSETS_PER_TRIGGER": "700"}
    input_ = SteadyInput(stack, prefix, 10_000)
    for kill in range(2):
        worker = workers.start("services.aggregator", **small)
        already = stored_total(database_url, prefix) if kill else 0
        threshold = already + rng.randrange(700, 3000)
        wait_until(lambda: stored_total(database_url, prefix) >= threshold, 240,
                   f"kill {kill}: {threshold} offsets stored")
        worker.signal(signal.SIGKILL)
        worker.wait(30)
    workers.start("services.aggregator", **small)
    wait_until(input_.done.is_set, 240, "all input sent")
    # Each restart after a SIGKILL first waits out the dead copy's 30 s session.
    wait_until(lambda: everything_stored(stack, prefix, database_url), 300, "all words stored")
    assert_exact(database_url, expected_counts(input_.records))


def test_batches_are_bounded_by_the_bytes_of_their_words_as_well_as_by_records(
        stack, prefix, database_url, workers):
    """A batch over MAX_BYTES_PER_TRIGGER makes the next ones fewer records,
    until batches of short words make them many again."""
    budget, most, long_bytes = 110_000, 500, 1000  # the test's records have values, no keys
    short_before, short_after = word_records(3000, seed=6), word_records(3000, seed=7)
    long_ = [(f"long{n % 10}".ljust(long_bytes, "~"), event, arrives)
             for n, (_, event, arrives) in enumerate(word_records(1000, seed=8))]
    worker = workers.start("services.aggregator", MAX_BYTES_PER_TRIGGER=str(budget),
                           MAX_OFFSETS_PER_TRIGGER=str(most))
    sent = []
    for records in (short_before, long_, short_after):
        send(stack, prefix, records)
        sent += records
        wait_until(lambda: everything_stored(stack, prefix, database_url), 240, f"{len(sent)} words stored")
    assert_exact(database_url, expected_counts(sent))

    events = [dict(pair.split("=", 1) for pair in line.split()) for line in worker.output().splitlines()
              if line.startswith(("event=batch ", "event=batch_size "))]
    sizes = [(int(e["was"]), int(e["records"])) for e in events if e["event"] == "batch_size"]
    fitting = budget // long_bytes
    assert sizes == [(most, fitting), (fitting, most)]
    # A batch's line follows the batch_size line its measure made.
    shrunk, grown = [n for n, e in enumerate(events) if e["event"] == "batch_size"]
    measured, bounded = events[shrunk + 1], events[shrunk + 2:grown]
    assert int(measured["bytes_in"]) > budget
    # The long words left after it (a batch before it may have read a few of them) came in batches cut
    # to the budget: at least two of them well filled. (A batch under half the size is measured, and
    # has its bytes_in, only now and then.)
    assert sum(int(batch.get("bytes_in", 0)) > budget // 2 for batch in bounded) >= 2
    assert all(int(batch.get("bytes_in", 0)) <= budget and int(batch["rows_in"]) <= fitting for batch in bounded)
    assert "Traceback" not in worker.output()


def test_postgres_down_mid_stream_then_back_loses_and_doubles_nothing(stack, prefix, database_url, workers,
                                                                     postgres_cut):
    input_ = SteadyInput(stack, prefix, 12_000)
    worker = workers.start("services.aggregator", MAX_OFFSETS_PER_TRIGGER="1000",
                           DATABASE_URL=postgres_cut.through(database_url))
    wait_until(lambda: stored_total(database_url, prefix) >= 1000, 240, "some batches stored")
    postgres_cut.cut()
    try:
        wait_until(lambda: "event=postgres_unavailable" in worker.output(), 60, "the worker noticing")
    finally:
        postgres_cut.restore()
    wait_until(input_.done.is_set, 240, "all input sent")
    wait_until(lambda: everything_stored(stack, prefix, database_url), 180, "all words stored")
    assert_exact(database_url, expected_counts(input_.records))
    assert worker.process.poll() is None, "the worker kept running through the outage"


def test_postgres_down_while_the_worker_starts_delays_it_and_loses_nothing(
        stack, prefix, database_url, workers, postgres_cut):
    records = word_records(2000, seed=5)
    send(stack, prefix, records)
    postgres_cut.cut()
    try:
        worker = workers.start("services.aggregator", DATABASE_URL=postgres_cut.through(database_url))
        wait_until(lambda: "event=postgres_unavailable" in worker.output(), 240, "the worker waiting")
    finally:
        postgres_cut.restore()
    wait_until(lambda: everything_stored(stack, prefix, database_url), 180, "all words stored")
    assert_exact(database_url, expected_counts(records))
    assert worker.process.poll() is None
    assert "Traceback" not in worker.output()


def test_two_copies_at_once_still_count_each_word_once(stack, prefix, database_url, workers):
    input_ = SteadyInput(stack, prefix, 12_000)
    small = {"MAX_OFFSETS_PER_TRIGGER": "800"}
    first = workers.start("services.aggregator", **small, DYNO="aggregator_worker.1")
    second = workers.start("services.aggregator", **small, DYNO="aggregator_worker.2")
    wait_until(input_.done.is_set, 240, "all input sent")
    wait_until(lambda: everything_stored(stack, prefix, database_url), 240, "all words stored")
    assert_exact(database_url, expected_counts(input_.records))
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_windows_older_than_the_retention_are_deleted_and_newer_ones_kept(stack, prefix, database_url, workers):
    now_ms = int(time.time() * 1000)
    old = [(word, T0 * 1000, T0 * 1000) for word in VOCABULARY]  # two hours ago
    new = [(word, now_ms, now_ms) for word in VOCABULARY]
    send(stack, prefix, old + new)
    workers.start("services.aggregator", RETENTION_HOURS="1")
    wait_until(lambda: everything_stored(stack, prefix, database_url), 240, "every word stored")
    wait_until(lambda: windowed_counts(database_url)[0] == dict(expected_counts(new)), 90,
               "the old windows deleted")
    wait_until(lambda: T0 not in window_totals(database_url), 90, "the old window's total deleted")
    assert_exact(database_url, expected_counts(new))


def test_sigterm_while_postgres_is_down_stops_in_time_and_the_next_copy_loses_nothing(
        stack, prefix, database_url, workers, postgres_cut):
    records = word_records(3000, seed=6)
    send(stack, prefix, records[:1000])
    worker = workers.start("services.aggregator", MAX_OFFSETS_PER_TRIGGER="500",
                           DATABASE_URL=postgres_cut.through(database_url))
    wait_until(lambda: stored_total(database_url, prefix) >= 500, 240, "a batch stored")
    postgres_cut.cut()
    try:
        send(stack, prefix, records[1000:])  # a batch to write while Postgres is away
        wait_until(lambda: "event=postgres_unavailable" in worker.output(), 60, "the batch waiting for Postgres")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0  # Heroku's SIGKILL comes 30 s after SIGTERM
    finally:
        postgres_cut.restore()
    assert "Traceback" not in worker.output()
    assert worker.log_lines("batch_abandoned"), "stopped inside the batch that waited for Postgres"
    # The abandoned batch is neither stored nor committed to the group.
    committed = committed_offsets(stack, prefix + "aggregator-app", prefix + "words")
    assert sum(committed.values()) <= stored_total(database_url, prefix) < len(records)
    workers.start("services.aggregator", MAX_OFFSETS_PER_TRIGGER="500")
    wait_until(lambda: everything_stored(stack, prefix, database_url), 180, "all words stored")
    assert_exact(database_url, expected_counts(records))
