"""The text processor end to end: a real broker (plaintext and Heroku-like),
the real worker process, lines in and the exact words out."""

import os
import signal
from collections import Counter

from kafka import KafkaConsumer

from devstack.kafka_io import committed_offsets, end_offsets, event_millis, produce, read_all
from devstack.local_stack import wait_until
from shared.dead_letters import DeadLetter
from tests.checks import assert_no_stack_trace, heroku_like
from tests.clock import T0_MS
from tests.pipeline import words_written
from tests.tokens import HARD_LINES, oracle

ONE_MB_LINE = ("abcdefghi " * 100_000).encode()  # 1,000,000 bytes, 100,000 words
ONE_MB_WORD = b"y" * 1_000_000  # as a record, twice Kafka's 1 MB limit: skipped


def all_processed(stack, prefix):
    topic = prefix + "textlines"
    return committed_offsets(stack, prefix + "text-processor-app", topic) == end_offsets(stack, topic)


@heroku_like
def test_lines_in_exact_words_out_with_their_event_times(stack, prefix, workers):
    values = [line.encode() for line in HARD_LINES] + [
        b"\xff\xfe broken \xc3\x28 bytes", None, ONE_MB_LINE, ONE_MB_WORD, b"after the big one"]
    timestamps = [T0_MS + 1_000 * i for i in range(len(values))]
    produce(stack, prefix + "textlines", values, timestamps)
    expected = Counter()
    for value, timestamp in zip(values, timestamps, strict=True):
        text = (value or b"").decode("utf-8", "replace")
        expected.update((word, timestamp) for word in oracle(text) if len(word) < 1_000_000)

    worker = workers.start("services.text_processor")
    records = read_all(stack, prefix + "words", sum(expected.values()), timeout=180)
    wait_until(lambda: all_processed(stack, prefix), 60, "offsets committed")

    got = Counter((r.value.decode(), event_millis(r)) for r in records)
    assert got == expected
    assert all(r.key == r.value for r in records)
    assert sum(int(b.get("skipped_too_long", 0)) for b in worker.log_lines("batch")) == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_cold_worker_stores_a_small_first_batch_then_reads_full_ones(stack, prefix, workers):
    lines = [f"backlog line {n}" for n in range(6_000)]
    produce(stack, prefix + "textlines", lines)

    worker = workers.start("services.text_processor", MAX_OFFSETS_PER_TRIGGER="50000")  # a first batch of 250
    wait_until(lambda: all_processed(stack, prefix), 180, "every line processed")

    sizes = [int(batch["rows_in"]) for batch in worker.log_lines("batch")]
    assert sizes[0] <= 250 < min(sizes[1:]), sizes  # one small batch: the first run began no second
    # Nor was one cut short as its run stopped: every word was sent once.
    words = Counter(r.value.decode() for r in read_all(stack, prefix + "words", 3 * len(lines)))
    assert words == Counter(word for line in lines for word in line.split())
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_commit_refused_in_a_broker_outage_is_sent_again_with_no_batch_after_it(stack, prefix, workers):
    """The last batch before an idle spell: no later batch's commit would
    carry its offsets, where the text processor resumes. Its Python is
    frozen while Spark writes it, so that its commit goes out only once the
    broker is dead."""
    produce(stack, prefix + "textlines", ["one two"] * 100)
    worker = workers.start("services.text_processor")
    wait_until(lambda: all_processed(stack, prefix), 240, "the first lines committed")
    os.kill(worker.process.pid, signal.SIGSTOP)  # Python's only: its JVM writes on
    try:
        produce(stack, prefix + "textlines", ["three four five"] * 100)
        wait_until(lambda: words_written(stack, prefix) == 500, 60, "the next lines' words written")
        stack.broker.kill()
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)
    try:
        wait_until(lambda: "event=commit_failed" in worker.output(), 60, "the commit refused")
    finally:
        stack.broker.start()
    wait_until(lambda: all_processed(stack, prefix), 60, "the refused commit sent again")
    assert words_written(stack, prefix) == 500  # committed as it was, not by reading the lines again
    assert worker.process.poll() is None
    assert_no_stack_trace(worker.output())


