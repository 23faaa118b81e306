"""The text processor: textlines -> words. Its Spark side is topology.py."""

import secrets

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from services.text_processor.topology import words
from shared.config import Config
from shared.spark import STEADY_TRIGGER, kafka_sink
from shared.warm_up import kafka_records
from shared.worker import Context, Worker
from shared.worker.query_run import QueryRun


def start_query(context: Context, run: QueryRun, source: DataFrame, checkpoint: str) -> StreamingQuery:
    # A new run id for every query run: a run's words reach each `words`
    # partition in increasing place, and a re-sent batch always comes in a
    # new run (a failed task fails its query: see shared.spark).
    return kafka_sink(words(source, run=secrets.randbits(31)), context.kafka, "words", checkpoint,
                      run.trigger(STEADY_TRIGGER))


def warm_up(spark: SparkSession, config: Config) -> None:
    words(kafka_records(spark, ["The quick brown fox", "jumps over"]), run=0).collect()


TEXT_PROCESSOR = Worker(name="text-processor", topic="textlines", batch_records=100_000, start_query=start_query,
                        warm_up=warm_up)
