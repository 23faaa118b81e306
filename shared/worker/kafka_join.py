"""A group join that finishes between two polls keeps its assignment.

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

Remove this module once kafka-python does so itself:
tests/integration/test_group_join.py shows whether it does.
"""

from typing import Any

from kafka.coordinator.base import BaseCoordinator
from kafka.structs import MemberState

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
    return await _join_group_async(self, timeout_ms)  # a failed join is retried as before


def install() -> None:
    # ConsumerCoordinator.need_rejoin asks this last, after its metadata and subscription checks.
    BaseCoordinator.need_rejoin = _rejoin_needed_or_pending
    BaseCoordinator.join_group_async = _join_group_taking_a_finished_join
