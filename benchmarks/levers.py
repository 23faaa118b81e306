"""Each start-up and latency lever's worth (shared.levers): each worker
started cold on a backlog, as cold_start starts it, with every lever on and
with one lever off (LEVERS_OFF), in turns, RUNS times each: the same hour
for both. Medians, on and off, of the seconds to the first committed
progress and to the backlog drained, and the CPU seconds to drained, with
each one's spread (largest less smallest run): a difference within the
spreads is not the lever's.

The backlogs are cold_start's at BENCH_LEVERS_SCALE (0.25 unless told);
BENCH_LEVERS names the levers (all unless told), BENCH_COLD_WORKERS the
workers. A lever for latency (`phase`, `json_listener`) shows here in the
drain only: the `latency` case run with LEVERS_OFF measures it as a user
meets it.
"""

import os
import statistics
import tempfile

from benchmarks.cold_start import BACKLOGS, RUNS, cold_run
from benchmarks.harness import local_stack, migrated_engine, report
from services.workers import WORKERS
from shared.levers import NAMES

SCALE = float(os.environ.get("BENCH_LEVERS_SCALE", "0.25"))
FIGURES = ("first_commit_s", "drained_s", "cpu_s_to_drained")


def main() -> None:
    levers = os.environ.get("BENCH_LEVERS", ",".join(NAMES)).split(",")
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        engine = migrated_engine(stack)
        for name in os.environ.get("BENCH_COLD_WORKERS", ",".join(BACKLOGS)).split(","):
            worker, count, records = WORKERS[name], int(BACKLOGS[name][0] * SCALE), BACKLOGS[name][1]
            for lever in levers:
                runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
                for n in range(RUNS):
                    for state in runs:  # in turns: what the machine's load does in the hour hits both
                        environment = {"LEVERS_OFF": lever} if state == "off" else {}
                        runs[state].append(cold_run(stack, engine, folder, worker, count, records,
                                                    f"lever-{lever}-{state}-{name}-{n}.", environment))
                figures = {}
                for state in runs:
                    for figure in FIGURES:
                        values = [run[figure] for run in runs[state]]
                        figures[f"{figure}_{state}"] = statistics.median(values)
                        figures[f"{figure}_{state}_spread"] = max(values) - min(values)
                report("levers", lever=lever, worker=name, records=count, runs=RUNS, **figures)
