"""Each topology's code is generated and compiled once, not for every
micro-batch: a value that changes from batch to batch (the batch's time, the
aggregator's thresholds) must not be written into the generated code, or
every batch pays a compilation and loads new classes (shared.events,
plausible_millis). And none of it calls a method whose code generation
initializes Scala's runtime reflection (below)."""

import re

import pytest
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from devstack.local_stack import wait_until
from services.aggregator.topology import copy_text, grouped, small_batch_groups
from services.anomaly_detector.topology import failed_logins
from services.text_processor.topology import words
from shared.events import PLACE_HEADER, line_place, place_value
from shared.levers.warm_up import kafka_records

WINDOW_SECONDS = 10


def kafka_stream(spark, value) -> DataFrame:
    """A stream of Kafka-shaped records, `value` made of the row's number `n`."""
    rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1000).load()
    return rows.select(F.lit(None).cast("binary").alias("key"), F.col("value").alias("n"), F.lit("t").alias("topic"),
                       F.lit(0).alias("partition"), F.col("value").alias("offset"), "timestamp").withColumn(
        "value", value.cast("binary"))


def place_headers(run: int) -> Column:
    """A `place` header as the text processor writes it: each record a line of its own, of `run`."""
    place = place_value(line_place(F.col("partition"), F.col("offset"), F.lit(run), F.unix_millis("timestamp")),
                        F.lit(0))
    return F.array(F.struct(F.lit(PLACE_HEADER).alias("key"), place.alias("value")))


def word_records(spark) -> DataFrame:
    stream = kafka_stream(spark, F.concat(F.lit("w"), (F.col("n") % 50).cast("string")))
    return stream.withColumn("headers", place_headers(5))


def each_batch(aggregate):
    return lambda batch, batch_id: aggregate(batch).collect()


STARTS = {
    "text processor": lambda spark: words(kafka_stream(spark, F.concat(F.lit("The fox "), F.col("n").cast("string"))),
                                          run=7).writeStream.format("noop"),
    "aggregator": lambda spark: word_records(spark).writeStream.foreachBatch(
        each_batch(lambda batch: grouped(batch, WINDOW_SECONDS, {(0, 0, 5): (3, 1)}))),
    "anomaly detector": lambda spark: kafka_stream(spark, F.concat(
        F.lit("user_id: u"), (F.col("n") % 7).cast("string"), F.lit(" | action: login failed"))
    ).writeStream.foreachBatch(each_batch(lambda batch: failed_logins(batch, WINDOW_SECONDS))),
}


@pytest.mark.parametrize("worker", STARTS)
def test_a_topologys_later_micro_batches_compile_no_code(spark, worker):
    compilations = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    query = STARTS[worker](spark).trigger(processingTime="200 milliseconds").start()
    try:
        def batches() -> int:
            return query.lastProgress["batchId"] if query.lastProgress else -1

        wait_until(lambda: batches() >= 2, 120, "the first batches")
        compiled, first = compilations.getCount(), batches()
        wait_until(lambda: batches() >= first + 3, 120, "three more batches")
        assert compilations.getCount() - compiled == 0  # classes compiled by the three
    finally:
        query.stop()


def static_records(spark) -> DataFrame:
    return kafka_records(spark, ["The fox", "user_id: u1 | action: login failed"], place_headers(0))


PLANS = {
    "text processor": lambda records: words(records, run=7),
    "aggregator": lambda records: small_batch_groups(records, WINDOW_SECONDS, {(0, 0, 5): (3, 1)}),
    "aggregator's copy text": lambda records: copy_text(grouped(records, WINDOW_SECONDS, {}), 2, 1),
    "anomaly detector": lambda records: failed_logins(records, WINDOW_SECONDS),
}


@pytest.mark.parametrize("plan", PLANS)
def test_no_topology_calls_a_method_that_initializes_scalas_reflection(spark, plan):
    """Spark's Invoke (a method called on a value, as `is_valid_utf8` is
    made) names its method through Scala's runtime reflection when its code
    is generated: 1,100 classes initialized in a cold worker's first batch
    (docs/decisions/cold-start.md). A static call (StaticInvoke) does not."""
    optimized = PLANS[plan](static_records(spark))._jdf.queryExecution().optimizedPlan().toJSON()
    classes = set(re.findall(r'"class": ?"([^"]+)"', optimized))
    assert "org.apache.spark.sql.catalyst.expressions.AttributeReference" in classes, "the plan's expressions are read"
    assert "org.apache.spark.sql.catalyst.expressions.objects.Invoke" not in classes
