"""Spark for a dyno: one local JVM, sized from the configuration
(shared.config.SparkConfig: SPARK_MASTER, SPARK_DRIVER_MEMORY,
SPARK_SHUFFLE_PARTITIONS); or a driver of a Spark cluster (SPARK_EXECUTOR_*,
SPARK_CORES_MAX, SPARK_AUTHENTICATE_SECRET).

The driver JVM's own options are shared.jvm_options; Spark's Kafka source
and sink, shared.worker.spark_kafka."""

import os
import sys
from concurrent.futures import Future
from pathlib import Path

import pyspark
from py4j.java_gateway import JavaGateway
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from shared.config import KafkaConfig, SparkConfig
from shared.jvm_options import JVM_MEMORY_OPTIONS, DriverJvm, driver_memory
from shared.levers import LEVERS
from shared.levers.driver_command import start_gateway
from shared.py4j_names import remember_jvm_names

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_JARS = ROOT / "jars" / "spark-connector"
# The classes a worker's JVM loads, verified and linked ahead of time, which
# it maps at start (bin/spark-class-archive writes it in the slug's build).
CLASS_ARCHIVE = "worker-classes.jsa"

# Spark redacts the values of matching option names from plans and logs; the
# PEM options of the Kafka client and the executors' PEM variables (on a
# cluster) carry the TLS key and certificates.
REDACTED = r"(?i)secret|password|token|access[.]?key|ssl\.keystore\.|ssl\.truststore\.certificates|SPARK_KAFKA_"
STOP_TIMEOUT_MS = 4_000  # of a streaming query's stop
# A query's checkpoint files, written through Hadoop's FileSystem API. Spark's
# default goes through FileContext, which on a local disk (Hadoop's native
# library is not in Spark's jars) forks `readlink` or `chmod` for each file it
# writes or renames: some 25 processes of a JVM's size a micro-batch, about
# half of an empty batch's time (docs/decisions/checkpoint-files.md).
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


# What Spark's status store keeps of past jobs, stages and SQL executions
# (1,000 of each by default), kept with the UI off too: a micro-batch adds
# to each, so a driver's live heap grew for as long as it ran.
RETAINED_HISTORY = "50"


def session(app_name: str, kafka: KafkaConfig | None = None, config: SparkConfig | None = None,
            jvm: DriverJvm = DriverJvm(), launching: "Future[JavaGateway] | None" = None) -> SparkSession:
    """The process's SparkSession, on the JVM `launching` starts (launch_jvm
    on a thread of its own: shared.worker.launch) or one launched now. After the
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
    options = _options(app_name, config, jvm)
    if not LEVERS.driver_command:  # through Spark's launcher, as PySpark starts it (SIGTERM then reaches the JVM too)
        return launch_gateway(SparkConf().setAll(list(options.items())))
    return start_gateway(options, spark_home())


def _options(app_name: str, config: SparkConfig, jvm: DriverJvm) -> dict[str, str]:
    options = spark_options(app_name, config, jvm)
    if config.on_cluster:
        options.update(cluster_options(config))
    else:  # one JVM: a dyno's host name means nothing
        options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    return options


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
        # ICU, whose case-mapping classes a cold JVM's first tasks pay to
        # load (docs/decisions/cold-start.md).
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
