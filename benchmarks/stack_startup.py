"""How long the local broker and Postgres take to come up (target: < 20 s)."""

import statistics

from shared.local_stack import LocalStack

RUNS = 3


def main():
    seconds = []
    for _ in range(RUNS):
        with LocalStack() as stack:
            seconds.append(stack.startup_seconds)
    print(f"bench=stack_startup runs={RUNS} median_s={statistics.median(seconds):.2f} "
          f"max_s={max(seconds):.2f}", flush=True)
