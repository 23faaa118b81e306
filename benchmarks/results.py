"""`make bench`'s figures as data: every line a case reports is appended to
benchmarks/results.jsonl (BENCH_RESULTS names another file), one JSON object
a line, kept in the repository so that a figure's history is its data:

    {"case": "cold_start", "commit": "aa2c51a", "utc": "2026-12-04T20:41:00Z",
     "gauge_s": 0.41, "figures": {"worker": "aggregator", "first_commit_s": 5.9, ...}}

`gauge_s` is the machine's speed that hour: the seconds one core takes for
a fixed piece of work, measured once per `make bench` process. This host
is shared and its speed moves by up to two times between hours, so a
figure is compared with another of the same hour, or read beside its
gauge. A case's whole run is a line too, with `run_s` its wall-clock
seconds (what `make bench` says it will take).

    python -m benchmarks.results add COMMIT UTC [KNOB=VALUE ...] < log
        # bench= lines of a run made before this file was kept, with its knobs
"""

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS", ROOT / "benchmarks" / "results.jsonl"))
GAUGE_BYTES = 64 << 20


@dataclass(frozen=True)
class Result:
    case: str
    commit: str
    utc: str
    gauge_s: float | None = None  # None for lines measured before this file was kept
    figures: dict[str, Any] = field(default_factory=dict)  # a report's numbers and labels (worker=...)
    run_s: float | None = None  # set on a case's whole run, and then no figures
    env: dict[str, str] = field(default_factory=dict)  # the knobs it ran with (BENCH_*, LEVERS_OFF)
    # How far along the history its commit is (the commit's ancestors), kept
    # with it: a checkout without git history (Heroku CI's) still orders versions.
    order: int | None = None


@functools.cache
def gauge_s() -> float:
    """Seconds one core takes to hash GAUGE_BYTES, the least of three."""
    block = bytes(range(256)) * 4096
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        digest = hashlib.sha256()
        for _ in range(GAUGE_BYTES // len(block)):
            digest.update(block)
        best = min(best, time.perf_counter() - began)
    return round(best, 4)


@functools.cache
def order_of(commit: str) -> int | None:
    """The commit's ancestors, counted by git; None where git does not know it."""
    counted = subprocess.run(["git", "rev-list", "--count", commit.rstrip("+")], cwd=ROOT,
                             capture_output=True, text=True)
    return int(counted.stdout) if counted.returncode == 0 else None


@functools.cache
def commit() -> str:
    """The commit measured; `+` after it if the tree had changes beyond the results."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--", ".", ":!benchmarks/results.jsonl"],
                             cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip() + ("+" if changed.stdout.strip() else "") if head.returncode == 0 else "unknown"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def append(result: Result, path: Path | None = None) -> None:
    path = path or RESULTS
    kept = {key: value for key, value in result.__dict__.items() if value is not None and value != {}}
    with path.open("a") as file:
        file.write(json.dumps(kept) + "\n")


def knobs() -> dict[str, str]:
    """What in the environment changes what a case measures."""
    return {name: value for name, value in sorted(os.environ.items())
            if (name.startswith("BENCH_") and name != "BENCH_RESULTS") or name == "LEVERS_OFF"}


def figures(case: str, numbers: dict[str, Any]) -> None:
    """Keep one report line of `case`, measured now."""
    append(Result(case, commit(), now(), gauge_s(), numbers, env=knobs(), order=order_of(commit())))


def run(case: str, seconds: float) -> None:
    """Keep the wall-clock seconds of `case`'s whole run."""
    append(Result(case, commit(), now(), gauge_s(), run_s=round(seconds, 1), env=knobs(), order=order_of(commit())))


def read(path: Path | None = None) -> list[Result]:
    path = path or RESULTS
    if not path.exists():
        return []
    return [Result(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def run_seconds(kept: list[Result]) -> dict[str, float]:
    """Each case's seconds, as its last kept run took them with no knobs:
    one with knobs (a broker or a slow hour alone) ran a part of it."""
    return {result.case: result.run_s for result in kept if result.run_s is not None and not result.env}


def parsed(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """`bench=CASE key=value ...` lines as (case, figures): numbers as numbers."""
    for line in lines:
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "bench" not in fields:
            continue
        case = fields.pop("bench")
        yield case, {key: _number(value) for key, value in fields.items()}


def _number(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


if __name__ == "__main__":
    if sys.argv[1:2] != ["add"] or len(sys.argv) < 4:
        sys.exit(__doc__)
    given = dict(knob.split("=", 1) for knob in sys.argv[4:])
    for case, numbers in parsed(sys.stdin):
        append(Result(case, sys.argv[2], sys.argv[3], None, numbers, env=given, order=order_of(sys.argv[2])))
