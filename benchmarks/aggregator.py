"""aggregator: drain a preloaded backlog of words into Postgres, then the
latency from a word's produce to its count being visible.

Targets (2 cores): >= 250,000 words/s exactly once, peak RSS < 1 GB. BENCH_WORDS sets the
backlog (default 5,000,000 words over a Zipf-like vocabulary of 50,000);
BENCH_DISTINCT_WORDS=1 makes every word distinct and 20 characters long, the
worst case for the memory a batch's COPY text takes.
"""

import os
import tempfile
import time

from kafka import KafkaProducer
from pyspark.sql import functions as F
from sqlalchemy import text

from benchmarks.harness import drain_into_postgres, local_stack, percentile, report, spark_preload
from services.aggregator.worker import AGGREGATOR
from shared.events import line_place, place_value

PREFIX = "bench."
VOCABULARY = 50_000
# Event times an hour ago, a minute's start: within the workers' retention.
T0_MS = (int(time.time()) // 60 * 60 - 3600) * 1000
PROBES, PROBE_RATE = 200, 10  # probe words, per second


def realistic_words(ids):
    """Word ranks skewed towards the common ones; event times advance as a
    stream of 300,000 words a second would have them (about 17 s for 5M words,
    so 2 or 3 windows), with one word in a hundred up to a minute late."""
    if os.environ.get("BENCH_DISTINCT_WORDS") == "1":
        word = F.concat(F.lit("w"), F.lpad(F.col("id").cast("string"), 19, "0")).cast("binary")
    else:
        rank = F.floor(F.pow(F.rand(7), 3) * VOCABULARY).cast("int")
        word = F.concat(F.lit("w"), rank.cast("string")).cast("binary")
    on_time_ms = F.lit(T0_MS) + F.floor(F.col("id") / 300)
    late_ms = F.when(F.col("id") % 100 == 0, F.floor(F.rand(9) * 60_000)).otherwise(0)
    event_ms = on_time_ms - late_ms
    # A header as the text processor writes it: each preload task plays a
    # textlines partition, its ids lines of one word.
    place = place_value(line_place(F.spark_partition_id(), F.col("id"), F.lit(1), event_ms), F.lit(0))
    headers = F.array(F.struct(F.lit("place").alias("key"), place.alias("value")))
    return ids.select(word.alias("key"), word.alias("value"), headers.alias("headers"))


def main():
    count = int(os.environ.get("BENCH_WORDS", "5000000"))
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics(PREFIX, partitions=2)
        topic = PREFIX + "words"
        preload_s = spark_preload(stack, topic, realistic_words, count)
        engine, worker, drained = drain_into_postgres(stack, AGGREGATOR.module, count, folder, PREFIX)
        report("aggregator_drain", words=drained["rows_in"], preload_s=preload_s,
               batches=drained["batches"], words_per_s=drained["per_s"],
               words_per_s_after_first=drained["after_first_per_s"],
               words_per_wall_s=drained["wall_per_s"], words_per_wall_s_after_first=drained["wall_per_s_after_first"],
               first_commit_s=drained["first_commit_s"],
               words_per_cpu_s_after_first=drained["after_first_per_cpu_s"],
               busy_s=drained["busy_s"], postgres_s=drained["postgres_s"],
               rows_upserted=sum(int(b["rows_out"]) for b in worker.batches()),
               peak_rss_mb=worker.peak_rss / 2**20, **worker.peaks_mb())

        latencies = probe_latencies(stack, topic, engine)
        worker.stop()
        report("aggregator_latency", probes=len(latencies), rate_per_s=PROBE_RATE,
               p50_s=percentile(latencies, 0.5), p99_s=percentile(latencies, 0.99),
               peak_rss_mb=worker.peak_rss / 2**20, **worker.peaks_mb())
        engine.dispose()


def probe_latencies(stack, topic, engine):
    """Seconds from producing a unique word to its row appearing in Postgres."""
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, linger_ms=0)
    sent_at: dict[str, float] = {}
    seen_at: dict[str, float] = {}
    began = time.monotonic()
    deadline = began + PROBES / PROBE_RATE + 60
    with engine.connect() as connection:
        while len(seen_at) < PROBES and time.monotonic() < deadline:
            due = min(PROBES, int((time.monotonic() - began) * PROBE_RATE) + 1)
            for n in range(len(sent_at), due):
                sent_at[f"probe{n}"] = time.monotonic()
                producer.send(topic, f"probe{n}".encode())
            producer.flush()
            rows = connection.execute(text(
                "SELECT word FROM windowed_counts WHERE word LIKE 'probe%'")).scalars()
            now = time.monotonic()
            for word in rows:
                seen_at.setdefault(word, now)
            connection.commit()
            time.sleep(0.02)
    producer.close()
    return [seen_at[word] - sent_at[word] for word in seen_at]
