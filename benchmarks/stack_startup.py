"""How long the local broker and Postgres take to come up (target: < 20 s),
plaintext and Heroku-like (TLS, ACLs)."""

import statistics

from benchmarks.harness import report
from devstack.local_stack import LocalStack

RUNS = 3


def main():
    for mode in ("plaintext", "heroku"):
        seconds = []
        for _ in range(RUNS):
            with LocalStack(heroku_like=(mode == "heroku")) as stack:
                seconds.append(stack.startup_seconds)
        report("stack_startup", mode=mode, runs=RUNS, median_s=statistics.median(seconds), max_s=max(seconds))
