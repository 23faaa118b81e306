"""A worker's place in its consumer group `<prefix><app>-app`.

Kafka's group protocol divides the input topic's partitions among the copies
of a worker, so `heroku ps:scale text_processor_worker=3` splits the work
instead of repeating it. The member never fetches records itself (its
partitions stay paused; Spark reads them through the `assign` option). It
polls to keep its place and commits the offsets each micro-batch reached, so
Kafka's own tools show every copy and its lag.

Threads: the main thread owns the member and its consumer (kafka-python's
consumer is not thread-safe): every method runs there, except `report`
and `report_unread`, which Spark's listener thread calls and which only
hand their argument over under the lock, for the next `poll` to act on.
kafka-python runs the consumer's network, heartbeats included, on an event
loop of its own, and awaits the rebalance callbacks there while the main
thread waits inside `poll`. They are coroutines that never block the loop:
a revoke, which waits for the running batch, stops the run on a thread of
its own (`revoke`) and yields to the loop until that is done, so the
heartbeats go on meanwhile.

In a rebalance Kafka takes every partition back before handing any out:
`on_partitions_revoked` (inside `poll`) calls `on_revoke`, which stops the
running query once its batch is done and returns where it ended; that is
committed before the group moves on, so the next owner begins exactly there.
A run whose query was still starting when the revoke came is refused by
`begin_run` instead: it must not go on reading partitions now another's.

On a dyno the member is static (KIP-345, `group.instance.id` from the prefix
and DYNO): a copy restarted after a crash under the same name is given its
partitions back at once, where a dynamic member would wait out the dead
one's session (30 s). A static member's consumer does not leave the group
when it closes, so `close` removes it (the admin API's LeaveGroup by member
id): a copy stopped for good hands its partitions over at once. A copy that
a newer one of the same name replaced (a deploy's overlap) is fenced: its
commits and its removal are refused, and what it still stores is stored
behind a fence too (Postgres's offsets, or the aggregator's places).
"""

import threading
import time
from collections.abc import Callable

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import MemberToRemove
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError, NoError
from kafka.net.selector import KernelEvent
from kafka.structs import OffsetAndMetadata

from shared import background, commit_note
from shared.config import KafkaConfig
from shared.logs import log
from shared.offsets import EARLIEST, LATEST, Offsets, Ranges
from shared.outages import kafka_client, kafka_outage
from shared.worker import kafka_join
from shared.worker.stop_budget import budget_of

kafka_join.install()  # before any consumer joins a group

# Above the longest graceful stop of a query (shared.worker.query_run):
# handing partitions over waits for the running batch, and the member must
# stay in the group meanwhile.
SESSION_TIMEOUT_MS = 30_000
# A poll waits out its whole timeout while no record can come (the
# partitions stay paused), however soon the group answers within it: polls
# that wait for partitions are this short, so a first query starts within
# one of the assignment.
WAITING_POLL_S = 0.05
# The data-loss lookup and the offset ranges, each bounded: a copy must be
# gone 30 s after SIGTERM, and a stop waits for them. The consumer's first
# connection too: kafka-python tries for 30 s before it gives up on brokers
# that are away. The last commit and the leave draw on the stop's budget
# (shared.worker.stop_budget).
STOP_STEP_TIMEOUT_MS = 4_000
# How often a revoke looks whether the run it stops has stopped.
REVOKE_CHECK_S = 0.05


