"""Spark's Kafka source and sink as a worker reads and writes them."""

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from shared import dead_letters
from shared.config import KafkaConfig
from shared.worker.triggers import STEADY_TRIGGER


def kafka_stream(spark: SparkSession, kafka: KafkaConfig, topic: str, app: str, starting_offsets: dict[int, int],
                 batch_records: int, read_headers: bool, options: dict[str, str] | None = None) -> DataFrame:
    """A streaming DataFrame over some partitions of `<prefix><topic>`, read as
    group `<prefix><app>-app`.

    `starting_offsets` maps each partition to read to its next offset (-2:
    earliest, -1: latest). Spark uses the group id only to name its consumers;
    the group's membership and commits are the worker lifecycle's. `options`
    add to these, or replace them.
    """
    return (
        spark.readStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("assign", json.dumps({kafka.topic(topic): sorted(starting_offsets)}))
        .option("kafka.group.id", kafka.group_id(app))
        .option("startingOffsets", json.dumps({kafka.topic(topic): {
            str(partition): offset for partition, offset in starting_offsets.items()}}))
        .option("includeHeaders", str(read_headers).lower())  # a row per header: read only when used
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", str(batch_records))
        .option("kafka.max.poll.records", "5000")  # 500 by default: reads are faster with more
        # A read that reached the end of a partition leaves a fetch waiting at
        # the broker for this long (500 ms by default), and the next batch's
        # read waits behind it (docs/decisions/kafka-source.md).
        .option("kafka.fetch.max.wait.ms", "5")
        .options(**(options or {}))
        .load()
    )


# One micro-batch sends many small records at once: batch them (fewer, larger
# requests; lz4 also saves bandwidth against Heroku's produce quotas).
PRODUCER_BATCHING = {
    "kafka.linger.ms": "20",
    "kafka.batch.size": "524288",
    "kafka.compression.type": "lz4",
}



def with_dead_letters(records: DataFrame, worker: str, kafka: KafkaConfig, topic: str) -> DataFrame:
    """A topology's records with the `topic` each goes to: `<prefix><topic>`,
    or for a dead letter (its `dead_letter` column set) the dead-letters topic."""
    if "dead_letter" not in records.columns:
        return records.withColumn("topic", F.lit(kafka.topic(topic)))
    letter = F.col("dead_letter")
    is_letter = letter.isNotNull()
    key, value, headers = dead_letters.kafka_columns(worker, letter)
    written = [F.when(is_letter, key).otherwise(F.col("key")).alias("key"),
               F.when(is_letter, value).otherwise(F.col("value")).alias("value")]
    if "headers" in records.columns:
        written.append(F.when(is_letter, headers).otherwise(F.col("headers")).alias("headers"))
    else:
        written.append(F.when(is_letter, headers).alias("headers"))
    written.append(F.when(is_letter, F.lit(kafka.topic(dead_letters.TOPIC))).otherwise(
        F.lit(kafka.topic(topic))).alias("topic"))
    return records.select(*written)


def kafka_sink(frame: DataFrame, kafka: KafkaConfig, checkpoint: str, trigger: str = STEADY_TRIGGER) -> StreamingQuery:
    """Start writing a streaming DataFrame (key, value[, headers], topic: its
    prefixed topic, with_dead_letters) to Kafka."""
    return (
        frame.writeStream.format("kafka")
        .trigger(processingTime=trigger)
        .options(**kafka.spark_kafka_options())
        .options(**PRODUCER_BATCHING)
        .option("checkpointLocation", checkpoint)
        .start()
    )
