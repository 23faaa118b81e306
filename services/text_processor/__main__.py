"""text_processor_worker: textlines -> words. See topology.py."""

from services.text_processor.topology import words
from shared import worker
from shared.spark import kafka_sink


def start_query(context, source, checkpoint):
    return kafka_sink(words(source), context.config.kafka, "words", checkpoint)


if __name__ == "__main__":
    worker.run("text-processor", "textlines", start_query, batch_records=100_000)
