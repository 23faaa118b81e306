"""Each worker's start-up: seconds from its process start to its first
micro-batch stored (offsets committed to its group, or stored in Postgres),
with a small backlog already waiting. One worker at a time, on the 2 cores;
then the three at once, as `make run` starts them.

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
from services.workers import WORKERS as REGISTRY

RUNS, RECORDS = 3, 1000
RECORD = {"text-processor": b"the quick brown fox", "aggregator": b"fox",
          "anomaly-detector": b"user_id: alice | action: login failed"}  # one record of each worker's input
WORKERS = {worker.module: worker for worker in REGISTRY.values()}


def main():
    # A broker that holds a new group's first join 3 s, as Kafka does by
    # default: a deploy or a restart of every dyno starts from an empty group.
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        engine = migrated_engine(stack)
        for module in WORKERS:
            runs = [start_together(stack, engine, folder, [module], prefix=f"startup-{name(module)}-{run}.")[module]
                    for run in range(RUNS)]  # topics of its own: nothing else waiting
            report("startup", worker=name(module), runs=RUNS,
                   **{f"{phase}_median": statistics.median(run[phase] for run in runs) for phase in runs[0]},
                   first_batch_s_max=max(run["first_batch_s"] for run in runs))
        # As `make run` starts them: three JVMs on the 2 cores at once.
        runs = [start_together(stack, engine, folder, list(WORKERS), prefix=f"startup-all-{run}.")
                for run in range(RUNS)]
        report("startup_three_at_once", runs=RUNS, **{
            f"{name(module)}_{phase}_median": statistics.median(run[module][phase] for run in runs)
            for module in WORKERS for phase in runs[0][module]})


def name(module):
    return module.rsplit(".", 1)[-1]


def start_together(stack, engine, folder, modules, prefix):
    """Cold starts of `modules` at once on fresh topics: each one's seconds to each phase."""
    stack.broker.create_topics(prefix, partitions=2)
    for module in modules:
        produce(stack, prefix + WORKERS[module].topic, [RECORD[WORKERS[module].name]] * RECORDS)
    began = time.monotonic()
    workers = {module: MeasuredWorker(module, stack.environment(prefix), f"{folder}/{prefix}{name(module)}.log")
               for module in modules}
    pending = {(module, phase): done for module in modules
               for phase, done in phase_checks(stack, engine, prefix, module, workers[module])}
    phases: dict[str, dict[str, float]] = {module: {} for module in modules}

    def all_seen():
        for (module, phase), done in list(pending.items()):
            if workers[module].process.poll() is not None:
                raise RuntimeError(f"{module} exited before {phase}: {workers[module].output()[-2000:]}")
            if done():
                phases[module][phase] = time.monotonic() - began
                del pending[module, phase]
        return not pending
    wait_until(all_seen, 300, "the first batches")
    for worker in workers.values():
        worker.stop()
    return phases


def phase_checks(stack, engine, prefix, module, worker):
    """Each phase's name, and whether `worker` has reached it."""
    topic = WORKERS[module].topic
    group = f"{prefix}{WORKERS[module].name}-app"

    def stored():
        if WORKERS[module].progress == "postgres":
            return stored_offsets(engine, group) >= RECORDS
        return committed_offsets(stack, group, prefix + topic) == end_offsets(stack, prefix + topic)
    return [("jvm_s", lambda: worker.log_lines("start")),
            ("assigned_s", lambda: worker.log_lines("partitions_assigned")),
            ("first_batch_s", stored)]
