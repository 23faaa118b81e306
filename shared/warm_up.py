"""Made-up Kafka records for a worker to run its topology on while its group
is joined.

A JVM's first batch pays for what no class-data archive keeps: static
initializers (Spark's ICU case mapping), classes generated and compiled, and
code not yet compiled by the JIT. A broker holds a new group's first join
3 s, so running the topology once on made-up records mostly fills time the
worker would spend waiting (docs/decisions/warm-up.md).
"""

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

RECORDS = 1000


def kafka_records(spark: SparkSession, values: list[str], headers: Column | None = None) -> DataFrame:
    """RECORDS rows with the Kafka source's columns (and `headers`, if
    given), stamped now, with values taken in turn from `values`."""
    value = F.element_at(F.array(*map(F.lit, values)), (F.col("id") % len(values) + 1).cast("int"))
    columns = [value.cast("binary").alias("key"), value.cast("binary").alias("value"), F.lit("t").alias("topic"),
               (F.col("id") % 2).cast("int").alias("partition"), F.col("id").alias("offset"),
               F.current_timestamp().alias("timestamp"), F.lit(0).alias("timestampType")]
    return spark.range(RECORDS).select(*columns, *([headers.alias("headers")] if headers is not None else []))
