"""What the benchmark cases share: a stack, a drained backlog's numbers, a report line."""

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from benchmarks import results
from devstack.local_stack import LocalStack, wait_until
from devstack.postgres import STORED_OFFSETS
from devstack.processes import MeasuredWorker, Worker


def migrated_engine(stack):
    """An engine on the stack's Postgres, schema migrated as the release phase does."""
    from services.release import STEPS
    from shared.config import load
    from shared.migrations import migrate
    from shared.worker.progress import engine_for

    engine = engine_for(load({"DATABASE_URL": stack.database_url}, needs_kafka=False,
                             needs_database=True).database_url)
    migrate(engine, STEPS)
    return engine


def stored_offsets(engine, consumer="%"):
    """The next offsets stored in Postgres, summed over the consumer groups
    LIKE `consumer`, on the benchmark's own engine (polled 10 times a
    second: no new connection each time)."""
    from sqlalchemy import text

    with engine.connect() as connection:
        return connection.execute(text(STORED_OFFSETS), {"consumer": consumer}).scalar()


def drain_into_postgres(stack, module, count, folder, prefix, env=None):
    """Run `module` (a worker that stores its offsets in Postgres) over the
    preloaded backlog of `count` records; (engine, worker, drain numbers)
    once Postgres holds them all. `env` adds to the stack's environment."""
    engine = migrated_engine(stack)
    worker = MeasuredWorker(module, {**stack.environment(prefix), **(env or {})},
                            f"{folder}/{prefix}worker.log")
    done = lambda: (stored_offsets(engine, prefix + "%") or 0) >= count  # noqa: E731
    return engine, worker, wait_for_drain(worker, count, done)


def wait_for_drain(worker, count, done):
    """Wait until `done()` (the work shows where it is stored), then until the
    log's last batch line, which follows soon after; the drain's numbers:
    the rates by the clock (wall_per_s, from the process's start; after its
    first commit), the busy time's (drain_numbers), and the worker's CPU
    seconds after its first batch and the records per CPU second: on a
    shared host, steal time slows the clock's rate (by up to 30 % measured
    here) but not this one."""
    wait_until(worker.batches, 3600, "the first batch")
    first_commit, cpu_at_first = time.monotonic(), worker.cpu_s
    wait_until(done, 3600, "the backlog drained")
    drained = time.monotonic()
    wait_until(lambda: drain_numbers(worker)["rows_in"] >= count, 60, "the last batch logged")
    numbers = drain_numbers(worker)
    first_rows = int(worker.batches()[0]["rows_in"])
    # By the clock, as a user waits: from the process's start, and from its
    # first batch logged (committed), to the whole backlog committed.
    numbers["first_commit_s"] = first_commit - worker.started
    numbers["wall_per_s"] = count / (drained - worker.started)
    numbers["wall_per_s_after_first"] = (count - first_rows) / max(drained - first_commit, 0.001)
    numbers["cpu_s_after_first"] = worker.cpu_s - cpu_at_first
    after_first = numbers["rows_in"] - first_rows
    numbers["after_first_per_cpu_s"] = after_first / max(numbers["cpu_s_after_first"], 0.001)
    if os.environ.get("BENCH_VERBOSE"):
        for batch in worker.batches():
            print(" ".join(f"{key}={value}" for key, value in batch.items()), file=sys.stderr)
    return numbers


def drain_numbers(worker):
    """Records read, micro-batches and seconds spent in them (of which in
    Postgres, for the workers that write there), and the rate over all of
    them and over those after the first (which also warms the JVM up)."""
    batches = worker.batches()
    return {"rows_in": sum(int(b["rows_in"]) for b in batches), "batches": len(batches),
            "busy_s": sum(int(b["duration_ms"]) for b in batches) / 1000,
            "postgres_s": sum(int(b.get("postgres_ms", 0)) for b in batches) / 1000,
            "per_s": _rate(batches), "after_first_per_s": _rate(batches[1:] or batches)}


def _rate(batches):
    busy_ms = sum(int(b["duration_ms"]) for b in batches)
    return 1000 * sum(int(b["rows_in"]) for b in batches) / busy_ms if busy_ms else 0.0


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(name, **numbers):
    """One line of figures: printed, and kept in benchmarks/results.jsonl."""
    print(f"bench={name} " + " ".join(
        f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in numbers.items()), flush=True)
    results.figures(name, {key: round(value, 3) if isinstance(value, float) else value
                           for key, value in numbers.items()})


def local_stack(**options):
    return LocalStack(database_url=os.environ.get("DATABASE_URL"), **options)


def spark_preload(stack, topic, build_records, count):
    """Write `count` generated records to `topic` with a Spark batch job: far
    faster than a Python producer. `build_records(ids)` maps a DataFrame of
    `id` to Kafka columns (key, value[, headers])."""
    from shared.config import load
    from shared.spark import session

    kafka = load(stack.environment()).kafka
    assert kafka is not None
    spark = session("bench-preload", kafka)
    began = time.monotonic()
    (build_records(spark.range(count, numPartitions=4)).write.format("kafka")
     .options(**kafka.spark_kafka_options()).option("topic", topic)
     .option("kafka.linger.ms", "50").option("kafka.batch.size", "1000000").save())
    return time.monotonic() - began


WORKERS = ("text_processor", "aggregator", "anomaly_detector")
GENERATORS = ("devstack.textlines", "devstack.loglines")


@contextmanager
def formation(env: dict, folder: str, rate: str) -> Iterator[dict[str, Worker]]:
    """The three workers side by side, as a dyno formation runs them, with
    `rate` text lines and `rate` log lines a second; {name: worker}. All of
    them are stopped (SIGTERM) at the end."""
    workers = {name: Worker(f"services.{name}", env, f"{folder}/{name}.log") for name in WORKERS}
    generators = [Worker(module, env, f"{folder}/{module}.log", [sys.executable, "-m", module, "--rate", rate])
                  for module in GENERATORS]
    try:
        yield workers
    finally:
        for process in [*generators, *workers.values()]:
            process.signal(signal.SIGTERM)
            process.wait(60)
