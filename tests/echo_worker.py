"""A minimal worker on the shared lifecycle: textlines -> words, upper-cased.
A line `poison` fails its task, as an error no worker knows of would.

Used by the lifecycle's own test, apart from any service's logic.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from shared.spark import STEADY_TRIGGER, kafka_sink
from shared.worker import Context, Worker, run
from shared.worker.query_run import QueryRun


def start_query(context: Context, run: QueryRun, source: DataFrame, checkpoint: str) -> StreamingQuery:
    line = F.col("value").cast("string")
    upper = source.select(F.col("key"), F.when(line == "poison", F.raise_error(F.lit("poison")))
                          .otherwise(F.upper(line)).alias("value"))
    return kafka_sink(upper, context.kafka, "words", checkpoint, run.trigger(STEADY_TRIGGER))


ECHO = Worker(name="echo", topic="textlines", batch_records=10_000, start_query=start_query)

if __name__ == "__main__":
    run(ECHO)
