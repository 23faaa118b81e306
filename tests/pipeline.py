"""What the tests of lines through the text processor and the aggregator
into Postgres share: lines, where each worker is, and the exact counts."""

import random
from collections import Counter

from devstack.kafka_io import committed_offsets, end_offsets, produce
from devstack.local_stack import wait_until
from devstack.postgres import stored_offsets, windowed_counts
from tests.clock import T0_MS

VOCABULARY = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "東京", "café"]
# Lines a text processor batch holds: large enough that writing one takes
# seconds, so a fault lands inside it.
BATCH_LINES = 20_000


def make_lines(count, seed=1):
    """(line, timestamp ms): 3 to 8 words, over a minute of event time."""
    rng = random.Random(seed)
    return [(" ".join(rng.choices(VOCABULARY, k=rng.randint(3, 8))), T0_MS + rng.randrange(60_000))
            for _ in range(count)]


def expected_counts(lines):
    return Counter(((ms // 1000) // 10 * 10, word) for line, ms in lines for word in line.split())


def send(stack, prefix, lines):
    produce(stack, prefix + "textlines", [line for line, _ in lines], [ms for _, ms in lines])


def committed_lines(stack, prefix):
    return committed_offsets(stack, prefix + "text-processor-app", prefix + "textlines")


def words_written(stack, prefix):
    return sum(end_offsets(stack, prefix + "words").values())


def words_counted(database_url, prefix):
    try:
        return stored_offsets(database_url, prefix + "aggregator-app")
    except Exception:  # noqa: BLE001 - the table may not exist yet, or Postgres is down
        return -1


def wait_for_exact_counts(stack, prefix, database_url, aggregator, lines, timeout=300, stopped=()):
    """Once every line is processed and every word stored, the table holds
    exactly the expected counts; returns the batch lines of the aggregator
    and of the `stopped` copies before it."""
    topic = prefix + "textlines"
    wait_until(lambda: committed_lines(stack, prefix) == end_offsets(stack, topic), timeout,
               "every line processed")
    wait_until(lambda: words_counted(database_url, prefix) == words_written(stack, prefix), timeout,
               "every word stored")
    counts, _ = windowed_counts(database_url)
    assert counts == dict(expected_counts(lines))
    batches = lambda: [b for copy in (*stopped, aggregator) for b in copy.log_lines("batch")]  # noqa: E731
    wait_until(lambda: sum(int(b["rows_in"]) for b in batches()) == words_written(stack, prefix), 30,
               "the aggregator's last log line")
    return batches()


def wait_inside_a_batch(stack, prefix):
    """Returns once the text processor has committed a batch and written part
    of the next one (words on the topic past what was there at the commit)."""
    wait_until(lambda: sum(committed_lines(stack, prefix).values()) > 0, 240, "a first batch committed")
    at_commit = words_written(stack, prefix)
    wait_until(lambda: words_written(stack, prefix) > at_commit + 1000, 60, "the next batch writing")


def assert_repeats_were_dropped(batches):
    assert sum(int(b["skipped_repeated"]) for b in batches) > 0, "nothing was sent twice"
