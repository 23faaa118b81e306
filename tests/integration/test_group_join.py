"""A copy's group member against a real broker: a join that finishes while
no poll waits for it gives its partitions at the next poll
(shared.worker.kafka_join), whether the member asked for it or new
metadata did; a first join waits for its topic's metadata; the offsets it
reads for a cold start's backlog; a commit refused because the member was
dropped from its group."""

import contextlib
import threading
import time
import uuid
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import MemberToRemove
from kafka.cluster import ClusterMetadata
from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from devstack.kafka_io import committed_offsets, produce
from devstack.local_stack import wait_until
from shared.config import load
from shared.offsets import EARLIEST, LATEST
from shared.worker import group_member
from shared.worker.group_member import GroupMember


def poll_at_once(member: GroupMember) -> tuple[int, ...] | None:
    member.poll(0)  # waits for nothing: a join it sends can only finish between two polls
    return member.partitions


def test_a_join_that_finishes_between_two_polls_gives_its_partitions_at_the_next(stack, prefix):
    kafka = load({**stack.environment(prefix), "DYNO": "text_processor_worker.1"}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    try:
        wait_until(lambda: poll_at_once(member), 30, "the partitions")
        assert member.partitions == (0, 1)
        stabilized = [line for line in stack.broker.group_events(prefix) if "Stabilized group" in line]
        assert len(stabilized) == 1, stabilized
    finally:
        member.close()


def test_a_static_members_first_join_waits_for_its_topics_metadata_and_is_assigned_every_partition(
        stack, prefix, monkeypatch):
    """The topic's metadata is answered a second late here, far later than
    a static member's join on a broker without the join hold (as a cold
    worker's often was, its request held by the client's retry backoff).
    Had the join not waited for it, its leader would assign no partition,
    and a second join would follow."""
    topic = prefix + "textlines"
    refresh = ClusterMetadata._do_refresh_metadata

    async def answered_late(cluster: ClusterMetadata, node_id: Any) -> None:
        if topic in cluster._topics:
            with contextlib.suppress(KafkaTimeoutError):  # a second on kafka-python's loop, not blocking it
                await cluster._manager.wait_for(Future(), 1_000)
        await refresh(cluster, node_id)
    monkeypatch.setattr(ClusterMetadata, "_do_refresh_metadata", answered_late)
    kafka = load({**stack.environment(prefix), "DYNO": "text_processor_worker.1"}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    try:
        assert member.wait_for_partitions() == (0, 1)
        stabilized = [line for line in stack.broker.group_events(prefix) if "Stabilized group" in line]
        assert len(stabilized) == 1, stabilized
    finally:
        member.close()


def test_a_first_join_waiting_for_its_topics_metadata_goes_when_the_update_times_out(stack, prefix, monkeypatch):
    """Every metadata request that names the topic times out here, as
    kafka-python fails one (the update's future with a KafkaTimeoutError)
    while the first join waits for that update: the join goes, as
    kafka-python's own would, and the group forms. Mistaken for the poll's
    own timeout, the failed update was waited on again at every poll."""
    topic = prefix + "textlines"
    refresh = ClusterMetadata._do_refresh_metadata
    failed = []

    async def timing_out(cluster: ClusterMetadata, node_id: Any) -> None:
        if topic in cluster._topics:
            failed.append(KafkaTimeoutError("Request timed out"))
            cluster.failed_update(failed[-1])
            raise failed[-1]
        await refresh(cluster, node_id)
    monkeypatch.setattr(ClusterMetadata, "_do_refresh_metadata", timing_out)
    kafka = load({**stack.environment(prefix), "DYNO": "text_processor_worker.1"}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())

    def group_formed() -> bool:
        member.poll(0.1)
        return any("Stabilized group" in line for line in stack.broker.group_events(prefix))
    try:
        wait_until(group_formed, 30, "the group formed")
        assert failed
    finally:
        member.close()


def test_a_rejoin_for_new_metadata_that_finishes_between_two_polls_gives_its_partitions(stack):
    prefix = f"t{uuid.uuid4().hex[:8]}."  # its topic is created below, after the first join
    member = GroupMember(load(stack.environment(prefix)).kafka, "text-processor", "textlines", threading.Event())

    def assignments() -> list[str]:
        return [line for line in stack.broker.group_events(prefix) if "Assignment received from leader" in line]
    try:
        # The first join knows no partition of the topic: its leader assigns none.
        wait_until(lambda: poll_at_once(member) == (), 30, "the first join's empty assignment")
        stack.broker.create_topics(prefix, partitions=2)
        # The metadata with the topic's partitions asks for a rejoin: the
        # poll that revokes the empty assignment sends its JoinGroup.
        wait_until(lambda: poll_at_once(member) is None, 30, "the rejoin")
        wait_until(lambda: len(assignments()) == 2, 30, "the rejoin done at the broker, no poll waiting for it")
        wait_until(lambda: poll_at_once(member), 10, "the partitions")
        assert member.partitions == (0, 1)
        assert len(assignments()) == 2  # taken, not joined again
    finally:
        member.close()


def test_the_offset_ranges_of_a_backlog_begin_at_a_stored_offset_the_earliest_or_the_latest(stack, prefix):
    topic = prefix + "textlines"
    produce(stack, topic, ["a line"] * 5, partition=0)
    produce(stack, topic, ["a line"] * 3, partition=1)
    member = GroupMember(load(stack.environment(prefix)).kafka, "text-processor", "textlines", threading.Event())
    try:
        assert member.offset_ranges({0: 2, 1: EARLIEST}) == {0: (2, 5), 1: (0, 3)}
        assert member.offset_ranges({0: LATEST, 1: 1}) == {0: (5, 5), 1: (1, 3)}
    finally:
        member.close()


def test_a_revoke_that_waits_longer_than_the_session_keeps_the_member_in_the_group(stack, prefix, monkeypatch):
    """Its heartbeats go on while its run stops: the revoke runs off kafka-python's loop."""
    monkeypatch.setattr(group_member, "SESSION_TIMEOUT_MS", 6_000)  # the broker's least
    kafka = load(stack.environment(prefix)).kafka
    batch_done, stop_polling = threading.Event(), threading.Event()
    first = GroupMember(kafka, "text-processor", "textlines", threading.Event(),
                        on_revoke=lambda: {} if batch_done.wait(15) else None)  # a batch longer than the session
    second = None

    def first_main_loop() -> None:  # the first copy's main thread: its poll runs the revoke
        while not stop_polling.is_set():
            first.poll(0.1)
    polling = threading.Thread(target=first_main_loop)
    try:
        assert first.wait_for_partitions() == (0, 1)
        assert first.begin_run("a run")
        second = GroupMember(kafka, "text-processor", "textlines", threading.Event())
        polling.start()
        wait_until(lambda: (second.poll(0.1), first.partitions)[1] is None, 30, "the rebalance's revoke")
        deadline = time.monotonic() + 8  # the revoke waits past the session timeout
        while time.monotonic() < deadline:
            second.poll(0.1)
        batch_done.set()
        wait_until(lambda: poll_at_once(second) and first.partitions, 30, "both members' partitions")
        assert sorted((*first.partitions, *second.partitions)) == [0, 1]
        expired = [line for line in stack.broker.group_events(prefix) if "has failed" in line or "expired" in line]
        assert expired == []
    finally:
        batch_done.set()
        stop_polling.set()
        if polling.is_alive():
            polling.join(10)
        first.close()
        if second:
            second.close()


def test_a_commit_refused_because_the_member_was_dropped_is_sent_when_its_partitions_come_back(stack, prefix):
    """As when a broker outage outlasts the session: the member's batch is
    stored, its commit is refused, it joins again, and its next run resumes
    where that batch ended."""
    topic = prefix + "textlines"
    kafka = load({**stack.environment(prefix), "DYNO": "text_processor_worker.1"}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    try:
        assert member.wait_for_partitions() == (0, 1)
        with KafkaAdminClient(bootstrap_servers=stack.broker.bootstrap) as admin:
            admin.remove_group_members(member.group_id, [MemberToRemove(group_instance_id=kafka.group_instance_id)])
        member.commit({0: 3, 1: 2})
        wait_until(lambda: poll_at_once(member) is None, 30, "the membership lost")
        assert member.wait_for_partitions() == (0, 1)
        assert member.committed() == {0: 3, 1: 2}
        member.poll(0)  # sends it
        wait_until(lambda: committed_offsets(stack, member.group_id, topic) == {0: 3, 1: 2}, 30, "the commit taken")
    finally:
        member.close()
