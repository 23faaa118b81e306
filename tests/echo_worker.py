"""A minimal worker on the shared lifecycle: textlines -> words, upper-cased.
A line `poison` fails its task, as an error no worker knows of would.

Used by the lifecycle's own test, apart from any service's logic.
"""

from pyspark.sql import functions as F

from shared import worker
from shared.spark import kafka_sink


def start_query(context, source, checkpoint):
    line = F.col("value").cast("string")
    upper = source.select(F.col("key"), F.when(line == "poison", F.raise_error(F.lit("poison")))
                          .otherwise(F.upper(line)).alias("value"))
    return kafka_sink(upper, context.config.kafka, "words", checkpoint)


if __name__ == "__main__":
    worker.run("echo", "textlines", start_query, batch_records=10_000)
