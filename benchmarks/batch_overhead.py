"""What a micro-batch costs beyond its records: ms per batch of 10 rows
from Spark's `rate-micro-batch` source to the `noop` sink, checkpointed in a
local folder as the workers' queries are, on the workers' Spark
configuration (shared.spark), with the checkpoint's files written through
Hadoop's FileSystem API (the workers' choice) and through FileContext
(Spark's default), alternated in one JVM; median of RUNS after a first
run of each (docs/decisions/checkpoint-files.md).
"""

import os
import statistics
import tempfile
import time

from benchmarks.harness import report
from devstack.local_stack import wait_until
from shared.spark import CHECKPOINT_FILE_MANAGER, session

RUNS = int(os.environ.get("BENCH_RUNS", "5"))
BATCHES = 40
MANAGERS = {
    "filesystem": CHECKPOINT_FILE_MANAGER,
    "filecontext": "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager",
}


def main() -> None:
    spark = session("batch-overhead")
    runs: dict[str, list[float]] = {name: [] for name in MANAGERS}
    for run in range(RUNS + 1):
        for name in MANAGERS if run % 2 == 0 else reversed(MANAGERS):
            spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", MANAGERS[name])
            runs[name].append(ms_per_batch(spark))
    spark.stop()
    report("batch_overhead", batches=BATCHES, runs=RUNS,
           **{f"{name}_ms_per_batch_median": statistics.median(values[1:]) for name, values in runs.items()})


def ms_per_batch(spark) -> float:
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10).load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(processingTime="0 seconds").start())
        batch = lambda: (query.lastProgress or {}).get("batchId", -1)  # noqa: E731
        wait_until(lambda: batch() >= 5, 120, "five batches")  # past the first batches' planning
        began, first = time.monotonic(), batch()
        wait_until(lambda: batch() >= first + BATCHES, 120, f"{BATCHES} more batches")
        elapsed = time.monotonic() - began
        query.stop()
    return elapsed / BATCHES * 1000
