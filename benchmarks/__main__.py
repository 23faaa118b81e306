"""`make bench`: every benchmark case, each printing `key=value` numbers.

    python -m benchmarks [case ...]
"""

import signal
import sys

from benchmarks import (
    aggregator,
    anomaly_detector,
    batch_overhead,
    cluster,
    cold_start,
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

CASES = {
    "stack_startup": stack_startup.main,
    "startup": startup.main,
    "cold_start": cold_start.main,
    "kafka_streams_cold_start": kafka_streams.main,
    "kafka_tools_limit": kafka_tools.main,
    "restart": restart.main,
    "restart_tls": restart_tls.main,
    "levers": levers.main,
    "latency": latency.main,
    "batch_overhead": batch_overhead.main,
    "text_processor": text_processor.main,
    "aggregator": aggregator.main,
    "anomaly_detector": anomaly_detector.main,
    "web": web.main,
    "cluster": cluster.main,
    "soak": soak.main,
}


def main(names):
    for name in names or CASES:
        CASES[name]()


if __name__ == "__main__":
    # A SIGTERM (`timeout`, a stopped CI job) unwinds like Ctrl-C: each case
    # stops the workers, broker and Postgres it started instead of leaving
    # them running on the cores the next case measures.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main(sys.argv[1:])
