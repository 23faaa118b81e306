"""How a copy's group member waits for its partitions and commits
(shared.worker.group_member), with a stand-in for kafka-python's consumer:
the join itself, against a real broker, is tests/integration/test_group_join.py,
and a commit through a broker outage tests/e2e/test_text_processor_e2e.py."""

import threading

from kafka import TopicPartition
from kafka.errors import CommitFailedError, NodeNotReadyError

from shared.config import load
from shared.worker import group_member
from shared.worker.group_member import GroupMember

TOPIC = "t.textlines"


class Consumer:
    """Gives partitions 0 and 1 inside its third poll, as kafka-python
    calls a rebalance's callbacks within a poll; records each poll's timeout.
    Each commit_async records {partition: offset} and is answered inside the
    poll after the one that sent it (kafka-python answers within a poll), with
    the next of `answers` (None: taken); `group` holds the offsets taken."""

    def __init__(self, **config):
        self.timeouts_ms: list[int] = []
        self.paused: tuple[TopicPartition, ...] = ()
        self.commits: list[dict[int, int]] = []
        self.answers: list[Exception | None] = []
        self.group: dict[int, int] = {}
        self._sent: list = []
        self._in_flight: list = []

    def subscribe(self, topics, listener):
        self.listener = listener

    def pause(self, *partitions):
        self.paused = partitions

    def poll(self, timeout_ms):
        self.timeouts_ms.append(timeout_ms)
        if len(self.timeouts_ms) == 3:
            run_to_its_end(self.listener.on_partitions_assigned([TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 0)]))
        for callback, offsets in self._in_flight:
            answer = self.answers.pop(0) if self.answers else None
            if answer is None:
                self.group.update({tp.partition: meta.offset for tp, meta in offsets.items()})
            callback(offsets, answer)
        self._in_flight, self._sent = self._sent, []
        return {}

    def committed(self, tp):
        return self.group.get(tp.partition)

    def commit_async(self, offsets, callback):
        self.commits.append({tp.partition: meta.offset for tp, meta in offsets.items()})
        self._sent.append((callback, offsets))


def run_to_its_end(callback):
    """A rebalance callback run as kafka-python's loop runs it; the events it
    awaits (the loop's sleeps) are over at once."""
    try:
        while True:
            callback.send(None)
    except StopIteration:
        pass


def member_with_partitions(monkeypatch):
    monkeypatch.setattr(group_member, "KafkaConsumer", Consumer)
    kafka = load({"KAFKA_URL": "kafka://127.0.0.1:1", "KAFKA_PREFIX": "t."}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    member.wait_for_partitions()
    return member, member._consumer


def test_waiting_for_partitions_polls_in_short_slices_and_returns_at_the_poll_that_brought_them(monkeypatch):
    member, consumer = member_with_partitions(monkeypatch)

    assert member.partitions == (0, 1)
    assert len(consumer.timeouts_ms) == 3  # none after the poll that brought them
    # A poll waits out its timeout even once the partitions came within it:
    # a long one would hold the first query that long after the assignment.
    assert max(consumer.timeouts_ms) <= 50
    assert consumer.paused == (TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 0))  # Spark reads them, not the member


def test_a_commit_the_coordinator_could_not_take_is_sent_again_until_it_is_taken(monkeypatch):
    """The last batch before an idle spell: no later commit would cover it."""
    member, consumer = member_with_partitions(monkeypatch)
    consumer.answers = [NodeNotReadyError(), NodeNotReadyError()]
    member.commit({0: 10, 1: 7})
    for _ in range(8):
        member.poll(0.05)
    assert consumer.commits == [{0: 10, 1: 7}] * 3  # two refused, the third taken, then none


def test_a_failed_commit_is_not_sent_again_over_a_newer_one_nor_after_its_partition_left(monkeypatch):
    member, consumer = member_with_partitions(monkeypatch)
    member.commit({0: 10, 1: 7})
    member.poll(0.05)  # sends 10 and 7
    member.commit({0: 12})
    consumer.answers = [NodeNotReadyError()]
    member.poll(0.05)  # sends 12; 10 and 7 refused
    member.poll(0.05)  # 12 was sent after 10: only partition 1's again; 12 taken
    assert consumer.commits == [{0: 10, 1: 7}, {0: 12}, {1: 7}]

    run_to_its_end(member.on_partitions_revoked([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]))
    consumer.answers = [NodeNotReadyError()]
    member.poll(0.05)  # partition 1's refused after it left: the next owner repeats what it missed
    member.poll(0.05)
    assert len(consumer.commits) == 3


def test_a_commit_refused_for_good_is_not_sent_again(monkeypatch):
    member, consumer = member_with_partitions(monkeypatch)
    consumer.answers = [CommitFailedError()]
    member.commit({0: 10})
    for _ in range(3):
        member.poll(0.05)
    assert consumer.commits == [{0: 10}]


def test_a_commit_refused_for_good_goes_out_when_its_partition_comes_back_unless_the_group_is_past_it(monkeypatch):
    """The membership lost in an outage longer than the session: the words
    are stored, and a run that resumed from the group's older offset would
    write them twice."""
    member, consumer = member_with_partitions(monkeypatch)
    partitions = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
    consumer.answers = [CommitFailedError()]
    member.commit({0: 10, 1: 7})
    member.poll(0.05)
    member.poll(0.05)  # refused
    run_to_its_end(member.on_partitions_revoked(partitions))
    consumer.group = {1: 9}  # another copy held partition 1 meanwhile, and went further
    run_to_its_end(member.on_partitions_assigned(partitions))

    assert member.committed() == {0: 10, 1: 9}
    member.poll(0.05)
    member.poll(0.05)
    assert consumer.commits[1:] == [{0: 10}] and consumer.group == {0: 10, 1: 9}


def test_a_revoke_stops_the_run_off_kafka_pythons_loop_and_commits_where_it_ended(monkeypatch):
    stopped = threading.Event()
    monkeypatch.setattr(group_member, "KafkaConsumer", Consumer)
    kafka = load({"KAFKA_URL": "kafka://127.0.0.1:1", "KAFKA_PREFIX": "t."}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event(),
                         on_revoke=lambda: {0: 5} if stopped.wait(5) else None)
    member.wait_for_partitions()
    assert member.begin_run("run")
    revoking = member.on_partitions_revoked([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    # While the run's stop waits (for its batch), the callback yields to the loop, which heartbeats on.
    for _ in range(3):
        assert revoking.send(None) is not None
    stopped.set()
    run_to_its_end(revoking)
    member.poll(0.05)
    assert member.partitions is None and member._consumer.commits == [{0: 5}]
