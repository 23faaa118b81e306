"""Group joins as the Java consumer makes them: one that finishes between
two polls keeps its assignment, and a new one waits for its topic's metadata.

kafka-python 3.0.12 (pinned) runs a join (JoinGroup, then SyncGroup) as a
task on its IO thread, and `poll` waits for it at most its timeout. Two
flaws lose a join that finishes while no poll waits for it:

- the next poll sees the task done and sends a new JoinGroup instead of
  taking its result: the assignment is dropped, and a leader's new
  JoinGroup starts another rebalance;
- a poll joins only while `need_rejoin()`, and a rejoin that new metadata
  or a new subscription asked for stops being needed as soon as the
  running join has recorded them: the leader's first join often assigns
  nothing (its metadata comes after), and when the rejoin that follows
  finishes between polls, no poll takes it. The copy waits without
  partitions for good.

The Java consumer joins while a rejoin is needed *or a join is pending*,
and takes a finished join's result at its next poll
(AbstractCoordinator.rejoinNeededOrPending and joinGroupIfNeeded);
`install` makes kafka-python do both.

And a third: a new join does not wait for the subscribed topic's metadata.
A consumer's metadata request after `subscribe` waits out the retry
backoff (100 ms) since its bootstrap's; a static member's join (no
member-id round trip) on a broker that holds no first join is done
sooner, and its leader assigns no partition. Then a second join follows
the metadata: a rebalance, and on a cold start a worker waiting for it.
kafka-python waits for fresh metadata before a join only for a pattern
subscription (ConsumerCoordinator.poll); `install` makes it wait, within
the poll's timeout, whenever a subscribed topic has no metadata yet.

Remove this module once kafka-python does so itself:
tests/integration/test_group_join.py shows whether it does.
"""

from typing import Any

from kafka.coordinator.base import BaseCoordinator
from kafka.errors import KafkaError
from kafka.structs import MemberState
from kafka.util import Timer

_join_group_async = BaseCoordinator.join_group_async


def _rejoin_needed_or_pending(self: Any) -> bool:
    return bool(self.rejoin_needed or self._join_task is not None)


async def _join_group_taking_a_finished_join(self: Any, timeout_ms: int | None = None) -> bool:
    task = self._join_task
    if task is not None and task.succeeded():
        # What kafka-python does with a join it waited for (join_group_async).
        self._join_task = None
        with self._lock:
            self.rejoining = False
            self.rejoin_needed = False
            self.state = MemberState.STABLE
            self._enable_heartbeat()
        await self._on_join_complete_async(self._generation.generation_id, self._generation.member_id,
                                           self._generation.protocol, task.value)
        return True
    timer = Timer(timeout_ms)
    if task is None and not await _subscribed_topics_metadata(self, timer.timeout_ms):
        return False  # the next poll joins
    return await _join_group_async(self, timer.timeout_ms)  # a failed join is retried as before


async def _subscribed_topics_metadata(self: Any, timeout_ms: int | None) -> bool:
    """Whether a join may go: every subscribed topic has metadata, or a
    metadata update asked for since has come in (a topic it does not hold
    does not exist yet) or failed. Waits at most `timeout_ms` for that
    update, which a poll that times out leaves for the next."""
    cluster = self._cluster
    if all(cluster.partitions_for_topic(topic) is not None for topic in self._subscription.subscription):
        self._update_before_join = None
        return True
    update = self._update_before_join = getattr(self, "_update_before_join", None) or cluster.request_update()
    try:
        await self._manager.wait_for(update, timeout_ms)
    except KafkaError:
        # Only the poll's own timeout leaves the update running: the next
        # poll waits on. An update that failed (it timed out, or the topic
        # is not authorized) lets the join go, as kafka-python's own would.
        if not update.is_done:
            return False
    self._update_before_join = None
    return True


def install() -> None:
    # ConsumerCoordinator.need_rejoin asks this last, after its metadata and subscription checks.
    BaseCoordinator.need_rejoin = _rejoin_needed_or_pending
    BaseCoordinator.join_group_async = _join_group_taking_a_finished_join
