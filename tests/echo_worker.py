"""A minimal worker on the shared lifecycle: textlines -> words, upper-cased.
A line `poison` fails its task, as an error no worker knows of would.

Used by the lifecycle's own test, apart from any service's logic.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from shared.worker import KafkaSink, Worker, main


def upper_cased(records: DataFrame, run: int) -> DataFrame:
    line = F.col("value").cast("string")
    return records.select(F.col("key"), F.when(line == "poison", F.raise_error(F.lit("poison")))
                          .otherwise(F.upper(line)).alias("value"))


ECHO = Worker(name="echo", topic="textlines", topology=upper_cased, sink=KafkaSink("words"), batch_records=10_000)

if __name__ == "__main__":
    main("tests.echo_worker")
