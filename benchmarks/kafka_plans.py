"""The line rate each of Heroku's basic Kafka plans sustains end to end:
lines into `textlines`, their words through the text processor into `words`,
counted by the aggregator into Postgres, on a Heroku-like broker (TLS with
client certificates, prefix ACLs, 8 partitions) whose quotas on the app's
principal are the plan's (produced and consumed bytes a second for the
tenant, every client of the app together). Every plan's backlog of text
lines is loaded first, unthrottled, on a prefix of its own; then, plan by
plan, the quota is set and both workers drain that plan's backlog at once.
The rate is its lines over the seconds from the text processor's first
batch to every word counted (the start, a JVM's, is not the plan's).
BENCH_PLANS names the plans (all unless told); BENCH_PLANS_SCALE multiplies
the backlogs.
"""

import os
import tempfile
import time

from benchmarks import text_processor
from benchmarks.harness import local_stack, migrated_engine, report, spark_preload, stored_offsets
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.local_stack import CLIENT_PRINCIPAL, wait_until
from devstack.processes import MeasuredWorker

PARTITIONS = 8  # bin/heroku-setup's
# Heroku's basic plans: kB a second produced and consumed per tenant, and a
# backlog of a minute or more at each one's rate.
PLANS = {"basic-0": (64, 256, 20_000), "basic-1": (512, 2_048, 100_000), "basic-2": (4_096, 16_384, 400_000)}


def main() -> None:
    plans = os.environ.get("BENCH_PLANS", ",".join(PLANS)).split(",")
    scale = float(os.environ.get("BENCH_PLANS_SCALE", "1"))
    with local_stack(heroku_like=True, group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        engine = migrated_engine(stack)
        for plan in plans:  # loaded before any quota: the loading is not the plan's
            stack.broker.create_topics(prefix(plan), partitions=PARTITIONS)
            spark_preload(stack, prefix(plan) + "textlines", text_processor.spark_lines, int(PLANS[plan][2] * scale))
        for plan in plans:
            produce_kb, consume_kb, _ = PLANS[plan]
            stack.broker.set_quota(CLIENT_PRINCIPAL, produce_kb * 1024, consume_kb * 1024)
            report("kafka_plans", plan=plan, produce_kb_per_s=produce_kb, consume_kb_per_s=consume_kb,
                   **drained(stack, engine, folder, prefix(plan)))
        engine.dispose()


def prefix(plan: str) -> str:
    return plan.replace("-", "") + "."


def drained(stack, engine, folder: str, prefix: str) -> dict[str, float]:
    """Both workers on `prefix`'s backlog until every word is counted."""
    lines = sum(end_offsets(stack, prefix + "textlines").values())
    env = stack.environment(prefix)
    began = time.monotonic()
    splitter, counter = (MeasuredWorker(f"services.{name}", env, f"{folder}/{prefix}{name}.log")
                         for name in ("text_processor", "aggregator"))
    try:
        wait_until(splitter.batches, 600, "the text processor's first batch")
        first_s, first_lines = time.monotonic() - began, int(splitter.batches()[0]["rows_in"])

        def counted() -> bool:
            split = sum(committed_offsets(stack, prefix + "text-processor-app", prefix + "textlines").values())
            words = sum(end_offsets(stack, prefix + "words").values())
            return split >= lines and (stored_offsets(engine, prefix + "aggregator-app") or 0) >= words

        wait_until(counted, 1800, f"{lines} lines counted")
        seconds = time.monotonic() - began
    finally:
        splitter.stop()
        counter.stop()
    words = sum(end_offsets(stack, prefix + "words").values())
    return {"lines": lines, "words": words, "seconds": seconds, "first_batch_s": first_s,
            "lines_per_s": (lines - first_lines) / (seconds - first_s), "words_per_s": words / seconds}
