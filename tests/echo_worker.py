"""A minimal worker on the shared lifecycle: textlines -> words, upper-cased.

Used by the lifecycle's own test, apart from any service's logic.
"""

from pyspark.sql import functions as F

from shared import worker
from shared.spark import kafka_sink


def start_query(context, source, checkpoint):
    upper = source.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
    return kafka_sink(upper, context.config.kafka, "words", checkpoint)


if __name__ == "__main__":
    worker.run("echo", "textlines", start_query, batch_records=10_000)
