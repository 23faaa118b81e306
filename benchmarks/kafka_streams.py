"""Kafka Streams, the peer issue 34 measures the workers against, run here on
the same day, machine, broker and backlogs as cold_start: each of
peers/KafkaStreamsPeers.java's topologies started cold (a fresh state
directory, a new application id) on fresh topics of 4 partitions; from the
process's start, the seconds to its group's first committed offsets and to
all of them, and the rates overall and after the first commit.

Kafka Streams 3.7.2 (jvm/kafka-streams-peers/pom.xml) on the machine's own JDK
(`javac` and `java` from PATH), a 512 MB heap, two stream threads, at least
once. Median of cold_start's RUNS.
"""

import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import cold_start
from benchmarks.harness import local_stack, report, spark_preload
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.local_stack import ROOT
from devstack.processes import MeasuredWorker

PEERS_SOURCE = ROOT / "benchmarks" / "peers" / "KafkaStreamsPeers.java"
PEERS_JARS = ROOT / "jars" / "kafka-streams-peers"
TOPICS = {"text-processor": "textlines", "aggregator": "words", "anomaly-detector": "loglines"}


def main() -> None:
    names = os.environ.get("BENCH_COLD_WORKERS", ",".join(cold_start.BACKLOGS)).split(",")
    with local_stack(group_join_delay_ms=3000) as stack, tempfile.TemporaryDirectory() as folder:
        classes = compiled(Path(folder))
        for name in names:
            count, records = int(cold_start.BACKLOGS[name][0] * cold_start.SCALE), cold_start.BACKLOGS[name][1]
            runs = [peer_run(stack, folder, classes, name, count, records, f"streams-{name}-{run}.")
                    for run in range(cold_start.RUNS)]
            report("kafka_streams_cold_start", worker=name, records=count, runs=cold_start.RUNS,
                   **{f"{key}_median": statistics.median(run[key] for run in runs) for key in runs[0]},
                   first_commit_s_max=max(run["first_commit_s"] for run in runs))


def compiled(folder: Path) -> Path:
    classes = folder / "classes"
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{PEERS_JARS}/*", str(PEERS_SOURCE)], check=True)
    return classes


def peer_run(stack, folder: str, classes: Path, name: str, count: int, records, prefix: str) -> dict[str, float]:
    stack.broker.create_topics(prefix, partitions=cold_start.PARTITIONS)
    topic = prefix + TOPICS[name]
    spark_preload(stack, topic, records, count)
    application = f"{prefix}{name}-streams"
    env = {"KAFKA_BOOTSTRAP": stack.broker.bootstrap, "TOPIC_PREFIX": prefix, "APPLICATION_ID": application,
           "STATE_DIR": tempfile.mkdtemp(prefix="state-", dir=folder), "JDBC_URL": jdbc_url(stack.database_url)}
    command = ["java", "-Xmx512m", "-cp", f"{classes}:{PEERS_JARS}/*", "KafkaStreamsPeers", name]
    total = sum(end_offsets(stack, topic).values())

    def progress() -> int:
        # The anomaly detector's failed logins go through a repartition topic
        # of its own: not drained while that one has records left.
        source = sum(committed_offsets(stack, application, topic).values())
        if source < total:
            return source
        repartition = [internal for internal in stack.broker.admin().list_topics()
                       if internal.startswith(application) and internal.endswith("-repartition")]
        behind = any(sum(committed_offsets(stack, application, internal).values())
                     < sum(end_offsets(stack, internal).values()) for internal in repartition)
        return total - 1 if behind else total

    return cold_start.timed_drain(lambda: MeasuredWorker("", env, f"{folder}/{prefix}log", command), progress, total)


def jdbc_url(database_url: str) -> str:
    url = urlsplit(database_url)
    credentials = f"user={url.username}" + (f"&password={url.password}" if url.password else "")
    return f"jdbc:postgresql://{url.hostname}:{url.port or 5432}{url.path}?{credentials}"
