"""cluster: the text processor and the aggregator drain the same backlog on
`local[2]` and as drivers of a Spark standalone cluster on this machine (two
workers, an executor of one core on each), one after the other.

On one machine a cluster cannot be faster: its executors share the same
cores and add RPC (encrypted), task shipping and a shuffle over the network.
The numbers give the cost of the cluster path, not its gain. BENCH_LINES sets
the text processor's backlog (default 400,000 lines); the aggregator then
drains the words it wrote.
"""

import os
import tempfile
from pathlib import Path

from benchmarks import text_processor
from benchmarks.harness import drain_into_postgres, local_stack, report, spark_preload, wait_for_drain
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.processes import MeasuredWorker
from devstack.spark_cluster import SparkCluster
from services.aggregator.worker import AGGREGATOR
from services.text_processor.worker import TEXT_PROCESSOR


def main():
    lines = int(os.environ.get("BENCH_LINES", "400000"))
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        cluster = SparkCluster(Path(folder) / "cluster").start()
        try:
            for where, env in (("local", {}), ("cluster", cluster.driver_environment())):
                prefix = f"bench-{where}."
                stack.broker.create_topics(prefix, partitions=2)
                drain_lines(stack, prefix, lines, folder, where, env)
                words = sum(end_offsets(stack, prefix + "words").values())
                engine, worker, drained = drain_into_postgres(stack, AGGREGATOR.module, words,
                                                              folder, prefix, env)
                worker.stop()
                engine.dispose()
                report("cluster_aggregator", spark=where, words=drained["rows_in"],
                       batches=drained["batches"], words_per_s=drained["per_s"],
                       words_per_s_after_first=drained["after_first_per_s"])
        finally:
            cluster.stop()


def drain_lines(stack, prefix, count, folder, where, env):
    topic = prefix + "textlines"
    spark_preload(stack, topic, text_processor.spark_lines, count)
    worker = MeasuredWorker(TEXT_PROCESSOR.module, {**stack.environment(prefix), **env},
                            f"{folder}/{prefix}text-processor.log")
    drained = wait_for_drain(worker, count, lambda: committed_offsets(
        stack, prefix + "text-processor-app", topic) == end_offsets(stack, topic))
    worker.stop()
    report("cluster_text_processor", spark=where, lines=drained["rows_in"], batches=drained["batches"],
           lines_per_s=drained["per_s"], lines_per_s_after_first=drained["after_first_per_s"])
