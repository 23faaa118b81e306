"""A flood of bad records against the same backlog of good ones, per worker:
each worker drains BENCH_RECORDS (default 200,000) records of one kind,
then a fresh copy the same number of the other (alternated, one stack),
and the two drains' time in batches per record and peak memory compare.

The garbage is what a broken producer sends: text lines stamped -1 (no
time: `bad_time`), words holding a NUL (`bad_key`), failed logins with no
user (`no_user`); each the size of its good counterpart. Every bad record
becomes a dead letter: on the dead-letters topic (the text processor) or in
Postgres in the batch's transaction (the others).
"""

import os
import tempfile

from kafka import KafkaProducer

from benchmarks.harness import drain_into_postgres, local_stack, report, wait_for_drain
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.processes import MeasuredWorker

COUNT = int(os.environ.get("BENCH_RECORDS", "200000"))
NO_TIME = -1
# worker: (module, input topic, a good record, a bad one of its size, the bad one's timestamp)
KINDS = {
    "text-processor": ("services.text_processor", "textlines", b"the quick brown fox jumps over the lazy dog " * 2,
                       b"the quick brown fox jumps over the lazy dog " * 2, NO_TIME),
    "aggregator": ("services.aggregator", "words", b"wordsmith", b"word\x00smith", None),
    "anomaly-detector": ("services.anomaly_detector", "loglines", b"user_id: alice | action: login failed",
                         b"user_id:       | action: login failed", None),
}


def produce(stack, topic, value, timestamp_ms, count):
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, linger_ms=50, batch_size=1 << 20)
    for n in range(count):
        producer.send(topic, value=value, timestamp_ms=timestamp_ms, partition=n % 2)
    producer.flush()
    producer.close()


def drain(stack, folder, worker_name, flood, round_):
    module, topic, good, bad, bad_ms = KINDS[worker_name]
    prefix = f"flood{round_}{'b' if flood else 'g'}{worker_name.replace('-', '')}."
    stack.broker.create_topics(prefix, partitions=2)
    produce(stack, prefix + topic, bad if flood else good, bad_ms if flood else None, COUNT)
    if worker_name == "text-processor":
        worker = MeasuredWorker(module, stack.environment(prefix), f"{folder}/{prefix}worker.log")
        done = lambda: committed_offsets(stack, prefix + "text-processor-app", prefix + topic) \
            == end_offsets(stack, prefix + topic)  # noqa: E731
        numbers = wait_for_drain(worker, COUNT, done)
    else:
        engine, worker, numbers = drain_into_postgres(stack, module, COUNT, folder, prefix)
        engine.dispose()
    worker.stop()
    skipped = sum(int(value) for batch in worker.batches() for name, value in batch.items()
                  if name.startswith("skipped_"))
    return {**numbers, "skipped": skipped, "peak_rss_mb": worker.peak_rss / 2**20}


def main():
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        for index, worker_name in enumerate(KINDS):
            runs = {}
            for round_, flood in enumerate((False, True) if index % 2 == 0 else (True, False)):
                runs[flood] = drain(stack, folder, worker_name, flood, round_)
            good, flood = runs[False], runs[True]
            assert flood["skipped"] == COUNT, f"{worker_name} skipped {flood['skipped']} of the flood's {COUNT}"
            report("dead_letter_flood", worker=worker_name, records=COUNT,
                   good_busy_s=good["busy_s"], flood_busy_s=flood["busy_s"],
                   time_factor=flood["busy_s"] / good["busy_s"],
                   good_per_s=good["after_first_per_s"], flood_per_s=flood["after_first_per_s"],
                   good_peak_rss_mb=good["peak_rss_mb"], flood_peak_rss_mb=flood["peak_rss_mb"],
                   memory_factor=flood["peak_rss_mb"] / good["peak_rss_mb"])
