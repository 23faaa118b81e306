"""The text processor: textlines -> words. Its Spark side is topology.py."""

from pyspark.sql import SparkSession

from services.text_processor.topology import words
from shared.config import Config
from shared.warm_up import kafka_records
from shared.worker import KafkaSink, Worker


def warm_up(spark: SparkSession, config: Config) -> None:
    words(kafka_records(spark, ["The quick brown fox", "jumps over"]), run=0).collect()


TEXT_PROCESSOR = Worker(name="text-processor", topic="textlines", topology=words, sink=KafkaSink("words"),
                        batch_records=100_000, warm_up=warm_up)
