"""`make bench`: every benchmark case, each printing `key=value` numbers
and keeping them in benchmarks/results.jsonl (benchmarks.results).

    python -m benchmarks [case ... | quick]

It says first how long the cases will take: each one's last run, or the
catalog's estimate (benchmarks.catalog). `quick` is the quick set.
"""

import signal
import sys
import time

from benchmarks import (
    aggregator,
    anomaly_detector,
    batch_overhead,
    cluster,
    cold_start,
    dead_letter_flood,
    kafka_clients_limit,
    kafka_plans,
    kafka_streams,
    kafka_tools,
    latency,
    levers,
    restart,
    restart_tls,
    soak,
    stack_startup,
    startup,
    text_processor,
    web,
)
from benchmarks import results as results_module
from benchmarks.catalog import CASES as CATALOG
from benchmarks.catalog import QUICK

CASES = {
    "stack_startup": stack_startup.main,
    "startup": startup.main,
    "cold_start": cold_start.main,
    "kafka_streams_cold_start": kafka_streams.main,
    "kafka_clients_limit": kafka_clients_limit.main,
    "kafka_tools_limit": kafka_tools.main,
    "restart": restart.main,
    "restart_tls": restart_tls.main,
    "kafka_plans": kafka_plans.main,
    "levers": levers.main,
    "latency": latency.main,
    "batch_overhead": batch_overhead.main,
    "text_processor": text_processor.main,
    "aggregator": aggregator.main,
    "anomaly_detector": anomaly_detector.main,
    "dead_letter_flood": dead_letter_flood.main,
    "web": web.main,
    "cluster": cluster.main,
    "soak": soak.main,
}


def main(names):
    names = QUICK if names == ["quick"] else names or list(CASES)
    print(f"bench: {len(names)} cases, about {round(minutes(names))} minutes ({', '.join(names)}); "
          f"`make bench-quick` runs {len(QUICK)} of them in about {round(minutes(QUICK))}", file=sys.stderr, flush=True)
    for name in names:
        began = time.monotonic()
        CASES[name]()
        results_module.run(name, time.monotonic() - began)


def minutes(names):
    """Minutes the cases `names` take: each one's last run, or its estimate."""
    last = results_module.run_seconds(results_module.read())
    return sum(last[name] / 60 if name in last else CATALOG[name].minutes for name in names)


if __name__ == "__main__":
    # A SIGTERM (`timeout`, a stopped CI job) unwinds like Ctrl-C: each case
    # stops the workers, broker and Postgres it started instead of leaving
    # them running on the cores the next case measures.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main(sys.argv[1:])
