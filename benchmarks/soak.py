"""The three workers side by side on a steady stream, for an hour: whether
each one's memory fits a standard-2x dyno (1,024 MB) all day.

300 text lines and 300 log lines a second (BENCH_SOAK_RATE), for
BENCH_SOAK_MINUTES (60). Every 15 s, the resident memory of each worker's
Python and its JVM (a helper the JVM forks is left out: it shares the JVM's
pages); every NMT_MINUTES, the JVM's native memory by category
(`-XX:NativeMemoryTracking=summary`, read with `jcmd`). Reported per worker:
RSS at 2 minutes, at half time and at the end, its peak, and its slope over
the second half (MB a minute, least squares) with its standard error
(Newey-West, see fit) and whether it is `flat`: within two errors of 0; each
NMT category at the end, and the second half's slope of each that moved
(`nmt_<category>_slope`): which part grows, a heap committing more toward
its maximum or a leak.
BENCH_SOAK_SERIES names a file to write every sample to, as JSON.
Target (issue 35): at most 820 MB after an hour, flat over the second half.
"""

import json
import os
import re
import subprocess
import tempfile
import time

import psutil

from benchmarks.harness import WORKERS, formation, local_stack, report
from devstack.local_stack import ROOT
from devstack.processes import Worker

MINUTES = float(os.environ.get("BENCH_SOAK_MINUTES", "60"))
RATE = os.environ.get("BENCH_SOAK_RATE", "300")
SAMPLE_SECONDS = 15
NMT_MINUTES = 5
# Samples up to 5 minutes apart are taken as correlated when the slope's
# noise is estimated (fit): a heap or an arena grows in steps minutes apart.
NOISE_LAG = 5 * 60 // SAMPLE_SECONDS
MOVED_MB_PER_MIN = 0.05  # an NMT category's slope reported from this on
SERIES = os.environ.get("BENCH_SOAK_SERIES")  # a file to write every sample to (JSON), if set


def main() -> None:
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        prefix = "soak."
        stack.broker.create_topics(prefix, partitions=2)
        env = {**os.environ, **stack.environment(prefix),
               # A lever's JVM options to measure come in SPARK_SUBMIT_OPTS too.
               "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:NativeMemoryTracking=summary"}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in WORKERS}  # (minutes, MB)
        native: dict[str, list[tuple[float, dict[str, float]]]] = {name: [] for name in WORKERS}
        with formation(env, folder, RATE) as workers:
            began, next_native = time.monotonic(), 0.0
            while (minutes := (time.monotonic() - began) / 60) < MINUTES:
                read_native = minutes >= next_native
                for name, worker in workers.items():
                    samples[name].append((minutes, rss_mb(worker)))
                    if read_native:
                        native[name].append((minutes, native_memory_mb(worker)))
                if read_native:
                    next_native += NMT_MINUTES
                time.sleep(SAMPLE_SECONDS)
            for name, worker in workers.items():
                native[name].append(((time.monotonic() - began) / 60, native_memory_mb(worker)))
        if SERIES:
            with open(SERIES, "w") as out:
                json.dump({"rss_mb": samples, "nmt_mb": native}, out)
        for name in WORKERS:
            series = samples[name]
            second_half_slope, its_error = fit([(m, mb) for m, mb in series if m >= MINUTES / 2], NOISE_LAG)
            report("soak", worker=name, minutes=MINUTES, rate_per_s=RATE,
                   rss_mb_at_2_min=at(series, 2), rss_mb_at_half=at(series, MINUTES / 2),
                   rss_mb_at_end=series[-1][1], rss_mb_peak=max(mb for _, mb in series),
                   slope_mb_per_min_second_half=second_half_slope, slope_standard_error=its_error,
                   flat=abs(second_half_slope) <= 2 * its_error,
                   batches=len(workers[name].log_lines("batch")), **native[name][-1][1],
                   **moved(native[name]))


def moved(native: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """The second half's slope of each NMT category that moved, MB a minute."""
    second_half = [(m, categories) for m, categories in native if m >= MINUTES / 2]
    slopes = {category.removesuffix("_mb") + "_slope": fit([(m, c.get(category, 0.0)) for m, c in second_half], 0)[0]
              for category in native[-1][1]}
    return {category: value for category, value in slopes.items() if abs(value) >= MOVED_MB_PER_MIN}


def rss_mb(worker: Worker) -> float:
    """Python's and its JVM's resident memory: not a helper the JVM forks."""
    try:
        root = psutil.Process(worker.process.pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for process in processes:
        try:
            if process.name() in ("python", "java"):
                total += process.memory_info().rss
        except psutil.Error:  # a helper the JVM forked, gone meanwhile: it alone is left out
            continue
    return total / 2**20


def native_memory_mb(worker: Worker) -> dict[str, float]:
    """The JVM's committed memory by NMT category, in MB (`nmt_<category>_mb`)."""
    java = [p for p in psutil.Process(worker.process.pid).children(recursive=True) if p.name() == "java"]
    if not java:
        return {}
    summary = subprocess.run([str(jcmd()), str(java[0].pid), "VM.native_memory", "summary", "scale=KB"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    found = re.findall(r"^-\s+([\w ]+?) \(reserved=\d+KB, committed=(\d+)KB", summary, re.M)
    return {"nmt_" + "_".join(category.lower().split()) + "_mb": int(kb) / 1024 for category, kb in found}


def jcmd() -> str:
    """The JDK's jcmd beside the java that runs the workers (the slug's JDK, or JAVA_HOME's)."""
    home = os.environ.get("JAVA_HOME")
    return f"{home}/bin/jcmd" if home else "jcmd"


def at(series: list[tuple[float, float]], minute: float) -> float:
    """The sample nearest `minute`."""
    return min(series, key=lambda sample: abs(sample[0] - minute))[1]


def fit(series: list[tuple[float, float]], lag: int) -> tuple[float, float]:
    """Least squares: the slope (MB a minute) and its standard error, Newey
    and West's: memory moves in steps, so neighbouring samples are not
    independent, and the error counts the correlation of residuals up to
    `lag` samples apart (Bartlett weights; 0: none)."""
    if len(series) < 3:
        return 0.0, 0.0
    mean_x = sum(m for m, _ in series) / len(series)
    mean_y = sum(mb for _, mb in series) / len(series)
    spread = sum((m - mean_x) ** 2 for m, _ in series)
    if not spread:
        return 0.0, 0.0
    slope = sum((m - mean_x) * (mb - mean_y) for m, mb in series) / spread
    scores = [(m - mean_x) * (mb - mean_y - slope * (m - mean_x)) for m, mb in series]
    variance = sum(score * score for score in scores)
    for apart in range(1, min(lag, len(scores) - 1) + 1):
        weight = 1 - apart / (lag + 1)
        variance += 2 * weight * sum(scores[i] * scores[i - apart] for i in range(apart, len(scores)))
    return slope, max(variance, 0.0) ** 0.5 / spread
