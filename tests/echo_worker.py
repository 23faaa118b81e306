"""A minimal worker on the shared lifecycle: textlines -> words, upper-cased.

Used by the lifecycle's own test, before any service exists.
"""

from pyspark.sql import functions as F

from shared import worker


def start_query(config, source, checkpoint, batch_log):
    kafka = config.kafka
    return (
        source.select(F.col("key"), F.upper(F.col("value").cast("string")).alias("value"))
        .writeStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("topic", kafka.topic("words"))
        .option("checkpointLocation", checkpoint)
        .start()
    )


if __name__ == "__main__":
    worker.run("echo", "textlines", start_query)
