"""The limit on the same 2 cores: each job written by hand on the Kafka
clients (peers/KafkaClientsLimits.java: two threads, at least once, the
project's producer batching and lz4, the aggregator's counts COPYed into
Postgres), started cold on cold_start's backlogs as the Kafka Streams peers
are (kafka_streams.py, with a class-data archive of its own): seconds to
its group's first committed offsets and to all of them, the rates overall
and after the first commit. On brokers with and without the 3 s join hold
(BENCH_JOIN_HOLDS_MS), median of cold_start's RUNS.
"""

import functools
import tempfile
from pathlib import Path

from benchmarks import cold_start, kafka_streams
from benchmarks.harness import local_stack


def main() -> None:
    for hold_ms in cold_start.join_holds_ms():
        with local_stack(group_join_delay_ms=hold_ms) as stack, tempfile.TemporaryDirectory() as folder:
            jar = kafka_streams.compiled(Path(folder))
            cold_start.report_each_backlog(cold_start.held("kafka_clients_limit_cold_start", hold_ms), "limit",
                                           functools.partial(kafka_streams.archived_run, stack, folder, jar, "limit"))
