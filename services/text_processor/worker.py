"""The text processor: textlines -> words. Its Spark side is topology.py."""

from pyspark.sql import SparkSession

from services.text_processor.topology import words
from shared.config import Config
from shared.worker import DriverJvm, KafkaSink, Worker, kafka_records


def warm_up(spark: SparkSession, config: Config) -> None:
    words(kafka_records(spark, ["The quick brown fox", "jumps over"]), run=0).collect()


# Its young generation four times the others': on a backlog it allocates
# a short-lived record for every word (Spark's Kafka sink and the producer),
# and with a small young generation its batches spent much of their time in
# collections (docs/decisions/memory.md).
TEXT_PROCESSOR = Worker(name="text-processor", topic="textlines", topology=words, sink=KafkaSink("words"),
                        batch_records=100_000, warm_up=warm_up, jvm=DriverJvm(young_generation_mb=256))
