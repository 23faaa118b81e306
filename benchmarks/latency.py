"""End-to-end latency at a steady rate, the three workers side by side as a
dyno formation runs them: 1,000 text lines and 1,000 log lines a second
(BENCH_LATENCY_RATE), and on top of them

- probe lines, each one unique word, 10 a second: seconds from a probe
  line's produce to its word's count in Postgres (text processor, `words`,
  aggregator);
- probe users, each 51 failed logins: seconds from the crossing record's
  produce to its alert on `alerts` (anomaly detector).

The probes start BENCH_LATENCY_SETTLE_S (300) seconds after every worker
has caught up with the stream it started behind (its last two batches each
ended with fewer records left than it read): a steady stream, as a dyno
meets it all day, not a JVM still compiling its code. Targets (issue 34):
a line's words counted within 3 s (p99), an alert within 1 s (p99). For
each worker, its batches while the probes ran and its CPU then (`cpu_share`,
of one core): the three share the cores, so what one takes another waits for.

On a plaintext broker and on Heroku's kind (TLS with client certificates,
prefix ACLs: reports named `..._tls`), one after the other
(BENCH_LATENCY_BROKERS). With BENCH_LATENCY_CPUS (a number of cores, such
as 1.4) everything the case starts shares that many cores, a slow hour on
demand (benchmarks.cpu_limit: reports named `..._slow`).
"""

import os
import tempfile
import time

from benchmarks import aggregator, anomaly_detector
from benchmarks.cpu_limit import cpus_limited
from benchmarks.harness import formation, local_stack, migrated_engine, percentile, report
from devstack.local_stack import wait_until
from devstack.processes import Worker

RATE = os.environ.get("BENCH_LATENCY_RATE", "1000")
SETTLE_S = float(os.environ.get("BENCH_LATENCY_SETTLE_S", "300"))
PREFIX = anomaly_detector.PREFIX  # its probes' topics
BROKERS = os.environ.get("BENCH_LATENCY_BROKERS", "plaintext,tls").split(",")
CPUS = float(os.environ["BENCH_LATENCY_CPUS"]) if os.environ.get("BENCH_LATENCY_CPUS") else None


def main() -> None:
    with cpus_limited(CPUS):
        for broker in BROKERS:
            measure(tls=broker == "tls")


def measure(tls: bool) -> None:
    named = ("_tls" if tls else "") + ("_slow" if CPUS else "")
    with local_stack(heroku_like=tls) as stack, tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics(PREFIX, partitions=2)
        engine = migrated_engine(stack)
        with formation({**os.environ, **stack.environment(PREFIX)}, folder, RATE) as workers:
            wait_until(lambda: all(caught_up(worker) for worker in workers.values()), 600, "every worker caught up")
            time.sleep(SETTLE_S)  # a time to run at the rate, not a condition to wait for
            settled = {name: len(worker.log_lines("batch")) for name, worker in workers.items()}
            cpu_before, began = {name: worker.cpu_seconds() for name, worker in workers.items()}, time.monotonic()
            counted = aggregator.probe_latencies(stack, PREFIX + "textlines", engine)
            alerted = anomaly_detector.alert_latencies(stack)
            probed = {name: worker.log_lines("batch")[settled[name]:] for name, worker in workers.items()}
            # Of one core, Python and JVM together, while the probes ran.
            cpu_used = {name: worker.cpu_seconds() - cpu_before[name] for name, worker in workers.items()}
            elapsed = time.monotonic() - began
            cpu_share = {name: used / elapsed for name, used in cpu_used.items()}
        engine.dispose()
        report(f"latency_line_to_count{named}", rate_per_s=RATE, probes=len(counted),
               p50_s=percentile(counted, 0.5), p99_s=percentile(counted, 0.99), max_s=max(counted))
        report(f"latency_failed_login_to_alert{named}", rate_per_s=RATE, probes=len(alerted),
               p50_s=percentile(alerted, 0.5), p99_s=percentile(alerted, 0.99), max_s=max(alerted))
        for name, batches in probed.items():  # while the probes ran: where a probe's time went
            durations = [int(batch["duration_ms"]) for batch in batches if "duration_ms" in batch]
            report(f"latency_batches{named}", worker=name, batches=len(batches),
                   records_p50=percentile([int(batch["rows_in"]) for batch in batches], 0.5),
                   duration_ms_p50=percentile(durations, 0.5), duration_ms_p90=percentile(durations, 0.9),
                   cpu_share=cpu_share[name])


def caught_up(worker: Worker) -> bool:
    """Whether the worker's last two batches each left fewer records behind than they read."""
    last = worker.log_lines("batch")[-2:]
    return len(last) == 2 and all(int(batch["lag"]) < int(batch["rows_in"]) for batch in last)
