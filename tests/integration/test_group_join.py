"""A copy's group member against a real broker: a join that finishes while
no poll waits for it gives its partitions at the next poll
(shared.worker.kafka_join), in the one rebalance it took."""

import threading

from devstack.local_stack import wait_until
from shared.config import load
from shared.worker.group_member import GroupMember


def test_a_join_that_finishes_between_two_polls_gives_its_partitions_at_the_next(stack, prefix):
    kafka = load({**stack.environment(prefix), "DYNO": "text_processor_worker.1"}).kafka
    member = GroupMember(kafka, "text-processor", "textlines", threading.Event())
    try:
        def polled() -> tuple[int, ...] | None:
            member.poll(0)  # waits for nothing: the join it sends can only finish between two polls
            return member.partitions
        wait_until(polled, 30, "the partitions")
        assert member.partitions == (0, 1)
        stabilized = [line for line in stack.broker.group_events(prefix) if "Stabilized group" in line]
        assert len(stabilized) == 1, stabilized
    finally:
        member.close()
