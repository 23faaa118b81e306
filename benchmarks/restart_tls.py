"""A crashed copy on Heroku's kind of broker: TLS with client certificates,
prefix ACLs, the first join held 3 s, and a steady stream of text lines
(BENCH_RESTART_RATE, 900 a second) through the text processor and the
aggregator, each a static member (DYNO set) as on Heroku.

For each of the two, RUNS times: the running copy SIGKILLed (its JVM too, as
Heroku kills a dyno) and a copy of the same DYNO started at once; seconds
from the kill to the new copy's first batch that read records (its batch
line follows the store), and to the lines on the way there (`start`: Spark
up, joined and the query about to run). Target (issue 67): at most 10 s,
median of RUNS. Then `sigterm`: a second text processor started, once it has
a batch the first is stopped with SIGTERM; seconds to the second's log of
every partition assigned (at most 5 s). BENCH_RESTART_WORKERS (say,
`aggregator`): only those are killed; both always run.
"""

import os
import signal
import statistics
import sys
import tempfile
import time

from benchmarks.harness import local_stack, migrated_engine, report
from benchmarks.latency import caught_up
from devstack.local_stack import wait_until
from devstack.processes import Worker

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
RATE = os.environ.get("BENCH_RESTART_RATE", "900")
PREFIX = "app."  # Heroku's ACLs are on a prefix
PARTITIONS = 8
VICTIMS = ("text_processor", "aggregator")
KILLED = tuple(os.environ.get("BENCH_RESTART_WORKERS", ",".join(VICTIMS)).split(","))
# The new copy's lines on its way to its first batch, in the order it logs them.
MILESTONES = ("partitions_assigned", "start", "batch")


def main() -> None:
    with local_stack(heroku_like=True, group_join_delay_ms=3000) as stack, \
            tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics(PREFIX, partitions=PARTITIONS)
        migrated_engine(stack).dispose()  # the release phase
        env = {**os.environ, **stack.environment(PREFIX)}
        generator = Worker("devstack.textlines", env, f"{folder}/generate.log",
                           [sys.executable, "-m", "devstack.textlines", "--rate", RATE])
        running = {name: start(env, folder, name, 0) for name in VICTIMS}
        try:
            for name in KILLED:
                seconds: list[float] = []
                milestones: dict[str, list[float]] = {event: [] for event in MILESTONES}
                for run in range(1, RUNS + 1):
                    wait_until(lambda: caught_up(running[name]), 300, f"the {name} caught up")
                    running[name], times = killed_and_restarted(running[name], env, folder, name, run)
                    seconds.append(times["batch"])
                    for event in MILESTONES:
                        milestones[event].append(times[event])
                report("restart_tls", worker=name, fault="sigkill", rate_per_s=RATE, partitions=PARTITIONS,
                       runs=RUNS, seconds_median=statistics.median(seconds), seconds_max=max(seconds),
                       **{f"{event}_s_median": statistics.median(values) for event, values in milestones.items()})
            report("restart_tls", worker="text_processor", fault="sigterm", rate_per_s=RATE,
                   partitions=PARTITIONS, seconds=handed_over(running["text_processor"], env, folder))
        finally:
            for worker in [generator, *running.values()]:
                if not worker.group_gone():
                    worker.signal(signal.SIGKILL)
                worker.wait(30)


def start(env: dict, folder: str, name: str, run: int, copy: int = 1) -> Worker:
    return Worker(f"services.{name}", {**env, "DYNO": f"{name}_worker.{copy}"},
                  f"{folder}/{name}-{copy}-{run}.log")


def killed_and_restarted(old: Worker, env: dict, folder: str, name: str, run: int) -> tuple[Worker, dict[str, float]]:
    """SIGKILL to `old`, a copy of its DYNO started once it is gone; the new
    copy and the seconds from the kill to each milestone's first line (for
    `batch`, the first that read records)."""
    killed_at = time.monotonic()
    old.signal(signal.SIGKILL)
    old.wait(30)
    new = start(env, folder, name, run)
    times: dict[str, float] = {}

    def reached() -> bool:
        for event in MILESTONES:
            if event not in times and any(event != "batch" or int(line["rows_in"]) > 0
                                          for line in new.log_lines(event)):
                times[event] = time.monotonic() - killed_at
        assert new.process.poll() is None, new.output()
        return "batch" in times

    wait_until(reached, 120, f"the new {name}'s first batch", interval=0.05)
    return new, times


def handed_over(leaving: Worker, env: dict, folder: str) -> float:
    """A second text processor joins; once it has a batch, the first gets a
    SIGTERM: seconds to the second's line of every partition assigned."""
    second = start(env, folder, "text_processor", 0, copy=2)
    try:
        wait_until(lambda: second.log_lines("batch"), 120, "the second copy's first batch")
        stopped_at = time.monotonic()
        leaving.signal(signal.SIGTERM)
        everything = ",".join(map(str, range(PARTITIONS)))
        wait_until(lambda: second.log_lines("partitions_assigned")[-1]["partitions"] == everything, 60,
                   "every partition handed to the copy that stays", interval=0.05)
        return time.monotonic() - stopped_at
    finally:
        second.signal(signal.SIGKILL)
        second.wait(30)
