"""Each worker started cold on a backlog, as a deploy, a restart or a crash
on a busy stream meets it: from the process's start, the seconds to its
first committed progress and to the backlog drained, and the rates overall
and after the first commit. Each is a static member of its group (DYNO
set), as a dyno is. Median of RUNS, each on fresh topics of 4 partitions,
one worker at a time on the 2 cores, on a broker that holds a new group's
first join 3 s (as Kafka does), then on one that does not (reported as
cold_start_no_hold).

Backlogs (BENCH_COLD_SCALE multiplies them): 400,000 text lines of up to
100 characters, 2,000,000 words, 800,000 log lines at 5 % failures.
kafka_streams_cold_start runs Kafka Streams on the same backlogs.
"""

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks import aggregator, anomaly_detector, text_processor
from benchmarks.harness import local_stack, migrated_engine, report, spark_preload, stored_offsets
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.local_stack import wait_until
from devstack.processes import MeasuredWorker
from services.workers import WORKERS
from shared.worker import Worker

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
PARTITIONS = 4
SCALE = float(os.environ.get("BENCH_COLD_SCALE", "1"))
BACKLOGS = {  # worker: (records, how the preload makes them)
    "text-processor": (400_000, text_processor.spark_lines),
    "aggregator": (2_000_000, aggregator.realistic_words),
    "anomaly-detector": (800_000, anomaly_detector.log_lines),
}


def main() -> None:
    for hold_ms in join_holds_ms():
        with local_stack(group_join_delay_ms=hold_ms) as stack, tempfile.TemporaryDirectory() as folder:
            engine = migrated_engine(stack)
            report_each_backlog(held("cold_start", hold_ms), "cold", lambda worker, count, records, prefix: cold_run(
                stack, engine, folder, worker, count, records, prefix))


def join_holds_ms() -> list[int]:
    """The brokers a case runs on, by how long each holds a new group's first
    join (BENCH_JOIN_HOLDS_MS; Kafka's default 3 s, and none, as a broker set
    with group.initial.rebalance.delay.ms=0)."""
    return [int(hold) for hold in os.environ.get("BENCH_JOIN_HOLDS_MS", "3000,0").split(",")]


def held(case: str, hold_ms: int) -> str:
    """A report's name on a broker with that hold: Kafka's default keeps the case's own."""
    return case if hold_ms == 3000 else f"{case}_{'no' if hold_ms == 0 else hold_ms}_hold"


def report_each_backlog(case: str, prefix: str, run: Callable[[Worker, int, Any, str], dict[str, float]]) -> None:
    """For each worker BENCH_COLD_WORKERS names (all by default), RUNS runs
    of `run(worker, count, records, topic prefix)` on its backlog, reported
    as medians."""
    for name in os.environ.get("BENCH_COLD_WORKERS", ",".join(BACKLOGS)).split(","):
        count, records = int(BACKLOGS[name][0] * SCALE), BACKLOGS[name][1]
        runs = [run(WORKERS[name], count, records, f"{prefix}-{name}-{n}.") for n in range(RUNS)]
        report(case, worker=name, records=count, runs=RUNS,
               **{f"{key}_median": statistics.median(run[key] for run in runs) for key in runs[0]},
               first_commit_s_max=max(run["first_commit_s"] for run in runs))


def cold_run(stack, engine, folder: str, worker: Worker, count: int, records, prefix: str,
             environment: dict[str, str] | None = None) -> dict[str, float]:
    topic, total = backlog(stack, prefix, worker, records, count)
    group = f"{prefix}{worker.name}-app"

    def progress() -> int:
        if worker.progress == "postgres":
            return int(stored_offsets(engine, group) or 0)
        return sum(committed_offsets(stack, group, topic).values())

    # As on Heroku: DYNO names the Procfile's process and the copy.
    dyno = {"DYNO": f"{worker.name.replace('-', '_')}_worker.1"}
    env = {**stack.environment(prefix), **dyno, **(environment or {})}
    return timed_drain(lambda: MeasuredWorker(worker.module, env, f"{folder}/{prefix}log"), progress, total)


def backlog(stack, prefix: str, worker: Worker, records, count: int) -> tuple[str, int]:
    """Fresh topics of PARTITIONS partitions (the worker's own: a case of
    many runs made a broker of thousands of partitions otherwise), `count`
    records preloaded on the worker's input; that topic's name and its records."""
    stack.broker.create_topics(prefix, partitions=PARTITIONS, names=worker.topics)
    topic = prefix + worker.topic
    spark_preload(stack, topic, records, count)
    return topic, sum(end_offsets(stack, topic).values())


def timed_drain(start: Callable[[], MeasuredWorker], progress: Callable[[], int], total: int) -> dict[str, float]:
    """Start a process on a backlog of `total` records; its times to the first
    committed `progress` and to all of it, its rates, peak RSS, and the CPU
    seconds it used until its first commit and until drained (sampled
    every 0.2 s; the machine's other load moves them less than the times)."""
    began = time.monotonic()
    process = start()

    def reached(records: int) -> bool:
        assert process.process.poll() is None, f"the process ended: see {process.log_path}"
        return progress() >= records

    wait_until(lambda: reached(1), 600, "the first committed progress")
    first_s = time.monotonic() - began
    cpu_at_first, at_first = process.cpu_s, progress()
    wait_until(lambda: reached(total), 1200, "the backlog drained")
    drained_s = time.monotonic() - began
    cpu_drained = process.cpu_s
    process.stop()
    return {"first_commit_s": first_s, "drained_s": drained_s, "per_s": total / drained_s,
            "per_s_after_first_commit": (total - at_first) / max(drained_s - first_s, 1e-3),
            "peak_rss_mb": process.peak_rss / 2**20, "cpu_s_to_first_commit": cpu_at_first,
            "cpu_s_to_drained": cpu_drained}
