"""Dead letters on the in-process harness (devstack.worker_testing), with a
real local Spark, broker and Postgres: the hostile records each worker
skips, each kept once with its fields, also when the batch that holds them
is crashed inside its transaction (the Postgres workers) or re-sent (the
text processor, whose letters the web's keeper stores); and the replay,
interrupted where it hurts and run again."""

import datetime
import threading
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine

from devstack.kafka_io import produce, read_all
from devstack.postgres import postgres_url, query
from devstack.worker_testing import Step
from services import replay
from services.aggregator.worker import AGGREGATOR
from services.anomaly_detector.worker import ANOMALY_DETECTOR
from services.text_processor.worker import TEXT_PROCESSOR
from services.web.dead_letter_keeper import MIGRATIONS as KEEPER_TABLES
from services.web.dead_letter_keeper import DeadLetterKeeper
from shared import dead_letters
from shared.config import KafkaConfig
from shared.migrations import migrate
from tests.clock import T0

NOW_MS = T0 * 1000
BEFORE_1970_MS = -1  # a producer may stamp -1 (no time); Kafka keeps it
TWO_DAYS_AHEAD_MS = int((datetime.datetime.now(datetime.timezone.utc).timestamp() + 2 * 86400) * 1000)
MEGABYTE_WORD = "x" * 1_010_000  # its line is over what a dead letter keeps, under what Kafka takes
COLUMNS = ('worker, topic, partition, "offset", timestamp_ms, reason, key, value, key_bytes, value_bytes, '
           "skipped_at, replayed_at")


def letters(database_url):
    return {(row.partition, row.offset): row for row in query(
        database_url, f"SELECT {COLUMNS} FROM dead_letters ORDER BY partition, \"offset\"")}


def test_an_aggregator_crashed_inside_the_transaction_keeps_each_bad_word_once_with_its_fields(
        harnesses, database_url, prefix):
    aggregator = harnesses(AGGREGATOR)
    bad = [b"nul\x00word", b"\xff\xfenot-utf8", ("k" * 2001).encode(), b"late", b"early"]
    stamps = [NOW_MS, NOW_MS, NOW_MS, TWO_DAYS_AHEAD_MS, BEFORE_1970_MS]
    aggregator.send([b"fine", *bad, b"also-fine"], timestamps_ms=[NOW_MS, *stamps, NOW_MS], partition=0)
    assert aggregator.run(crash=Step.IN_TRANSACTION).crashed
    assert letters(database_url) == {}, "rolled back with the batch"
    assert aggregator.run().stored_everything
    kept = letters(database_url)
    assert sorted(kept) == [(0, offset) for offset in range(1, 6)]
    reasons = {offset: kept[(0, offset)].reason for _, offset in kept}
    assert reasons == {1: "bad_key", 2: "bad_key", 3: "bad_key", 4: "bad_time", 5: "bad_time"}
    for offset, (value, stamp) in enumerate(zip(bad, stamps, strict=True), start=1):
        row = kept[(0, offset)]
        assert (row.worker, row.topic) == ("aggregator", f"{prefix}words")
        assert (bytes(row.value), row.value_bytes, row.timestamp_ms) == (value, len(value), stamp)
        assert row.key is None and row.key_bytes is None  # sent without a key
        assert row.replayed_at is None and row.skipped_at is not None
    counts = query(database_url, "SELECT word, count FROM windowed_counts ORDER BY word")
    assert [(row.word, row.count) for row in counts] == [("also-fine", 1), ("fine", 1)]


def test_the_anomaly_detectors_failed_logins_without_a_user_are_kept_once(harnesses, database_url, prefix):
    detector = harnesses(ANOMALY_DETECTOR)
    lines = ["alice | login failed", " | login failed", "user_id: \x00 | login failed", "bob | login ok",
             "carol | login failed"]
    detector.send(lines, timestamps_ms=[NOW_MS, NOW_MS, NOW_MS, NOW_MS, TWO_DAYS_AHEAD_MS], partition=1)
    assert detector.run(crash=Step.AFTER_SUMMARY).crashed
    assert detector.run().stored_everything
    kept = letters(database_url)
    assert {offset: row.reason for (_, offset), row in kept.items()} == {1: "no_user", 2: "no_user", 4: "bad_time"}
    assert all(row.worker == "anomaly-detector" and row.topic == f"{prefix}loglines" and row.partition == 1
               for row in kept.values())
    assert bytes(kept[(1, 2)].value) == lines[2].encode()


