"""The text processor: textlines -> words. Its Spark side is topology.py."""

from pyspark.sql import SparkSession

from services.text_processor.topology import words
from shared.config import Config
from shared.worker import DriverJvm, KafkaSink, Worker, kafka_records


def warm_up(spark: SparkSession, config: Config) -> None:
    words(kafka_records(spark, ["The quick brown fox", "jumps over"]), run=0).collect()


# Its young generation four times the others': on a backlog it allocates
# about a gigabyte a second (each word's record goes through Spark's Kafka
# sink and the producer); with 64 MB a sixth of its time went to young
# collections, and with 256 MB its batches ran 5 to 10 % faster than with
# 128 (docs/decisions/memory.md, "The text processor's young generation").
TEXT_PROCESSOR = Worker(name="text-processor", topic="textlines", topology=words, sink=KafkaSink("words"),
                        batch_records=100_000, warm_up=warm_up, jvm=DriverJvm(young_generation_mb=256))
