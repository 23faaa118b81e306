"""anomaly-detector: drain a preloaded backlog of log lines, then the latency
from the record that crosses a threshold to its alert on `alerts`.

Targets (2 cores): >= 100,000 lines/s, alert latency p99 < 2 s, peak RSS < 1 GB.
BENCH_LOGLINES sets the backlog (default 2,000,000 lines, 5 % failed logins
over 10,000 users); BENCH_DISTINCT_USERS=1 makes every line a failed login of
a user of its own with a 1,000-character id, the worst case for the memory a
batch's counts take in Python (a spray of made-up user names).
"""

import json
import os
import tempfile
import time

from kafka import KafkaConsumer, KafkaProducer
from pyspark.sql import functions as F

from benchmarks.harness import drain_into_postgres, local_stack, percentile, report, spark_preload
from devstack.local_stack import wait_until
from services.anomaly_detector.worker import ANOMALY_DETECTOR

PREFIX = "bench."
PROBES = 100


def log_lines(ids):
    if os.environ.get("BENCH_DISTINCT_USERS") == "1":
        user = F.concat(F.lit("u"), F.lpad(F.col("id").cast("string"), 999, "0"))
        action = F.lit("login failed")
    else:
        user = F.concat(F.lit("user"), F.floor(F.rand(3) * 10_000).cast("string"))
        action = F.when(F.rand(4) < 0.05, "login failed").otherwise("login succeeded")
    line = F.concat(F.lit("user_id: "), user, F.lit(" | timestamp: 2026-11-20T10:00:00Z"),
                    F.lit(" | ip_address: 10.0.0.1 | action: "), action, F.lit(" | message: -"))
    return ids.select(line.cast("binary").alias("value"))


def main():
    count = int(os.environ.get("BENCH_LOGLINES", "2000000"))
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics(PREFIX, partitions=2)
        preload_s = spark_preload(stack, PREFIX + "loglines", log_lines, count)
        engine, worker, drained = drain_into_postgres(stack, ANOMALY_DETECTOR.module, count, folder, PREFIX)
        report("anomaly_drain", lines=drained["rows_in"], preload_s=preload_s,
               batches=drained["batches"], lines_per_s=drained["per_s"],
               lines_per_s_after_first=drained["after_first_per_s"],
               lines_per_wall_s=drained["wall_per_s"], lines_per_wall_s_after_first=drained["wall_per_s_after_first"],
               first_commit_s=drained["first_commit_s"],
               lines_per_cpu_s_after_first=drained["after_first_per_cpu_s"],
               busy_s=drained["busy_s"], postgres_s=drained["postgres_s"],
               failed_logins=sum(int(b.get("failed_logins", 0)) for b in worker.batches()),
               peak_rss_mb=worker.peak_rss / 2**20, **worker.peaks_mb())

        latencies = alert_latencies(stack)
        worker.stop()
        report("anomaly_alert_latency", probes=len(latencies), p50_s=percentile(latencies, 0.5),
               p99_s=percentile(latencies, 0.99), max_s=max(latencies),
               peak_rss_mb=worker.peak_rss / 2**20, **worker.peaks_mb())
        engine.dispose()


def alert_latencies(stack):
    """Seconds from sending a probe user's 51st failure to its email alert."""
    consumer = KafkaConsumer(PREFIX + "alerts", bootstrap_servers=stack.broker.bootstrap,
                             auto_offset_reset="latest", consumer_timeout_ms=100)
    wait_until(lambda: consumer.poll(100) is not None and consumer.assignment(), 30, "an assignment")
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, linger_ms=0)
    crossed_at: dict[str, float] = {}
    alerted_at: dict[str, float] = {}
    for probe in range(PROBES):
        user = f"probe{probe}"
        line = f"user_id: {user} | action: login failed".encode()
        at_ms = int(time.time() * 1000)  # one timestamp: a window's end cannot split the 51
        for _ in range(50):
            producer.send(PREFIX + "loglines", line, timestamp_ms=at_ms)
        producer.flush()
        producer.send(PREFIX + "loglines", line, timestamp_ms=at_ms).get(timeout=10)  # the crossing record
        crossed_at[user] = time.monotonic()
        collect_alerts(consumer, alerted_at, until=time.monotonic() + 0.5)
    collect_alerts(consumer, alerted_at, until=time.monotonic() + 15, wanted=PROBES)
    consumer.close()
    producer.close()
    return [alerted_at[user] - crossed_at[user] for user in alerted_at if user in crossed_at]


def collect_alerts(consumer, alerted_at, until, wanted=None):
    while time.monotonic() < until and (wanted is None or len(alerted_at) < wanted):
        for records in consumer.poll(50).values():
            for record in records:
                alert = json.loads(record.value)
                if alert["user"].startswith("probe"):
                    alerted_at.setdefault(alert["user"], time.monotonic())