class GroupMember(AsyncConsumerRebalanceListener):
    def __init__(self, kafka: KafkaConfig, app: str, topic: str, stop_requested: threading.Event,
                 on_revoke: Callable[[], Offsets | None] = lambda: None) -> None:
        self.kafka = kafka
        self.stop_requested = stop_requested
        self.topic = kafka.topic(topic)
        self.group_id = kafka.group_id(app)
        self.partitions: tuple[int, ...] | None = None  # assigned to this copy; None while the group rebalances
        self._on_revoke = on_revoke
        self._stop_requested = stop_requested
        self._lock = threading.Lock()
        # Under the lock: writing the partitions, how many times a rebalance took
        # them, the run whose batch reports may still be committed, what to
        # commit next, and ranges to look up for lost records.
        self._revocations = 0
        self._held = 0  # _revocations when wait_for_partitions last returned partitions
        self._accepting: str | None = None
        self._pending: Offsets = {}
        self._batch_ms: int | None = None  # how long the batch whose offsets are pending took
        self._unread: list[Ranges] = []
        # {partition: (offset, _revocations)} of the last commit sent: a failed
        # commit is sent again only if nothing newer was, from the same holding.
        self._sent: dict[int, tuple[int, int]] = {}
        # {partition: next offset} this copy stored whose commit failed and is
        # not sent again (its membership lost, as when an outage outlasts the
        # session): committed after the partition's next assignment to this
        # copy, if the group's offset is still behind it.
        self._refused: Offsets = {}
        self._commits_failing = False  # one line for a run of failed commits, not one per batch
        self._outage = kafka_outage(stop_requested)
        self._kafka = kafka
        self._consumer = self._outage.retry(lambda: kafka_client(
            KafkaConsumer, group_id=self.group_id, group_instance_id=kafka.group_instance_id,
            enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=3_000,
            bootstrap_timeout_ms=STOP_STEP_TIMEOUT_MS, **kafka.kafka_python_kwargs()))
        self._consumer.subscribe([self.topic], listener=self)

    # The main thread's loop.

    def wait_for_partitions(self) -> tuple[int, ...] | None:
        """This copy's partitions, polled for (WAITING_POLL_S at a time)
        until the group gives it some; None on stop. Partitions it holds
        already (the join, a run before) are returned at once."""
        idle_logged = False
        while not self._stop_requested.is_set():
            with self._lock:
                partitions, self._held = self.partitions, self._revocations
            if partitions:
                return partitions
            if partitions == () and not idle_logged:
                log("idle", group=self.group_id, reason="every partition has another owner")
                idle_logged = True
            self.poll(WAITING_POLL_S)
        return None

    def poll(self, seconds: float = 0.5) -> None:
        """Keep the membership, commit what is pending and look up lost
        records; a rebalance runs its callbacks from here. While the broker
        cannot be reached, waits with backoff instead."""
        self._flush()
        with self._lock:
            unread, self._unread = self._unread, []
        for ranges in unread:
            self._report_data_lost(ranges)
        self._outage.attempt(lambda: self._consumer.poll(timeout_ms=int(seconds * 1000)))

    def wait(self, seconds: float) -> None:
        """Poll for `seconds`, or until a stop is asked for."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stop_requested.is_set():
            self.poll()

    # Commits. A query run's batches are committed as Spark's listener
    # reports them, while the run is the one accepted.

    def begin_run(self, run_id: str) -> bool:
        """Accept run `run_id`'s reports: True, unless a rebalance took the
        partitions that wait_for_partitions last returned while the run was
        starting on them (they may have another owner now: the run must
        end, unread)."""
        with self._lock:
            if self._revocations != self._held:
                return False
            self._accepting = run_id
            return True

    def end_run(self, run_id: str, offsets: Offsets | None) -> None:
        """The run is over; `offsets`, where its last stored batch ended, are
        committed, unless a rebalance took its partitions (and committed) already.
        A report of it still on its way (Spark's listener runs behind the
        query) must not commit over what follows."""
        with self._lock:
            if self._accepting == run_id:
                self._pending.update(offsets or {})
                self._accepting = None

    def commit(self, offsets: Offsets) -> None:
        """Commit {partition: next offset} with the next poll."""
        with self._lock:
            self._pending.update(offsets)

    def commit_now(self, run_id: str, offsets: Offsets) -> None:
        """Commit where run `run_id` stored so far at once, not with the
        next poll, unless a rebalance took its partitions."""
        with self._lock:
            if self._accepting != run_id:
                return
            self._pending.update(offsets)
        self._flush()

    def committed(self) -> Offsets:
        """{partition: next offset} as committed by the group, for the
        assigned partitions, or further where this copy stored further and
        the group refused its commit (which goes out again with the next
        poll). What is pending is sent first: the broker answers one
        connection's requests in order."""
        self._flush()
        offsets = self._outage.retry(lambda: {
            p: self._consumer.committed(TopicPartition(self.topic, p)) for p in self.partitions or ()})
        committed = {partition: offset for partition, offset in offsets.items() if offset is not None}
        with self._lock:
            # The words up to a refused offset are stored, whoever held the
            # partition meanwhile; only an offset the group has not reached moves it.
            ahead = {partition: offset for partition, offset in self._refused.items()
                     if partition in offsets and offset > committed.get(partition, -1)}
            self._pending.update(ahead)
        return committed | ahead

    def _commit_last(self) -> None:
        """Commit what is pending and wait for the answer, as long as the
        stop's budget allows (the next owner repeats what a failed commit
        missed, as after a crash)."""
        with self._lock:
            pending, self._pending, batch_ms, self._batch_ms = self._pending, {}, self._batch_ms, None
        if pending:
            try:
                self._consumer.commit(self._offsets(pending, batch_ms),
                                      timeout_ms=budget_of(self._stop_requested).allow_ms("commit"))
            except KafkaError as error:
                self._commit_done({}, error)

    def offset_range(self, partition: int, starting: int) -> tuple[int, int]:
        """(first, end): the offsets of `partition` from `starting` (an
        offset, or EARLIEST or LATEST) to its end."""
        return self.offset_ranges({partition: starting})[partition]

    def offset_ranges(self, starting: Offsets) -> dict[int, tuple[int, int]]:
        """offset_range of each partition of `starting`, asked of the brokers at once."""
        tps = {partition: TopicPartition(self.topic, partition) for partition in starting}

        def read() -> dict[int, tuple[int, int]]:
            # kafka-python would wait 30 s for a broker that is away; the
            # outage's retry checks for a stop between tries.
            ends = self._consumer.end_offsets(list(tps.values()), timeout_ms=STOP_STEP_TIMEOUT_MS)
            earliest = [tps[partition] for partition, offset in starting.items() if offset == EARLIEST]
            beginnings = self._consumer.beginning_offsets(earliest, timeout_ms=STOP_STEP_TIMEOUT_MS) if earliest else {}
            ranges = {}
            for partition, tp in tps.items():
                offset = starting[partition]
                first = ends[tp] if offset == LATEST else beginnings[tp] if offset == EARLIEST else offset
                ranges[partition] = (first, ends[tp])
            return ranges
        return self._outage.retry(read)

    def close(self) -> None:
        """Commit what is pending (a stopped run's last batch, a skip), then leave the group."""
        self._commit_last()
        membership = self._consumer.group_metadata()
        try:
            self._consumer.close(autocommit=False, timeout_ms=budget_of(self._stop_requested).allow_ms("leave"))
            if membership.group_instance_id and membership.member_id:
                self._remove(MemberToRemove(membership.member_id, membership.group_instance_id))
        except KafkaError as error:  # the group drops this member after its session timeout
            log("leave_failed", group=self.group_id, error=type(error).__name__)

    def _remove(self, member: MemberToRemove) -> None:
        """Take a static member out of the group, unless a newer copy of the
        same name replaced it (the broker fences a stale member id)."""
        allowed = budget_of(self._stop_requested).allow_ms("leave")
        bounded = {"bootstrap_timeout_ms": allowed, "request_timeout_ms": allowed}
        admin = kafka_client(KafkaAdminClient, **self._kafka.kafka_python_kwargs(), **bounded)
        try:
            result = admin.remove_group_members(self.group_id, [member])
        finally:
            admin.close()
        for error in result.values():
            if error is not NoError:
                log("leave_failed", group=self.group_id, error=error.__name__)

    # Called on Spark's listener thread: they only hand over, never block.

    def report(self, run_id: str, offsets: Offsets, batch_ms: int) -> None:
        """A batch of run `run_id` stored, ending at `offsets`, in `batch_ms`."""
        with self._lock:
            if self._accepting == run_id:
                self._pending.update(offsets)
                self._batch_ms = batch_ms

    def report_unread(self, ranges: Ranges) -> None:
        """A batch covered `ranges` but read fewer records: which of them
        retention removed is looked up by the next poll."""
        with self._lock:
            self._unread.append(ranges)

    # kafka-python's rebalance callbacks, awaited on its event loop while the main thread waits in poll().

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        with self._lock:
            self.partitions = None
            self._revocations += 1
            accepting, self._accepting = self._accepting, None
        if accepting is not None:
            stopping = background.call(self._on_revoke, name="revoke")  # up to the graceful stop's budget
            while not stopping.done():
                await KernelEvent("_sleep", REVOKE_CHECK_S)  # the loop's own sleep: heartbeats go on
            log("partitions_revoked", group=self.group_id)
            self.commit(stopping.result() or {})
        self._flush()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._consumer.pause(*assigned)
        partitions = tuple(sorted(tp.partition for tp in assigned if tp.topic == self.topic))
        with self._lock:
            self.partitions = partitions
        log("partitions_assigned", group=self.group_id, topic=self.topic,
            partitions=",".join(map(str, partitions)) or "none")

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending, batch_ms, self._batch_ms = self._pending, {}, self._batch_ms, None
            self._sent.update({partition: (offset, self._revocations) for partition, offset in pending.items()})
        if pending:
            self._consumer.commit_async(self._offsets(pending, batch_ms), callback=self._commit_done)

    def _report_data_lost(self, ranges: Ranges) -> None:
        """Log `event=data_lost` for the records of `ranges` ({partition:
        (first, next offset)}) that retention removed before they were read."""
        partitions = [TopicPartition(self.topic, p) for p in ranges]
        try:
            earliest = self._consumer.beginning_offsets(partitions, timeout_ms=STOP_STEP_TIMEOUT_MS)
        except KafkaError as error:  # the broker went away meanwhile: say so, once
            log("data_lost_unknown", topic=self.topic, error=type(error).__name__)
            return
        for tp, offset in sorted(earliest.items()):
            first, end = ranges[tp.partition]
            if offset > first:
                log("data_lost", topic=self.topic, partition=tp.partition, records=min(offset, end) - first)

    def _commit_done(self, offsets: dict[TopicPartition, OffsetAndMetadata], result: object) -> None:
        """kafka-python's answer to a commit_async, given within a later
        poll or commit. A commit that failed for a passing reason (the coordinator
        away or still loading after an outage) is sent again with the next
        poll, unless a newer one was sent or the partition changed hands
        since: the last batch before an idle spell has no later batch to
        cover it, and the text processor resumes from these offsets. Any
        other failed commit waits for the partition's next assignment
        (`committed`). Logs the first of a run of failed commits, not one
        per try."""
        failed = isinstance(result, Exception)
        if failed and not self._commits_failing:
            log("commit_failed", error=type(result).__name__)
        self._commits_failing = failed
        retriable = isinstance(result, KafkaError) and result.retriable
        with self._lock:
            for tp, sent in offsets.items():
                held = tp.partition in (self.partitions or ())
                if not failed:
                    if self._refused.get(tp.partition, -1) <= sent.offset:
                        self._refused.pop(tp.partition, None)
                elif retriable and held and self._sent.get(tp.partition) == (sent.offset, self._revocations):
                    self._pending.setdefault(tp.partition, sent.offset)
                else:
                    self._refused[tp.partition] = max(self._refused.get(tp.partition, -1), sent.offset)

    def _offsets(self, offsets: Offsets, batch_ms: int | None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Kafka's form of {partition: next offset}, with the commit's time
        and the batch's duration as metadata (shared.commit_note)."""
        note = commit_note.write(int(time.time() * 1000), batch_ms)
        return {TopicPartition(self.topic, partition): OffsetAndMetadata(offset, note, -1)
                for partition, offset in offsets.items()}
