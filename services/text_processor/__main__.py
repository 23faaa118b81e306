"""text_processor_worker: textlines -> words. See topology.py."""

import secrets

from services.text_processor.topology import words
from shared import worker
from shared.spark import kafka_sink
from shared.warm_up import kafka_records

BATCH_RECORDS = 100_000  # a micro-batch's records unless MAX_OFFSETS_PER_TRIGGER says


def start_query(context, source, checkpoint):
    # A new run id for every query run: a run's words reach each `words`
    # partition in increasing place, and a re-sent batch always comes in a
    # new run (a failed task fails its query: see shared.spark).
    return kafka_sink(words(source, run=secrets.randbits(31)), context.config.kafka, "words",
                      checkpoint)


def warm_up(spark, config):
    words(kafka_records(spark, ["The quick brown fox", "jumps over"]), run=0).collect()


if __name__ == "__main__":
    worker.run("text-processor", "textlines", start_query, batch_records=BATCH_RECORDS, warm_up=warm_up)
