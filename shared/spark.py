"""Spark for a dyno: one local JVM, sized from the configuration
(shared.config.SparkConfig: SPARK_MASTER, SPARK_DRIVER_MEMORY,
SPARK_SHUFFLE_PARTITIONS); or a driver of a Spark cluster (SPARK_EXECUTOR_*,
SPARK_CORES_MAX, SPARK_AUTHENTICATE_SECRET)."""

import json
import os
import sys
from concurrent.futures import Future
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import pyspark
from py4j.java_gateway import JavaClass, JavaGateway, JavaMember, JavaPackage, JVMView
from pyspark import SparkConf, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from shared.config import MIN_SPARK_MEMORY_MB, KafkaConfig, SparkConfig
from shared.driver_launch import start_gateway

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_JARS = ROOT / "jars" / "spark-connector"
# The classes a worker's JVM loads, verified and linked ahead of time, which
# it maps at start (bin/spark-class-archive writes it in the slug's build).
CLASS_ARCHIVE = "worker-classes.jsa"

# Spark redacts the values of matching option names from plans and logs; the
# PEM options of the Kafka client and the executors' PEM variables (on a
# cluster) carry the TLS key and certificates.
REDACTED = r"(?i)secret|password|token|access[.]?key|ssl\.keystore\.|ssl\.truststore\.certificates|SPARK_KAFKA_"


# Where a dyno (or a container) finds its memory limit: cgroup v1, then v2.
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max")
NO_LIMIT_BYTES = 2**40  # cgroup v1 reports "unlimited" as about 2**63
STOP_TIMEOUT_MS = 4_000  # of a streaming query's stop
# A query's checkpoint files, written through Hadoop's FileSystem API. Spark's
# default goes through FileContext, which on a local disk (Hadoop's native
# library is not in Spark's jars) forks `readlink` or `chmod` for each file it
# writes or renames: some 25 processes of a JVM's size a micro-batch, about
# half of an empty batch's time (docs/decisions/checkpoint-files.md).
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
# A driver's JVM beside its maximum heap (SPARK_DRIVER_MEMORY), sized so that
# a worker stays flat within a standard-2x dyno all day (docs/operations.md,
# "Sizing and scaling"). The heap starts small (its young generation and
# 64 MB of old) and grows as it needs: the JVM's own default start is a 64th
# of the memory it sees (on a dyno maybe its host's), and every page of a
# young generation is touched as it cycles. The JIT's compiled code stops at
# 64 MB instead of growing for hours toward 240.
# Every 5 s the JVM hands back to the system what glibc's malloc holds freed
# (JDK 17.0.9 and later): tens of MB of a worker's resident memory that no
# JVM category accounts for. After a full collection the heap gives back what
# is more than half free (70 % by default): without that, each growth of the
# old generation stayed, and a worker's resident memory rose in steps.
JVM_MEMORY_OPTIONS = ("-XX:ReservedCodeCacheSize=64m", "-XX:TrimNativeHeapInterval=5000", "-XX:MaxHeapFreeRatio=50")
INITIAL_OLD_GENERATION_MB = 64
YOUNG_GENERATION_MB = 64


# C2 compiles a method once it ran ten times as often as HotSpot's default
# asks: a cold start's first seconds compiled hundreds of methods with C2
# that the first batches ran a few times (the start's own code), on the same
# 2 cores as those batches; the records' code, run millions of times, still
# reaches C2 within seconds (docs/decisions/jit.md, "C2 ten times later,
# with the records' code only").
C2_LATER = ("-XX:Tier4InvocationThreshold=50000", "-XX:Tier4MinInvocationThreshold=6000",
            "-XX:Tier4CompileThreshold=150000", "-XX:Tier4BackEdgeThreshold=400000")


