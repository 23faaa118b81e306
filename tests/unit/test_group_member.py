"""How a copy's group member waits for its partitions
(shared.worker.group_member), with a stand-in for kafka-python's consumer:
the join itself, against a real broker, is tests/integration/test_group_join.py."""

import threading

from kafka import TopicPartition

from shared.config import load
from shared.worker import group_member
from shared.worker.group_member import GroupMember

TOPIC = "t.textlines"


class Consumer:
    """Gives partitions 0 and 1 inside its third poll, as kafka-python
    calls a rebalance's callbacks within a poll; records each poll's timeout."""

    def __init__(self, **config):
        self.timeouts_ms: list[int] = []
        self.paused: tuple[TopicPartition, ...] = ()

    def subscribe(self, topics, listener):
        self.listener = listener

    def pause(self, *partitions):
        self.paused = partitions

    def poll(self, timeout_ms):
        self.timeouts_ms.append(timeout_ms)
        if len(self.timeouts_ms) == 3:
            self.listener.on_partitions_assigned([TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 0)])
        return {}


def test_waiting_for_partitions_polls_in_short_slices_and_returns_at_the_poll_that_brought_them(monkeypatch):
    monkeypatch.setattr(group_member, "KafkaConsumer", Consumer)
    kafka = load({"KAFKA_URL": "kafka://127.0.0.1:1", "KAFKA_PREFIX": "t."}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    consumer = member._consumer

    assert member.wait_for_partitions() == (0, 1)
    assert len(consumer.timeouts_ms) == 3  # none after the poll that brought them
    # A poll waits out its timeout even once the partitions came within it:
    # a long one would hold the first query that long after the assignment.
    assert max(consumer.timeouts_ms) <= 50
    assert consumer.paused == (TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 0))  # Spark reads them, not the member
