"""The offsets a transactional worker stores for each micro-batch, read from
a real streaming query's offset log, must be exactly those of the records the
batch read; the fence on them refuses a repeat and reports a gap."""

import threading

import pytest
from pyspark.sql import functions as F
from sqlalchemy import text

from devstack.kafka_io import produce
from devstack.local_stack import wait_until
from devstack.postgres import postgres_url
from shared.config import load
from shared.migrations import migrate
from shared.offsets import batch_ranges
from shared.worker.progress import PostgresProgress, StaleBatchError, engine_for
from shared.worker.spark_kafka import kafka_stream


def test_each_batch_range_is_the_offsets_of_its_records(spark, stack, prefix, tmp_path):
    for partition in (0, 1):
        produce(stack, prefix + "loglines", [f"line {n}" for n in range(12)], partition=partition)
    kafka = load(stack.environment(prefix)).kafka
    # Partition 0 resumes at a stored offset; partition 1 was never stored.
    starting_offsets = {0: 5, 1: -2}
    source = kafka_stream(spark, kafka, "loglines", "offsets-test", starting_offsets,
                          batch_records=4, read_headers=False)
    checkpoint = str(tmp_path / "checkpoint")
    logged, read = [], []

    def record(batch, batch_id):
        logged.append(batch_ranges(checkpoint, batch_id, starting_offsets))
        rows = batch.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()
        read.append({partition: (first, last + 1) for partition, first, last in rows})

    query = source.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint).start()
    try:
        wait_until(lambda: sum(last - first for ranges in read for first, last in ranges.values())
                   >= 7 + 12, 90, "every record read")
    finally:
        query.stop()

    assert len(read) >= 5  # 4 records a batch
    for logged_ranges, read_ranges in zip(logged, read, strict=False):
        expected = dict(read_ranges)
        if 1 in expected and expected[1][0] == 0:  # where the query began at "earliest"
            expected[1] = (-2, expected[1][1])
        assert logged_ranges == expected


def test_the_fence_refuses_a_batch_written_before_and_reports_a_gap_as_data_lost(database_url, capsys):
    engine = engine_for(postgres_url(database_url))
    migrate(engine)
    progress = PostgresProgress(engine, "fence-test", "words", threading.Event())

    def write(connection):
        connection.execute(text("CREATE TABLE IF NOT EXISTS written (n int)"))
        connection.execute(text("INSERT INTO written VALUES (1)"))

    progress.commit({0: (-2, 10), 1: (-2, 5)}, write)
    with pytest.raises(StaleBatchError):  # partition 1 overlaps what is stored
        progress.commit({0: (10, 20), 1: (4, 8)}, write)
    assert progress.stored() == {0: 10, 1: 5}
    progress.commit({0: (10, 20), 1: (12, 15)}, write)  # 7 records of partition 1 never read
    assert progress.stored() == {0: 20, 1: 15}
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM written")).scalar() == 2
    engine.dispose()
    lost = [line for line in capsys.readouterr().out.splitlines() if "event=data_lost" in line]
    assert len(lost) == 1 and lost[0].endswith(" topic=words partition=1 records=7")
