"""The app on a Heroku-like broker (TLS with client certificates, a broker
certificate that does not name the host, prefix ACLs), reached only through
the config module. Three tests check the stack itself (`test_the_stack_...`):
that it refuses what Heroku's refuses, so that the app's tests on it mean
what they would on Heroku."""

import os
import subprocess
import sys
import threading

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    NotCoordinatorError,
    TopicAuthorizationFailedError,
)
from kafka.structs import OffsetAndMetadata

from devstack.certificates import CertificateAuthority
from devstack.local_stack import ROOT, wait_until
from shared.config import ConfigError, load
from shared.tls_check import check_tls
from tests.checks import assert_no_secret_in, heroku_like, lines_said

pytestmark = heroku_like
NO_STOP = threading.Event()  # never set: the checks here get an answer


def app_kafka(stack, prefix, **overrides):
    """The Kafka config an app on this stack gets, optionally altered."""
    environment = {**stack.environment(prefix), **overrides}
    return load({name: value for name, value in environment.items() if value is not None}).kafka


def test_both_of_the_apps_kafka_clients_speak_tls_with_the_client_certificate_and_no_pem_in_spark(stack, prefix):
    """Heroku's form of the variables (a PKCS#1 key, a broker certificate that
    names another host) gives kafka-python and Spark's Kafka client TLS with
    the client's certificate, the chain verified and the host name not, and
    Spark's options only the names of the variables that hold the PEMs."""
    kafka = app_kafka(stack, prefix)
    python = kafka.kafka_python_kwargs()
    assert python["security_protocol"] == "SSL" and python["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    assert not python["ssl_context"].check_hostname
    spark = kafka.spark_kafka_options()
    assert spark["kafka.security.protocol"] == "SSL" and spark["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert all("BEGIN" not in value for value in spark.values())
    assert kafka.jvm_environment()[spark["kafka.ssl.keystore.key"][len("${env:"):-1]].startswith(
        "-----BEGIN PRIVATE KEY-----")  # the PKCS#1 key Heroku gives, as the PKCS#8 Java reads


def test_kafka_python_produces_consumes_and_commits_through_the_config(stack, prefix):
    kafka = app_kafka(stack, prefix)
    check_tls(kafka, NO_STOP)
    producer = KafkaProducer(**kafka.kafka_python_kwargs())
    producer.send(kafka.topic("textlines"), b"over tls").get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(**kafka.kafka_python_kwargs(), group_id=kafka.group_id("probe"),
                             enable_auto_commit=False, consumer_timeout_ms=20000)
    partitions = [TopicPartition(kafka.topic("textlines"), p) for p in (0, 1)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    record = next(iter(consumer))
    assert record.value == b"over tls"
    consumer.commit({TopicPartition(record.topic, record.partition): OffsetAndMetadata(record.offset + 1, "", -1)})
    consumer.close()


def test_the_stack_denies_the_app_an_unprefixed_topic_as_heroku_does(stack, prefix):
    stack.broker.create_topics("", names=["unprefixed-topic"])  # by the admin, as Heroku's CLI
    producer = KafkaProducer(**app_kafka(stack, prefix).kafka_python_kwargs(), max_block_ms=10000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("unprefixed-topic", b"x").get(timeout=15)
    producer.close()


def test_the_stack_denies_the_app_an_unprefixed_group_as_heroku_does(stack, prefix):
    kafka = app_kafka(stack, prefix)
    with KafkaAdminClient(**kafka.kafka_python_kwargs()) as admin:
        with pytest.raises(GroupAuthorizationFailedError):
            admin.list_group_offsets({"text-processor-app": None})
        # Prefixed: allowed. A fresh broker answers COORDINATOR_NOT_AVAILABLE
        # until it has created __consumer_offsets, on the first group request,
        # then NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS while it loads
        # the group's partition of it.
        wait_until(lambda: group_offsets_listed(admin, kafka.group_id("text-processor")), 30,
                   "the prefixed group's offsets")


def group_offsets_listed(admin, group):
    try:
        admin.list_group_offsets({group: None})
        return True
    except (CoordinatorNotAvailableError, NotCoordinatorError, CoordinatorLoadInProgressError):
        return False


def test_the_stack_denies_the_app_creating_topics_as_heroku_does(stack, prefix):
    kafka = app_kafka(stack, prefix)
    with KafkaAdminClient(**kafka.kafka_python_kwargs()) as admin:
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics({kafka.topic("new-topic"): {"num_partitions": 1, "replication_factor": 1}})


def test_a_wrong_ca_is_one_clear_error(stack, prefix):
    other_ca = CertificateAuthority("some-other-ca")
    with pytest.raises(ConfigError) as error:
        check_tls(app_kafka(stack, prefix, KAFKA_TRUSTED_CERT=other_ca.cert_pem), NO_STOP)
    assert str(error.value).startswith(
        "config error: KAFKA_TRUSTED_CERT did not verify the certificate of broker 127.0.0.1:")


def test_no_client_certificate_is_one_clear_error(stack, prefix):
    with pytest.raises(ConfigError) as error:
        check_tls(app_kafka(stack, prefix, KAFKA_CLIENT_CERT=None, KAFKA_CLIENT_CERT_KEY=None), NO_STOP)
    assert str(error.value).startswith("config error: KAFKA_CLIENT_CERT is required by broker 127.0.0.1:")


def test_a_certificate_from_another_ca_is_one_clear_error(stack, prefix):
    stranger = CertificateAuthority("stranger-ca").issue("heroku-app")
    with pytest.raises(ConfigError) as error:
        check_tls(app_kafka(stack, prefix, KAFKA_CLIENT_CERT=stranger.cert_pem,
                            KAFKA_CLIENT_CERT_KEY=stranger.key_pem), NO_STOP)
    assert str(error.value).startswith("config error: KAFKA_CLIENT_CERT was refused by broker 127.0.0.1:")


def test_a_worker_with_a_wrong_ca_stops_with_that_one_line(stack, prefix, workers):
    worker = workers.start("tests.echo_worker", KAFKA_TRUSTED_CERT=CertificateAuthority("x").cert_pem)
    assert worker.wait(60) != 0
    # Its JVM, started meanwhile, writes to the same log: read it once that has ended too.
    wait_until(worker.group_gone, 30, "the worker's JVM to end")
    lines = lines_said(worker.output())
    assert len(lines) == 1 and lines[0].startswith("config error: KAFKA_TRUSTED_CERT did not verify")
    assert "Traceback" not in worker.output()


# The worker's own path to the broker: its config, its session, its source.
PLAN_AND_ERROR = """
from pyspark.sql import functions as F
from shared.config import load
from shared.spark import session
from shared.worker.spark_kafka import kafka_stream
kafka = load().kafka
spark = session("secrets-test", kafka)
source = kafka_stream(spark, kafka, "textlines", "secrets-test", {0: -2, 1: -2}, 100, True)
source.explain(True)
try:
    source.select("no_such_column")
except Exception as error:
    print("analysis error:", error)
batch = spark.read.format("kafka").options(**kafka.spark_kafka_options())
print("read over TLS:", batch.option("subscribe", kafka.topic("textlines")).load().count())
"""


def test_spark_plans_and_errors_hold_no_key_material_and_still_read_over_tls(stack, prefix):
    produce_lines = KafkaProducer(**app_kafka(stack, prefix).kafka_python_kwargs())
    for n in range(3):
        produce_lines.send(prefix + "textlines", f"line {n}".encode())
    produce_lines.flush()
    produce_lines.close()
    done = subprocess.run([sys.executable, "-c", PLAN_AND_ERROR], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **stack.environment(prefix)}, timeout=300)
    output = done.stdout + done.stderr
    assert "analysis error:" in output and "no_such_column" in output
    assert "kafka.ssl.keystore.key" in output  # the plan shows the source's options...
    assert "read over TLS: 3" in output, output[-3000:]
    assert_no_secret_in(output, stack.environment(prefix))  # ...but no key or certificate
