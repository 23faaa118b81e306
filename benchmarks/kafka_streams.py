"""Kafka Streams, the peer the workers are measured against, run here on the
same day, machine, brokers and backlogs as cold_start: each of
peers/KafkaStreamsPeers.java's topologies started cold (a fresh state
directory, a new application id) on fresh topics of 4 partitions; from the
process's start, the seconds to its group's first committed offsets and to
all of them, and the rates overall and after the first commit.

Two peers (BENCH_PEERS): the seeds' shape (at least once, an upsert a
count) and Kafka Streams tuned (exactly once v2, the project's producer
batching and lz4, counts upserted in batches every 500 ms), each on a broker
with Kafka's 3 s hold of a new group's first join and on one without
(BENCH_JOIN_HOLDS_MS). Kafka Streams 3.9.2, the project's Kafka client
version (jvm/kafka-streams-peers/pom.xml), on the machine's own JDK
(`javac` and `java` from PATH), a 512 MB heap, two stream threads. Median
of cold_start's RUNS.

Each peer's JVM maps a class-data archive of its own, as the workers' do
(bin/spark-class-archive): a run of that topology on a small backlog dumps
the classes it loaded as it exits (-XX:ArchiveClassesAtExit), before the
measured runs (BENCH_PEER_ARCHIVE=0: none).
"""

import functools
import os
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import cold_start
from benchmarks.harness import local_stack
from devstack.kafka_io import committed_offsets, end_offsets
from devstack.local_stack import ROOT
from devstack.processes import MeasuredWorker
from shared.worker import Worker

PEERS_SOURCES = ROOT / "benchmarks" / "peers"
PEERS_JARS = ROOT / "jars" / "kafka-streams-peers"


# The peers (PEER_TUNING), by the name of their reports.
PEERS = {"seed": "kafka_streams_cold_start", "tuned": "kafka_streams_tuned_cold_start"}
# Each peer's program: Kafka Streams, or the jobs by hand on the Kafka clients (kafka_clients_limit.py).
PROGRAMS = {"seed": "KafkaStreamsPeers", "tuned": "KafkaStreamsPeers", "limit": "KafkaClientsLimits"}


ARCHIVED = os.environ.get("BENCH_PEER_ARCHIVE", "1") == "1"
TRAINING_RECORDS = 20_000  # the archive's run: every class of the topology's path, in seconds


def main() -> None:
    for hold_ms in cold_start.join_holds_ms():
        with local_stack(group_join_delay_ms=hold_ms) as stack, tempfile.TemporaryDirectory() as folder:
            jar = compiled(Path(folder))
            for peer in os.environ.get("BENCH_PEERS", ",".join(PEERS)).split(","):
                cold_start.report_each_backlog(cold_start.held(PEERS[peer], hold_ms), f"streams-{peer}",
                                               functools.partial(archived_run, stack, folder, jar, peer))


def compiled(folder: Path) -> Path:
    """The peers as a jar: a class-data archive takes no class from a directory."""
    classes, jar = folder / "classes", folder / "peers.jar"
    sources = [str(source) for source in sorted(PEERS_SOURCES.glob("*.java"))]
    subprocess.run(["javac", "-d", str(classes), "-cp", f"{PEERS_JARS}/*", *sources], check=True)
    subprocess.run(["jar", "--create", "--file", str(jar), "-C", str(classes), "."], check=True)
    return jar


def archived_run(stack, folder: str, jar: Path, peer: str, worker: Worker, count: int, records,
                 prefix: str) -> dict[str, float]:
    """peer_run with the peer's class-data archive for `worker`, made first if need be."""
    if not ARCHIVED:
        return peer_run(stack, folder, jar, peer, worker, count, records, prefix)
    archive = Path(folder) / f"{peer}-{worker.name}.jsa"
    if not archive.is_file():
        peer_run(stack, folder, jar, peer, worker, TRAINING_RECORDS, records, f"{prefix}archive.",
                 [f"-XX:ArchiveClassesAtExit={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"])
        assert archive.is_file(), f"no class-data archive from the peer's run: see {folder}"
    return peer_run(stack, folder, jar, peer, worker, count, records, prefix, [f"-XX:SharedArchiveFile={archive}"])


def peer_run(stack, folder: str, jar: Path, peer: str, worker: Worker, count: int, records,
             prefix: str, java_options: list[str] | None = None) -> dict[str, float]:
    topic, total = cold_start.backlog(stack, prefix, worker, records, count)
    application = f"{prefix}{worker.name}-streams"
    env = {"KAFKA_BOOTSTRAP": stack.broker.bootstrap, "TOPIC_PREFIX": prefix, "APPLICATION_ID": application,
           "STATE_DIR": tempfile.mkdtemp(prefix="state-", dir=folder), "JDBC_URL": jdbc_url(stack.database_url),
           "PEER_TUNING": peer}
    command = ["java", "-Xmx512m", *(java_options or []), "-cp", f"{jar}:{PEERS_JARS}/*", PROGRAMS[peer],
               worker.name]

    def progress() -> int:
        # The anomaly detector's failed logins go through a repartition topic
        # of its own: not drained while that one has records left.
        source = sum(committed_offsets(stack, application, topic).values())
        if source < total:
            return source
        with stack.broker.admin() as admin:
            repartition = [internal for internal in admin.list_topics()
                           if internal.startswith(application) and internal.endswith("-repartition")]
        behind = any(sum(committed_offsets(stack, application, internal).values())
                     < sum(end_offsets(stack, internal).values()) for internal in repartition)
        return total - 1 if behind else total

    return cold_start.timed_drain(lambda: MeasuredWorker("", env, f"{folder}/{prefix}log", command), progress, total)


def jdbc_url(database_url: str) -> str:
    url = urlsplit(database_url)
    credentials = f"user={url.username}" + (f"&password={url.password}" if url.password else "")
    return f"jdbc:postgresql://{url.hostname}:{url.port or 5432}{url.path}?{credentials}"
