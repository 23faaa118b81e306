"""A copy of the text processor that goes away, and how long its partitions
stand still: the seconds from the fault to the first batch stored on them.

- `sigkill`: a copy killed inside a batch (an R15, a crash) and restarted at
  once under the same DYNO, as Heroku restarts a crashed dyno; until its
  restarted copy stores a batch.
- `sigterm`: one of two copies stopped for good (`ps:scale` down); until the
  other copy stores a batch on the partitions handed over.
- `daily_restart`: Heroku's daily cycling of a dyno, a SIGTERM and then a new
  copy of the same name; until the new copy stores a batch.

Each as a static member (DYNO set: `group.instance.id`) and as a dynamic one
(no DYNO, as before static membership), median of RUNS, on a backlog
(4 partitions) so that every fault lands inside a batch. Target (issue 35):
at most 10 s after a SIGKILL, JVM start included. (Its 5 s after a SIGTERM
is to the partitions' assignment; `sigterm` here goes on to the first
batch stored on them, behind two running batches.)
"""

import os
import signal
import statistics
import tempfile
import time

from benchmarks.harness import local_stack, report, spark_preload
from benchmarks.text_processor import spark_lines
from devstack.kafka_io import committed_offsets
from devstack.local_stack import wait_until
from devstack.processes import Worker
from services.text_processor.worker import TEXT_PROCESSOR

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
LINES = 1_000_000  # far more than the runs read: every fault lands inside a batch


def main() -> None:
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        for static in (False, True):
            for name, fault in FAULTS.items():
                seconds = [fault(stack, folder, static, f"restart-{name}-{static}-{run}.") for run in range(RUNS)]
                report("restart", fault=name, member="static" if static else "dynamic", runs=RUNS,
                       seconds_median=statistics.median(seconds), seconds_max=max(seconds))


def restarted_after(signum: int):
    """A copy stopped by `signum` inside a batch, and a copy of the same DYNO
    started once it is gone: seconds from the signal to its first stored batch."""
    def fault(stack, folder: str, static: bool, prefix: str) -> float:
        progress = backlog(stack, prefix)
        dyno = {"DYNO": "text_processor_worker.1"} if static else {}
        old = start(stack, folder, prefix, "old", dyno)
        wait_until(lambda: progress() > 0, 300, "the first copy's first batch")
        signalled_at = time.monotonic()
        old.signal(signum)
        old.wait(30)
        stored = progress()
        new = start(stack, folder, prefix, "new", dyno)
        wait_until(lambda: progress() > stored, 300, "the new copy's first batch")
        seconds = time.monotonic() - signalled_at
        new.signal(signal.SIGKILL)
        new.wait(30)
        return seconds
    return fault


def handed_over(stack, folder: str, static: bool, prefix: str) -> float:
    """SIGTERM to one of two copies: seconds to the other's first batch on the partitions it is handed."""
    progress = backlog(stack, prefix)
    copies = [start(stack, folder, prefix, f"copy{n}", {"DYNO": f"text_processor_worker.{n}"} if static else {})
              for n in (1, 2)]
    wait_until(lambda: all(copy.log_lines("batch") for copy in copies), 300, "a batch of each copy")
    leaving, staying = copies
    stopped_at = time.monotonic()
    leaving.signal(signal.SIGTERM)
    wait_until(lambda: staying.log_lines("partitions_assigned")[-1]["partitions"] == "0,1,2,3", 120,
               "every partition handed to the copy that stays")
    batches = len(staying.log_lines("batch"))
    wait_until(lambda: len(staying.log_lines("batch")) > batches, 120, "a batch on the handed-over partitions")
    seconds = time.monotonic() - stopped_at
    leaving.wait(30)
    staying.signal(signal.SIGKILL)
    staying.wait(30)
    assert progress() > 0
    return seconds


def backlog(stack, prefix: str):
    """Fresh topics with the backlog; returns the group's committed lines so far."""
    stack.broker.create_topics(prefix, partitions=4)
    topic = prefix + TEXT_PROCESSOR.topic
    spark_preload(stack, topic, spark_lines, LINES)
    group = f"{prefix}{TEXT_PROCESSOR.name}-app"
    return lambda: sum(committed_offsets(stack, group, topic).values())


FAULTS = {"sigkill": restarted_after(signal.SIGKILL), "sigterm": handed_over,
          "daily_restart": restarted_after(signal.SIGTERM)}


def start(stack, folder: str, prefix: str, name: str, env: dict[str, str]) -> Worker:
    return Worker(TEXT_PROCESSOR.module, {**os.environ, **stack.environment(prefix), **env},
                  f"{folder}/{prefix}{name}.log")