class Jit(Enum):
    """How a driver's JVM compiles its hot code: HotSpot's C1 compiles at
    once, its C2 later and better (docs/decisions/jit.md)."""

    # C1, then C2 for the hottest code: the fastest code once warm.
    TIERED = C2_LATER
    # Tiered, but C2 leaves the code Spark runs per batch rather than per
    # record (its planning, scheduling and task serialization:
    # jit-directives.json) to C1: a third of C2's compiling went to that
    # code, on the same 2 cores as the batches.
    TIERED_RECORDS = (*C2_LATER, "-XX:+UnlockDiagnosticVMOptions",
                      f"-XX:CompilerDirectivesFile={Path(__file__).with_name('jit-directives.json')}")
    # C1 alone, every method compiled at once and without profiling.
    C1_ONLY = ("-XX:TieredStopAtLevel=1",)


@dataclass(frozen=True)
class DriverJvm:
    """What a worker asks of its driver's JVM (shared.launch.Launch.jvm, in its service's __main__)."""

    # Its young generation: each page of it is resident once allocation has
    # cycled through it, and a worker that allocates fast spends less time
    # in collections (each stops every task) with more.
    young_generation_mb: int = YOUNG_GENERATION_MB
    # On 2 cores C2 compiles beside a cold start's first batches for their
    # whole length: each worker's choice is measured (docs/decisions/jit.md).
    jit: Jit = Jit.TIERED

    def options(self) -> list[str]:
        return [f"-Xms{self.young_generation_mb + INITIAL_OLD_GENERATION_MB}m", f"-Xmn{self.young_generation_mb}m",
                *self.jit.value]


# What Spark's status store keeps of past jobs, stages and SQL executions
# (1,000 of each by default), kept with the UI off too: a micro-batch adds
# to each, so a driver's live heap grew for as long as it ran.
RETAINED_HISTORY = "50"


def driver_memory(configured: str = "", limit_files: tuple[str, ...] = CGROUP_MEMORY_LIMITS) -> str:
    """SPARK_DRIVER_MEMORY, or half the dyno's memory, and at least Spark's
    minimum (512m): the rest holds the JVM's own memory (classes, compiled
    code, threads) and Python's (docs/operations.md, "Sizing and scaling")."""
    if configured:
        return configured
    for path in limit_files:
        try:
            limit = int(Path(path).read_text().strip())
        except (OSError, ValueError):  # absent, or "max" (cgroup v2's unlimited)
            continue
        if limit < NO_LIMIT_BYTES:
            return f"{max(MIN_SPARK_MEMORY_MB, limit // 2 // 2**20)}m"
    return f"{MIN_SPARK_MEMORY_MB}m"


def session(app_name: str, kafka: KafkaConfig | None = None, config: SparkConfig | None = None,
            jvm: DriverJvm = DriverJvm(), launching: "Future[JavaGateway] | None" = None) -> SparkSession:
    """The process's SparkSession, on the JVM `launching` starts (launch_jvm
    on a thread of its own: shared.launch) or one launched now. After the
    session was stopped, a new one in the same JVM."""
    if (running := SparkSession.getActiveSession()) is not None:
        return running
    remember_jvm_names()
    config = config or SparkConfig()
    gateway = SparkContext._gateway  # a session stopped before: its JVM
    if gateway is None and launching is not None:
        gateway = launching.result()
    if gateway is None:
        set_jvm_environment(kafka, config)
        gateway = launch_jvm(app_name, config, jvm)
    # The secrets reach the SparkContext through Py4J, not the command line.
    secrets = cluster_secrets(config, kafka) if config.on_cluster else {}
    SparkContext(conf=SparkConf().setAll([*_options(app_name, config, jvm).items(), *secrets.items()]),
                 gateway=gateway)
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def set_jvm_environment(kafka: KafkaConfig | None, config: SparkConfig) -> None:
    """What the JVM inherits at its start: the variables `kafka`'s
    ``spark_kafka_options()`` name, and a local driver's address. Set on the
    main thread, before the JVM is launched (on another one, while the main
    thread imports modules, setenv would race the C library's getenv)."""
    if kafka is not None:
        os.environ.update(kafka.jvm_environment())
    if not config.on_cluster:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def launch_jvm(app_name: str, config: SparkConfig, jvm: DriverJvm) -> JavaGateway:
    """Spark's JVM, started in the environment ``set_jvm_environment`` set;
    `session` makes the SparkContext on it. Its configuration is on its
    command line, where any process of the host can read it: no secret goes
    there."""
    return start_gateway(_options(app_name, config, jvm), spark_home())


