"""Spark for a dyno: one local JVM, sized from the environment.

    SPARK_MASTER              default local[2]
    SPARK_DRIVER_MEMORY       default 512m (heap of the one JVM)
    SPARK_SHUFFLE_PARTITIONS  default 2
    MAX_OFFSETS_PER_TRIGGER   default 200000 (records per micro-batch, all partitions)
    START_FROM                earliest (default) or latest: where a group with no
                              stored offsets begins
"""

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from shared.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_JARS = ROOT / "jars" / "spark-connector"

# Spark redacts matching option names from plans and logs; the PEM options of
# the Kafka client carry the TLS key and certificates.
REDACTED = r"(?i)secret|password|token|access[.]?key|ssl\.keystore\.|ssl\.truststore\.certificates"


def session(app_name, environ=os.environ):
    jars = sorted(str(jar) for jar in CONNECTOR_JARS.glob("*.jar"))
    if not jars:
        sys.exit(f"error: no Spark Kafka connector jars in {CONNECTOR_JARS}; run `make jars`")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a dyno's host name means nothing
    java_options = " ".join([
        "-Duser.language=en -Duser.country=US",  # locale-independent lower-casing
        f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}",
        "-XX:+UseSerialGC",
    ])
    spark = (
        SparkSession.builder.appName(app_name)
        .master(environ.get("SPARK_MASTER", "local[2]"))
        .config("spark.driver.memory", environ.get("SPARK_DRIVER_MEMORY", "512m"))
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.shuffle.partitions", environ.get("SPARK_SHUFFLE_PARTITIONS", "2"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")  # not used by streaming queries
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.redaction.regex", REDACTED)
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def kafka_stream(spark, kafka, topic, app, starting_offsets, environ=os.environ):
    """A streaming DataFrame over `<prefix><topic>`, read as group `<prefix><app>-app`.

    `starting_offsets` maps each partition to its next offset (-2: earliest,
    -1: latest). Spark uses the group id only to name its consumers; progress
    is committed by the worker lifecycle.
    """
    return (
        spark.readStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("subscribe", kafka.topic(topic))
        .option("kafka.group.id", kafka.group_id(app))
        .option("startingOffsets", json.dumps({kafka.topic(topic): {
            str(partition): offset for partition, offset in starting_offsets.items()}}))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", environ.get("MAX_OFFSETS_PER_TRIGGER", "200000"))
        .load()
    )


def start_from(environ=os.environ):
    value = environ.get("START_FROM", "earliest").strip() or "earliest"
    if value not in ("earliest", "latest"):
        raise ConfigError("START_FROM", "must be earliest or latest")
    return value


# One micro-batch sends many small records at once: batch them (fewer, larger
# requests; lz4 also saves bandwidth against Heroku's produce quotas).
PRODUCER_BATCHING = {
    "kafka.linger.ms": "20",
    "kafka.batch.size": "524288",
    "kafka.compression.type": "lz4",
}


def kafka_sink(frame, kafka, topic, checkpoint):
    """Start writing a streaming DataFrame (key, value[, headers]) to `<prefix><topic>`."""
    return (
        frame.writeStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .options(**PRODUCER_BATCHING)
        .option("topic", kafka.topic(topic))
        .option("checkpointLocation", checkpoint)
        .start()
    )
