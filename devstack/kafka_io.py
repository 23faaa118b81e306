"""Producing to and reading from the local broker in tests (kafka-python)."""

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from devstack.local_stack import wait_until
from shared.events import PLACE_DIGITS, PLACE_HEADER


def produce(stack, topic, values, timestamps_ms=None, key=None, headers=None, partition=None, at_once=False):
    """`at_once`, with a `partition`: the records go as one record batch,
    which a reader (a worker's micro-batch) sees whole or not at all."""
    # Held back until the flush, which sends them in one batch of up to 1 MB.
    held = {"linger_ms": 60_000, "batch_size": 1_000_000} if at_once else {}
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, max_request_size=2_000_000, **held)
    for index, value in enumerate(values):
        if isinstance(value, str):
            value = value.encode()
        producer.send(topic, value=value, key=key if value is not None else b"null-value",
                      timestamp_ms=timestamps_ms[index] if timestamps_ms else None,
                      headers=headers[index] if headers else None, partition=partition)
    producer.flush()
    producer.close()


def event_millis(word_record) -> int:
    """The event time a text processor wrote into a `words` record's place."""
    return int(dict(word_record.headers)[PLACE_HEADER][PLACE_DIGITS:])


def read_all(stack, topic, expected_count, timeout=90):
    """Every record on `topic` once at least `expected_count` are there."""
    consumer = KafkaConsumer(bootstrap_servers=stack.broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=1000)
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    records = []

    def enough():
        records.extend(consumer)
        return len(records) >= expected_count

    try:
        wait_until(enough, timeout, f"{expected_count} records on {topic}")
        records.extend(consumer)  # and anything right behind them
        return records
    finally:
        consumer.close()


def end_offsets(stack, topic):
    consumer = KafkaConsumer(bootstrap_servers=stack.broker.bootstrap)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(partitions).items()}
    finally:
        consumer.close()


def group_state(stack, group):
    """The group's state as its coordinator tells it: Stable, PreparingRebalance, ..."""
    with KafkaAdminClient(bootstrap_servers=stack.broker.bootstrap) as admin:
        return admin.describe_groups([group])[group]["group_state"]


def committed_offsets(stack, group, topic):
    """The group's committed offsets ({} while Kafka is still setting groups up)."""
    try:
        with KafkaAdminClient(bootstrap_servers=stack.broker.bootstrap) as admin:
            offsets = admin.list_group_offsets({group: None})[group]
    except KafkaError as error:
        if error.retriable:
            return {}
        raise
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
