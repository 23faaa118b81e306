"""text-processor: drain a preloaded backlog, then latency at a steady rate.

Targets (2 cores): >= 20,000 lines/s, peak RSS < 1 GB. BENCH_LINES sets the
backlog (default 1,000,000 lines of about 100 characters).
"""

import itertools
import os
import tempfile
import time

from kafka import KafkaConsumer, KafkaProducer
from pyspark.sql import functions as F

from benchmarks.harness import local_stack, percentile, report, spark_preload, wait_for_drain
from devstack.kafka_io import committed_offsets, end_offsets, event_millis
from devstack.local_stack import wait_until
from devstack.processes import MeasuredWorker
from devstack.textlines import VOCABULARY, made_up_sentences
from services.text_processor.worker import TEXT_PROCESSOR

PREFIX = "bench."
STEADY_RATE, STEADY_SECONDS = 200, 20


def hundred_character_lines(count):
    sentences = made_up_sentences(seed=7)
    for _ in range(count):
        line = b""
        while len(line) < 100:
            line += next(sentences) + b" "
        yield line[:100]


def spark_lines(ids):
    """The backlog, written by Spark (far faster than Python): lines of 18 of
    the generator's words in random order, cut at 100 characters."""
    words = F.slice(F.shuffle(F.array(*map(F.lit, VOCABULARY))), 1, 18)
    return ids.select(F.substring(F.concat_ws(" ", words), 1, 100).cast("binary").alias("value"))


def main():
    count = int(os.environ.get("BENCH_LINES", "1000000"))
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics(PREFIX, partitions=2)
        lines_topic, words_topic = PREFIX + "textlines", PREFIX + "words"
        preload_s = spark_preload(stack, lines_topic, spark_lines, count)

        worker = MeasuredWorker(TEXT_PROCESSOR.module, stack.environment(PREFIX),
                                f"{folder}/worker.log")
        done = lambda: committed_offsets(stack, PREFIX + "text-processor-app", lines_topic) \
            == end_offsets(stack, lines_topic)
        drained = wait_for_drain(worker, count, done)
        lines_in, busy_s = drained["rows_in"], drained["busy_s"]
        words_out = sum(int(b.get("rows_out", 0)) for b in worker.batches())

        report("text_processor_drain", lines=lines_in, words=words_out, preload_s=preload_s,
               batches=drained["batches"], lines_per_s=drained["per_s"], words_per_s=words_out / busy_s,
               lines_per_s_after_first=drained["after_first_per_s"],
               lines_per_wall_s=drained["wall_per_s"], lines_per_wall_s_after_first=drained["wall_per_s_after_first"],
               first_commit_s=drained["first_commit_s"],
               lines_per_cpu_s_after_first=drained["after_first_per_cpu_s"], peak_rss_mb=worker.peak_rss / 2**20)
        latencies = steady_latencies(stack, lines_topic, words_topic)
        worker.stop()
        report("text_processor_latency", rate_lines_per_s=STEADY_RATE,
               p50_s=percentile(latencies, 0.5), p99_s=percentile(latencies, 0.99),
               peak_rss_mb=worker.peak_rss / 2**20, **worker.peaks_mb())


def steady_latencies(stack, lines_topic, words_topic):
    """Seconds from a line's produce to its words arriving on `words`."""
    consumer = KafkaConsumer(words_topic, bootstrap_servers=stack.broker.bootstrap,
                             auto_offset_reset="latest", consumer_timeout_ms=200)
    wait_until(lambda: consumer.poll(100) is not None and consumer.assignment(), 30, "an assignment")
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, linger_ms=0)
    latencies = []
    began = time.monotonic()
    for sent, line in enumerate(itertools.islice(hundred_character_lines(10**9), STEADY_RATE * STEADY_SECONDS)):
        producer.send(lines_topic, line)
        time.sleep(max(0.0, (sent + 1) / STEADY_RATE - (time.monotonic() - began)))
        latencies.extend(arrival_delays(consumer))
    producer.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        latencies.extend(arrival_delays(consumer))
    consumer.close()
    return latencies


def arrival_delays(consumer):
    now_ms = time.time() * 1000
    return [(now_ms - event_millis(record)) / 1000
            for records in consumer.poll(0).values() for record in records]