def test_a_text_processors_letters_re_sent_by_a_crashed_batch_are_kept_once_by_the_keeper(
        harnesses, stack, prefix, database_url):
    processor = harnesses(TEXT_PROCESSOR)
    lines = ["a fine line", f"short {MEGABYTE_WORD} {MEGABYTE_WORD[:3000]} words", "from before 1970"]
    processor.send(lines, timestamps_ms=[NOW_MS, NOW_MS, BEFORE_1970_MS], partition=0)
    assert processor.run(crash=Step.BEFORE_OFFSETS).crashed
    assert processor.run().stored_everything
    on_topic = read_all(stack, f"{prefix}{dead_letters.TOPIC}", 4)
    assert len(on_topic) == 4, "each batch sent both letters: the crashed one's, and the re-sent one's"
    # The line's other words went to `words` in each run: 3 + 2 words a run.
    assert len(read_all(stack, f"{prefix}words", 10)) == 10

    engine = create_engine(postgres_url(database_url))
    migrate(engine, KEEPER_TABLES)
    keeper = DeadLetterKeeper(engine, processor.kafka, 0, processor.stop_requested)
    assert keeper.keep() == 2
    assert keeper.keep() == 0, "a second pass resumes past what it stored"
    keeper.close()
    kept = letters(database_url)
    assert sorted(kept) == [(0, 1), (0, 2)]
    too_long, bad_time = kept[(0, 1)], kept[(0, 2)]
    assert (too_long.reason, too_long.worker, too_long.topic) == ("too_long", "text-processor", f"{prefix}textlines")
    assert len(too_long.value) == dead_letters.KEPT_BYTES and too_long.value_bytes == len(lines[1].encode())
    assert bytes(too_long.value) == lines[1].encode()[:dead_letters.KEPT_BYTES]
    assert (bad_time.reason, bad_time.timestamp_ms, bytes(bad_time.value)) == ("bad_time", -1, lines[2].encode())

    # A new keeper (a web dyno restarted) reads from where Postgres says, and a
    # second one beside it stores nothing twice.
    again = DeadLetterKeeper(engine, processor.kafka, 0, processor.stop_requested)
    assert again.keep() == 0
    again.close()
    engine.dispose()


