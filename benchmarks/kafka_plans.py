"""The line rate each of Heroku's basic Kafka plans sustains end to end:
lines into `textlines`, their words through the text processor into `words`,
counted by the aggregator into Postgres, on a Heroku-like broker (TLS with
client certificates, prefix ACLs, 8 partitions) whose quotas on the app's
principal are the plan's (produced and consumed bytes a second for the
tenant, every client of the app together). For each plan a backlog of text
lines (a minute or so at its rate) is drained by both workers at once; the
rate is its lines over the seconds from their start to every word counted.
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

PREFIX = "app."
PARTITIONS = 8  # bin/heroku-setup's
# Heroku's basic plans: kB a second produced and consumed per tenant, and a
# backlog of about a minute at each one's rate.
PLANS = {"basic-0": (64, 256, 4_000), "basic-1": (512, 2_048, 30_000), "basic-2": (4_096, 16_384, 200_000)}


def main() -> None:
    for plan in os.environ.get("BENCH_PLANS", ",".join(PLANS)).split(","):
        produce_kb, consume_kb, backlog = PLANS[plan]
        lines = int(backlog * float(os.environ.get("BENCH_PLANS_SCALE", "1")))
        with local_stack(heroku_like=True, group_join_delay_ms=3000) as stack, \
                tempfile.TemporaryDirectory() as folder:
            stack.broker.create_topics(PREFIX, partitions=PARTITIONS)
            engine = migrated_engine(stack)
            spark_preload(stack, PREFIX + "textlines", text_processor.spark_lines, lines)  # before the quota
            stack.broker.set_quota(CLIENT_PRINCIPAL, produce_kb * 1024, consume_kb * 1024)
            env = stack.environment(PREFIX)
            began = time.monotonic()
            workers = [MeasuredWorker(f"services.{name}", env, f"{folder}/{name}.log")
                       for name in ("text_processor", "aggregator")]
            try:
                def counted() -> bool:
                    split = sum(committed_offsets(stack, PREFIX + "text-processor-app", PREFIX + "textlines")
                                .values()) >= lines
                    words = sum(end_offsets(stack, PREFIX + "words").values())
                    return split and (stored_offsets(engine, PREFIX + "aggregator-app") or 0) >= words

                wait_until(counted, 1800, f"{lines} lines counted on {plan}")
                seconds = time.monotonic() - began
                words = sum(end_offsets(stack, PREFIX + "words").values())
            finally:
                for worker in workers:
                    worker.stop()
            engine.dispose()
            report("kafka_plans", plan=plan, produce_kb_per_s=produce_kb, consume_kb_per_s=consume_kb,
                   lines=lines, words=words, seconds=seconds, lines_per_s=lines / seconds,
                   words_per_s=words / seconds)
