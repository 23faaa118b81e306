"""A group join that finishes between two polls keeps its assignment.

kafka-python 3.0.12 (pinned) runs a join (JoinGroup, then SyncGroup) as a
task on its IO thread, and `poll` waits for it at most its timeout. When the
task finishes while no poll waits for it, the next poll sees it done and
sends a new JoinGroup instead of taking its result: the assignment is
dropped. A leader's new JoinGroup starts another rebalance, which again may
finish between polls: a copy can go without partitions, rebalance after
rebalance, while the others work. The Java consumer takes a finished join's
result at its next poll (AbstractCoordinator.joinGroupIfNeeded); `install`
makes kafka-python do so.

Remove this module once kafka-python takes a finished join's result itself:
tests/integration/test_group_join.py shows whether it does.
"""

from typing import Any

from kafka.coordinator.base import BaseCoordinator
from kafka.structs import MemberState

_join_group_async = BaseCoordinator.join_group_async


async def _join_group_taking_a_finished_join(self: Any, timeout_ms: int | None = None) -> bool:
    task = self._join_task
    if task is not None and task.succeeded() and self.need_rejoin():
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
    BaseCoordinator.join_group_async = _join_group_taking_a_finished_join