def test_a_timestamp_spark_cannot_convert_skips_that_line_alone_even_across_a_stop(stack, prefix, workers):
    # 10,000 lines before it: scanning them and the one micro-batch of them
    # that the skip runs take seconds, and a stop asked for at the scan
    # lands inside the skip.
    before, after = [f"before{n} x" for n in range(10_000)], [f"after{n} y" for n in range(50)]
    produce(stack, prefix + "textlines", before, partition=0)
    produce(stack, prefix + "textlines", ["beyond spark"], [2**62], partition=0)  # year 146 million
    produce(stack, prefix + "textlines", after, partition=0)
    produce(stack, prefix + "textlines", after, partition=1)

    first = workers.start("services.text_processor")
    wait_until(lambda: first.log_lines("unreadable_record_scan"), 180, "the scan for the unreadable line")
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0
    output = first.output()
    assert "event=skipped_record" not in output.split("event=stop_requested")[0], "stopped after the skip"
    assert_no_stack_trace(output)

    worker = workers.start("services.text_processor")
    wait_until(lambda: all_processed(stack, prefix), 180, "every line processed")
    words = Counter(r.value.decode() for r in read_all(stack, prefix + "words", 20_200))
    expected = Counter(word for line in before + after + after for word in line.split())
    # The failed batch's words may be on the topic twice (the aggregator counts them once).
    assert words.keys() == expected.keys()
    assert all(words[word] >= count for word, count in expected.items())
    skipped = worker.log_lines("skipped_record") or first.log_lines("skipped_record")
    assert [(s["partition"], s["offset"]) for s in skipped] == [("0", "10000")]
    letters = [DeadLetter.of_kafka(record) for record in read_all(stack, prefix + "dead-letters", 1)]
    assert {(letter.worker, letter.topic, letter.partition, letter.offset, letter.reason, letter.timestamp_ms,
             letter.value, letter.key) for letter in letters} == {
        ("text-processor", prefix + "textlines", 0, 10_000, "unreadable", 2**62, b"beyond spark", None)}
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_stop_while_spark_warms_up_waits_for_it_and_exits_cleanly(stack, prefix, workers):
    produce(stack, prefix + "textlines", ["the quick brown fox"] * 100)
    # A member that does not rejoin holds the group's answer (for its
    # max.poll.interval.ms): Spark is up before the partitions, so it warms up.
    holder = KafkaConsumer(prefix + "textlines", bootstrap_servers=stack.broker.bootstrap,
                           group_id=prefix + "text-processor-app", enable_auto_commit=False,
                           max_poll_interval_ms=60_000)
    try:
        wait_until(lambda: holds_partitions(holder), 60, "the holder's partitions")
        first = workers.start("services.text_processor")
        wait_until(lambda: first.log_lines("start"), 180, "Spark started")  # the warm-up begins with it
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0
    finally:
        holder.close(autocommit=False)
    output = first.output()
    # Landed inside the warm-up: asked for before it ended, and Spark stopped after it.
    assert output.index("event=stop_requested") < output.index("event=warmed_up") < output.index("event=stopped")
    assert_no_stack_trace(output)

    workers.start("services.text_processor")
    wait_until(lambda: all_processed(stack, prefix), 180, "every line processed")
    assert Counter(r.value for r in read_all(stack, prefix + "words", 400)) == {
        b"the": 100, b"quick": 100, b"brown": 100, b"fox": 100}


def holds_partitions(consumer):
    # Joined before its metadata named the topic's partitions, a member is
    # assigned none; kafka-python's rejoin was once seen not to come.
    if not consumer.partitions_for_topic(next(iter(consumer.subscription()))):
        return False
    consumer.poll(100)  # joins the group
    return consumer.assignment()
