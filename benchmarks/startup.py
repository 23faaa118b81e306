"""Each worker's start-up: seconds from its process start to its first
micro-batch stored (offsets committed to its group, or stored in Postgres),
with a small backlog already waiting. One worker at a time, on the 2 cores.

The phases, from the worker's log: `jvm_s` until the `event=start` line
(Spark's JVM up, the group joined meanwhile and, for Postgres workers, the
schema ready), `assigned_s` until partitions were assigned, `first_batch_s`
until the first batch was stored. Target (issue 16): at most 8 s.
"""

import statistics
import tempfile
import time

from benchmarks.harness import local_stack, migrated_engine, report, stored_offsets
from devstack.kafka_io import committed_offsets, end_offsets, produce
from devstack.local_stack import wait_until
from devstack.processes import MeasuredWorker

RUNS, RECORDS = 3, 1000
WORKERS = {  # module: (input topic, a record, whether its progress is in Postgres)
    "services.text_processor": ("textlines", b"the quick brown fox", False),
    "services.aggregator": ("words", b"fox", True),
    "services.anomaly_detector": ("loglines", b"user_id: alice | action: login failed", True),
}


def main():
    # A broker that holds a new group's first join 3 s, as Kafka does by
    # default: a deploy or a restart of every dyno starts from an empty group.
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        engine = migrated_engine(stack)
        for module, (topic, record, in_postgres) in WORKERS.items():
            app = module.rsplit(".", 1)[-1].replace("_", "-")
            runs = [start_once(stack, engine, folder, module, app, topic, record, in_postgres,
                               prefix=f"startup-{app}-{run}.")  # topics of its own: nothing else waiting
                    for run in range(RUNS)]
            report("startup", worker=module.rsplit(".", 1)[-1], runs=RUNS,
                   **{f"{phase}_median": statistics.median(run[phase] for run in runs) for phase in runs[0]},
                   first_batch_s_max=max(run["first_batch_s"] for run in runs))


def start_once(stack, engine, folder, module, app, topic, record, in_postgres, prefix):
    """One cold start on fresh topics: the seconds to each phase."""
    stack.broker.create_topics(prefix, partitions=2)
    produce(stack, prefix + topic, [record] * RECORDS)
    group = f"{prefix}{app}-app"

    def stored():
        if in_postgres:
            return stored_offsets(engine, group) >= RECORDS
        return committed_offsets(stack, group, prefix + topic) == end_offsets(stack, prefix + topic)
    began = time.monotonic()
    worker = MeasuredWorker(module, stack.environment(prefix), f"{folder}/{prefix}{app}.log")
    phases = {}
    for phase, done in (("jvm_s", lambda: worker.log_lines("start")),
                        ("assigned_s", lambda: worker.log_lines("partitions_assigned")),
                        ("first_batch_s", stored)):
        wait_until(lambda: done() or worker.process.poll() is not None, 300, phase)
        if worker.process.poll() is not None:
            raise RuntimeError(f"{module} exited before {phase}: {worker.output()[-2000:]}")
        phases[phase] = time.monotonic() - began
    worker.stop()
    return phases
