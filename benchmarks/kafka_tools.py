"""The text processor's steady rate against what Kafka's own tools reach on
the same cores for its work: the cold_start backlog (400,000 lines, 4
partitions) read by the console consumer, split into lower-cased words by
`tr`, and written by the console producer, in one pipeline; the producer
batches and compresses as the worker's does (shared.worker.spark_kafka.PRODUCER_BATCHING).
`tr` splits at spaces and lower-cases ASCII only, less work than the
worker's Unicode-aware tokens, and the words carry no header: a generous
limit.

Reported, median of RUNS each: the tools' lines a second overall (both JVMs'
starts included) and after their first word was written; the text
processor's steady rate (after its first commit, as cold_start measures it,
on the same backlog) and that as a share of the tools' after their first
word (issue 34's target: at least 0.6).
"""

import shlex
import statistics
import subprocess
import tempfile
import time

from benchmarks import cold_start, text_processor
from benchmarks.harness import local_stack, report, spark_preload
from devstack.kafka_io import end_offsets
from devstack.local_stack import BROKER_JARS, wait_until
from services.text_processor.worker import TEXT_PROCESSOR
from shared.worker.spark_kafka import PRODUCER_BATCHING

LINES = int(400_000 * cold_start.SCALE)


def main() -> None:
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        tools = [tools_run(stack, folder, f"tools-{run}.") for run in range(cold_start.RUNS)]
        worker = [cold_start.cold_run(stack, None, folder, TEXT_PROCESSOR, LINES, text_processor.spark_lines,
                                      f"steady-{run}.") for run in range(cold_start.RUNS)]
        median = lambda runs, key: statistics.median(run[key] for run in runs)
        steady_per_s = median(worker, "per_s_after_first_commit")
        tools_steady_per_s = median(tools, "per_s_after_first")
        report("kafka_tools_limit", lines=LINES, runs=cold_start.RUNS, tools_lines_per_s=median(tools, "per_s"),
               tools_lines_per_s_after_first=tools_steady_per_s, tools_words=median(tools, "words"),
               text_processor_lines_per_s=median(worker, "per_s"), text_processor_steady_lines_per_s=steady_per_s,
               share_of_tools=steady_per_s / tools_steady_per_s)


def tools_run(stack, folder: str, prefix: str) -> dict[str, float]:
    stack.broker.create_topics(prefix, partitions=cold_start.PARTITIONS)
    spark_preload(stack, prefix + "textlines", text_processor.spark_lines, LINES)

    def tool(main_class: str, *args: str) -> str:
        return shlex.join(["java", "-cp", f"{BROKER_JARS}/*", main_class,
                           "--bootstrap-server", stack.broker.bootstrap, *args])

    pipeline = " | ".join([
        tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", prefix + "textlines",
             "--from-beginning", "--max-messages", str(LINES), "--timeout-ms", "60000"),
        "tr A-Z a-z", "tr -s ' ' '\\n'",
        tool("kafka.tools.ConsoleProducer", "--topic", prefix + "words",
             "--timeout", PRODUCER_BATCHING["kafka.linger.ms"], "--batch-size", PRODUCER_BATCHING["kafka.batch.size"],
             "--compression-codec", PRODUCER_BATCHING["kafka.compression.type"])])

    def words_written() -> int:
        return sum(end_offsets(stack, prefix + "words").values())

    with open(f"{folder}/{prefix}tools.log", "w") as log:
        began = time.monotonic()
        tools = subprocess.Popen(["bash", "-o", "pipefail", "-c", pipeline], stderr=log)
        wait_until(lambda: words_written() or tools.poll() is not None, 120, "the tools' first word")
        first_s, first_words = time.monotonic(), words_written()
        assert tools.wait(600) == 0, f"the tools failed: see {log.name}"
    ended, words = time.monotonic(), words_written()
    return {"per_s": LINES / (ended - began), "words": words,
            "per_s_after_first": (words - first_words) * LINES / words / max(ended - first_s, 1e-3)}
