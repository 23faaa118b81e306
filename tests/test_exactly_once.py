"""The offsets a transactional worker stores for each micro-batch, read from
a real streaming query's offset log, must be exactly those of the records the
batch read."""

from pyspark.sql import functions as F

from shared.config import load
from shared.exactly_once import batch_offset_ranges
from shared.spark import kafka_stream
from tests.kafka_io import produce
from tests.processes import wait_until


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
        logged.append(batch_offset_ranges(checkpoint, batch_id, starting_offsets))
        rows = batch.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()
        read.append({partition: (first, last + 1) for partition, first, last in rows})

    query = source.writeStream.foreachBatch(record).option("checkpointLocation", checkpoint).start()
    try:
        wait_until(lambda: sum(last - first for ranges in read for first, last in ranges.values())
                   >= 7 + 12, 90, "every record read")
    finally:
        query.stop()

    assert len(read) >= 5  # 4 records a batch
    for logged_ranges, read_ranges in zip(logged, read):
        expected = dict(read_ranges)
        if 1 in expected and expected[1][0] == 0:  # where the query began at "earliest"
            expected[1] = (-2, expected[1][1])
        assert logged_ranges == expected