def _options(app_name: str, config: SparkConfig, jvm: DriverJvm) -> dict[str, str]:
    options = spark_options(app_name, config, jvm)
    if config.on_cluster:
        options.update(cluster_options(config))
    else:  # one JVM: a dyno's host name means nothing
        options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    return options


def pinned_jvm_thread(spark: SparkSession, name: str) -> int | None:
    """The Linux thread id of the JVM thread that runs this Python thread's
    Py4J calls (PySpark pins one to each Python thread), renamed `name` to
    be found among the JVM's threads (Linux keeps 15 characters of it).
    None if the JVM is not this process's child or no thread has that name."""
    context = spark.sparkContext
    jvm_process = getattr(context._gateway, "proc", None)
    if jvm_process is None or context._jvm is None:
        return None
    context._jvm.java.lang.Thread.currentThread().setName(name)
    found = []
    for task in Path(f"/proc/{jvm_process.pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() == name[:15]:
                found.append(int(task.name))
        except OSError:  # a thread that ended meanwhile
            continue
    return found[0] if len(found) == 1 else None


def remember_jvm_names() -> None:
    """Py4J asks the JVM anew each time Python names a class or a static
    method (`jvm.PythonUtils.toSeq`: two calls before the call itself), and
    the JVM tries a short name as a class in each package PySpark imports,
    each miss a search of every jar on the class path. PySpark names some for
    each Column and DataFrame function, that is for each micro-batch's plan.
    A class or method a name stands for does not change while the JVM runs:
    each is asked once per process (py4j/py4j#596 does the same, unreleased).
    A package is asked again, as a later import may make its name a class."""
    for kind in (JVMView, JavaPackage, JavaClass):
        if not getattr(kind.__getattr__, "remembers", False):
            kind.__getattr__ = _remembering(kind.__getattr__)


def _remembering(look_up: Any) -> Any:
    def __getattr__(self: Any, name: str) -> Any:
        known = self.__dict__.setdefault("_known_names", {})
        if name in known:
            return known[name]
        value = look_up(self, name)
        if isinstance(value, (JavaClass, JavaMember)):  # not a package, nor a static field's value
            known[name] = value
        return value
    __getattr__.remembers = True  # type: ignore[attr-defined]
    return __getattr__


def spark_home() -> Path:
    """Where Spark's jars are: SPARK_HOME, else the installed pyspark (as its launcher finds them)."""
    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def class_archive() -> Path:
    """The workers' class-data archive, beside the jars it was made from."""
    return spark_home() / CLASS_ARCHIVE


def driver_class_path(connector_jars: list[str]) -> list[str]:
    """Spark's jars and the connector's, named one by one in one order: a
    class-data archive holds only for the class path it was made with, and
    the launcher's `jars/*` is expanded in the order the file system lists
    them. The connector's are named from the app's root, the worker's
    working folder, as the slug's build and its dynos both see them (in
    /tmp/build_... and /app on Heroku)."""
    return [*sorted(str(jar) for jar in (spark_home() / "jars").glob("*.jar")),
            *(os.path.relpath(jar) for jar in connector_jars)]


def connector_jars() -> list[str]:
    """The Kafka connector's pinned jars (`make jars`); the process ends if there are none."""
    jars = sorted(str(jar) for jar in CONNECTOR_JARS.glob("*.jar"))
    if not jars:
        sys.exit(f"error: no Spark Kafka connector jars in {CONNECTOR_JARS}; run `make jars`")
    return jars


def spark_options(app_name: str, config: SparkConfig, jvm: DriverJvm = DriverJvm()) -> dict[str, str]:
    """Every worker's Spark configuration, on a dyno or a cluster."""
    english = "-Duser.language=en -Duser.country=US"  # locale-independent lower-casing
    archive = class_archive()
    return {
        "spark.app.name": app_name,
        "spark.master": config.master,
        "spark.driver.memory": driver_memory(config.driver_memory),
        # The connector's jars are on the driver's class path, and in
        # `spark.jars` only on a cluster (cluster_options): in local mode the
        # executor shares this class path, and Spark would copy them into a
        # temporary folder at each start for it all the same.
        "spark.driver.extraClassPath": ":".join(driver_class_path(connector_jars())),
        "spark.driver.extraJavaOptions": " ".join([
            english,
            f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}",
            "-XX:+UseSerialGC",
            *JVM_MEMORY_OPTIONS,
            *jvm.options(),
            *([f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []),
        ]),
        "spark.executor.extraJavaOptions": english,  # on a cluster
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.retainedJobs": RETAINED_HISTORY,
        "spark.ui.retainedStages": RETAINED_HISTORY,
        "spark.sql.ui.retainedExecutions": RETAINED_HISTORY,
        "spark.sql.adaptive.enabled": "false",  # not used by streaming queries
        "spark.redaction.regex": REDACTED,
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        # A cached batch of rows is built whole on the heap: 10,000 rows (the
        # default) of 1,000-character user ids took more than a 512m heap,
        # and a task's OutOfMemoryError ends the JVM. 1,000 rows of the
        # longest key kept (2,000 bytes) are 2 MB.
        "spark.sql.inMemoryColumnarStorage.batchSize": "1000",
        # A failed task fails its micro-batch, and the query restarts from the
        # stored offsets as a new run: a task retried within a run would send
        # a text processor's words again under the same run (see docs/architecture.md,
        # "Exactly once, end to end"). local[N] already never retries a task.
        "spark.task.maxFailures": "1",
        # A query's stop waits for its thread, which closes the Kafka source's
        # admin client, which waits for a call still retrying against a
        # broker that is away (a minute): bounded, so a copy stops within
        # 30 s of SIGTERM in an outage too (shared.worker.query_run.stop_gracefully).
        "spark.sql.streaming.stopTimeout": str(STOP_TIMEOUT_MS),
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
        # PySpark's DataFrame debugging records the Python call site of each
        # DataFrame and Column function, for error messages: about ten calls
        # through Py4J for each (the active session, its settings, the site
        # set and cleared), where the function itself makes two or three. A
        # worker builds each micro-batch's plan anew (docs/decisions/py4j.md).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # `lower` maps case as the JVM does (String.toLowerCase in the
        # locale-independent English set above; ASCII without a String),
        # from the same Unicode tables as the `(?U)\W+` split, not with
        # ICU: ICU's case-mapping classes took a cold JVM's first tasks
        # 1.6 s more (docs/decisions/cold-start.md).
        "spark.sql.icu.caseMappings.enabled": "false",
    }


def cluster_options(config: SparkConfig) -> dict[str, str]:
    """A driver's options on a cluster: executor sizing, the connector's
    jars (the executors fetch them from the driver), and Spark's RPC
    authenticated and encrypted (AES-GCM), as the executors fetch the Kafka
    TLS material through it (``cluster_secrets``)."""
    sizing = {"spark.executor.memory": config.executor_memory,
              "spark.executor.cores": config.executor_cores,
              "spark.cores.max": config.cores_max}
    return {
        **{name: str(value) for name, value in sizing.items() if value},
        "spark.jars": ",".join(connector_jars()),
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
    }


def cluster_secrets(config: SparkConfig, kafka: KafkaConfig | None) -> dict[str, str]:
    """What a cluster's driver holds and gives no command line: the shared
    secret, and the variables its executors' Kafka clients read (they start
    on other hosts, not with the driver's environment)."""
    secrets = {f"spark.executorEnv.{name}": value
               for name, value in (kafka.jvm_environment() if kafka else {}).items()}
    if config.authenticate_secret:
        secrets["spark.authenticate.secret"] = config.authenticate_secret
    return secrets


def kafka_stream(spark: SparkSession, kafka: KafkaConfig, topic: str, app: str, starting_offsets: dict[int, int],
                 batch_records: int, read_headers: bool, options: dict[str, str] | None = None) -> DataFrame:
    """A streaming DataFrame over some partitions of `<prefix><topic>`, read as
    group `<prefix><app>-app`.

    `starting_offsets` maps each partition to read to its next offset (-2:
    earliest, -1: latest). Spark uses the group id only to name its consumers;
    the group's membership and commits are the worker lifecycle's. `options`
    add to these, or replace them.
    """
    return (
        spark.readStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("assign", json.dumps({kafka.topic(topic): sorted(starting_offsets)}))
        .option("kafka.group.id", kafka.group_id(app))
        .option("startingOffsets", json.dumps({kafka.topic(topic): {
            str(partition): offset for partition, offset in starting_offsets.items()}}))
        .option("includeHeaders", str(read_headers).lower())  # 20 % slower when read
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", str(batch_records))
        .option("kafka.max.poll.records", "5000")  # 500 by default: reads are faster with more
        # A read that reached the end of a partition leaves a fetch waiting at
        # the broker for this long (500 ms by default), and the next batch's
        # read waits behind it (docs/benchmarks.md).
        .option("kafka.fetch.max.wait.ms", "5")
        .options(**(options or {}))
        .load()
    )


# One micro-batch sends many small records at once: batch them (fewer, larger
# requests; lz4 also saves bandwidth against Heroku's produce quotas).
PRODUCER_BATCHING = {
    "kafka.linger.ms": "20",
    "kafka.batch.size": "524288",
    "kafka.compression.type": "lz4",
}


# A worker that keeps up starts a micro-batch at most once a second instead
# of as soon as the last one ended: a batch costs CPU beyond its records
# (planning, Spark jobs, checkpoint files, asking Kafka for offsets), and
# workers starting batches back to back took every core of a dyno at any
# rate, slowing each other's batches (docs/benchmarks.md, `latency`). On a
# backlog a batch that took longer is followed at once.
STEADY_TRIGGER_S = 1
STEADY_TRIGGER = f"{STEADY_TRIGGER_S} second"
BACK_TO_BACK = "0 seconds"  # Spark's default: each batch as the last one ends
# A query run meant to store one batch (a cold start's small first one)
# begins it as it starts, and its next trigger lies on the next multiple of
# this interval since the epoch, in 2069: the run is stopped with no batch
# running. On the steady trigger a second small batch would begin at once
# behind a cold first batch (longer than the interval), and the stop would
# wait for it.
ONE_BATCH_TRIGGER = "36500 days"


def wait_for_phase(began: float, now: float, phase_s: float) -> float:
    """Seconds a steady micro-batch that began at `began` and ended at `now`
    (epoch seconds) waits before it returns, so that the next one begins
    `phase_s` past a second.

    Spark begins a trigger's batches on the multiples of its interval since
    the epoch (ProcessingTimeExecutor.nextBatchTime), and at once after a
    batch that ran past its next one. So every worker on STEADY_TRIGGER, on
    any host whose clock keeps time, begins on the second, and a worker that
    reads another's output found only what that one wrote a second before
    (docs/decisions/steady-trigger.md, "Half a second behind the text
    processor"). A batch that returns at a phase point past the second its
    trigger began in has the next one begin there. Never more than an
    interval and the phase: a clock stepped back during the batch (NTP)
    must not hold the worker for as long."""
    next_trigger = (began // STEADY_TRIGGER_S + 1) * STEADY_TRIGGER_S  # Spark's, at the latest
    last_point = now - (now - phase_s) % STEADY_TRIGGER_S
    if began < last_point and now >= next_trigger:
        return 0.0  # a long batch (a backlog): what was written since the point it passed waits
    return min(next_trigger + phase_s - now, STEADY_TRIGGER_S + phase_s)


def kafka_sink(frame: DataFrame, kafka: KafkaConfig, topic: str, checkpoint: str,
               trigger: str = STEADY_TRIGGER) -> StreamingQuery:
    """Start writing a streaming DataFrame (key, value[, headers]) to `<prefix><topic>`."""
    return (
        frame.writeStream.format("kafka")
        .trigger(processingTime=trigger)
        .options(**kafka.spark_kafka_options())
        .options(**PRODUCER_BATCHING)
        .option("topic", kafka.topic(topic))
        .option("checkpointLocation", checkpoint)
        .start()
    )