def test_an_interrupted_replay_run_again_sends_each_letter_back_once(harnesses, stack, prefix, database_url,
                                                                    monkeypatch):
    detector = harnesses(ANOMALY_DETECTOR)
    lines = [f"| login failed attempt {n}" for n in range(5)]
    detector.send(lines, timestamps_ms=[NOW_MS] * 5, partition=0)
    assert detector.run().stored_everything
    assert len(letters(database_url)) == 5
    engine = create_engine(postgres_url(database_url))

    # Interrupted where it hurts: the brokers have the chunk, Postgres does not know.
    marked = replay.mark

    def interrupted(connection, statement, worker, chosen):
        if statement is replay.MARK_REPLAYED and chosen:
            raise KeyboardInterrupt
        marked(connection, statement, worker, chosen)
    monkeypatch.setattr(replay, "mark", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replay.replay(engine, detector.kafka, "anomaly-detector", "no_user")
    monkeypatch.setattr(replay, "mark", marked)
    assert all(row.replayed_at is None for row in letters(database_url).values())

    assert replay.replay(engine, detector.kafka, "anomaly-detector", "no_user") == {"found": 5, "sent": 0}
    assert replay.replay(engine, detector.kafka, "anomaly-detector", "no_user") == {"found": 0, "sent": 0}
    engine.dispose()
    assert all(row.replayed_at is not None for row in letters(database_url).values())
    on_topic = read_all(stack, f"{prefix}loglines", 10)
    replayed = [record for record in on_topic if dict(record.headers).get(dead_letters.REPLAY_HEADER)]
    assert sorted(record.value.decode() for record in replayed) == sorted(lines)
    assert {record.partition for record in replayed} == {0}
    assert {dict(record.headers)[dead_letters.REPLAY_HEADER].decode() for record in replayed} == {
        f"anomaly-detector/{prefix}loglines/0/{offset}" for offset in range(5)}


def test_two_copies_on_one_batch_of_bad_lines_keep_each_letter_once(harnesses, database_url):
    """Another copy (a deploy's overlap, a rebalance) stores the batch between
    this one's summary and its transaction: the fence rolls this one back."""
    first, second = harnesses(ANOMALY_DETECTOR), harnesses(ANOMALY_DETECTOR)
    first.send([f"| login failed {n}" for n in range(30)], timestamps_ms=[NOW_MS] * 30, partition=0)
    ran = first.run(meanwhile=(Step.AFTER_SUMMARY, second.run))
    assert ran.stored_everything and not ran.crashed
    assert sorted(letters(database_url)) == [(0, offset) for offset in range(30)]


def test_a_batch_read_again_after_its_offsets_were_reset_meets_its_letters_stored_and_keeps_each_once(
        harnesses, database_url):
    """Its letters are copied straight into the table, which refuses one
    stored already: then they are added but for those."""
    detector = harnesses(ANOMALY_DETECTOR)
    detector.send([f"| login failed {n}" for n in range(3)] + ["alice | login failed"],
                  timestamps_ms=[NOW_MS] * 4, partition=0)
    assert detector.run().stored_everything
    stored = letters(database_url)
    assert sorted(stored) == [(0, 0), (0, 1), (0, 2)]
    engine = create_engine(postgres_url(database_url))
    with engine.begin() as connection:  # an operator reads the topic again from its start
        connection.exec_driver_sql("DELETE FROM kafka_offsets")
    engine.dispose()
    assert detector.run().stored_everything
    assert letters(database_url) == stored, "each letter once, as first stored"


@pytest.mark.parametrize("master", ["local[2]", "spark://a-cluster:7077"])
def test_letters_copied_from_spark_keep_a_worker_name_that_copy_text_would_escape(
        spark, database_url, monkeypatch, master):
    """Through files Spark writes (Spark in the driver's process), or
    collected in parts (on a cluster; here 500 letters in four)."""
    from pyspark.sql import functions as F

    from shared.worker import dead_letter, kafka_records

    monkeypatch.setattr(spark.sparkContext, "master", master)
    monkeypatch.setattr(dead_letters, "PART_BYTES", 500 * dead_letters.LINE_OVERHEAD_BYTES // 3 + 1)
    worker = "odd\\name\twith\ntabs"
    records = kafka_records(spark, ["kept", "skipped"])
    frame = records.select(dead_letter(F.when(F.col("value") == F.lit(b"skipped"), F.lit("bad_key")))
                           .alias("dead_letter"))
    engine = create_engine(postgres_url(database_url))
    migrate(engine)
    with engine.begin() as connection:
        stored = dead_letters.store_frame(connection, worker, frame)
    engine.dispose()
    kept = letters(database_url)
    assert stored == len(kept) == records.count() // 2
    assert {(row.worker, bytes(row.value)) for row in kept.values()} == {(worker, b"skipped")}


def test_the_keeper_leaves_out_a_record_on_its_topic_that_is_no_dead_letter(harnesses, stack, prefix, database_url):
    processor = harnesses(TEXT_PROCESSOR)
    letter = dead_letters.DeadLetter.of_record("text-processor", SimpleNamespace(
        topic=prefix + "textlines", partition=0, offset=3, timestamp=NOW_MS, key=None, value=b"x"), "bad_time")
    produce(stack, prefix + dead_letters.TOPIC, [b"junk"], partition=0)  # no headers: another producer's
    dead_letters.send(processor.kafka, [letter], processor.stop_requested)
    engine = create_engine(postgres_url(database_url))
    migrate(engine, KEEPER_TABLES)
    keeper = DeadLetterKeeper(engine, processor.kafka, 0, processor.stop_requested)
    assert keeper.keep() == 1
    keeper.close()
    engine.dispose()
    assert [(row.worker, row.offset, row.reason) for row in letters(database_url).values()] == [
        ("text-processor", 3, "bad_time")]


def test_dead_letters_skipped_longer_ago_than_the_retention_are_deleted(database_url):
    engine = create_engine(postgres_url(database_url))
    migrate(engine, KEEPER_TABLES)
    now = datetime.datetime.now(datetime.timezone.utc)
    with engine.begin() as connection:
        dead_letters.store(connection, [
            dead_letters.DeadLetter("aggregator", "p.words", 0, offset, None, "bad_key",
                                    now - datetime.timedelta(hours=hours_ago), None, b"w", None, 1)
            for offset, hours_ago in enumerate([3, 1.5, 0.5])])
    keeper = DeadLetterKeeper(engine, KafkaConfig(brokers=(), use_tls=False), 1, threading.Event())  # retention alone
    assert keeper.retention.delete_old_rows() == {"dead_letters": 2}
    engine.dispose()
    assert sorted(letters(database_url)) == [(0, 2)]
