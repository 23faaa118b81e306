"""A worker's place in its consumer group `<prefix><app>-app`.

Kafka's group protocol divides the input topic's partitions among the copies
of a worker, so `heroku ps:scale text_processor_worker=3` splits the work
instead of repeating it. The member never fetches records itself (its
partitions stay paused; Spark reads them through the `assign` option). It
polls to keep its place and commits the offsets each micro-batch reached, so
Kafka's own tools show every copy and its lag.

In a rebalance Kafka takes every partition back before handing any out: the
member then stops its query once the running batch is done, and commits where
it ended, so the next owner begins exactly there.
"""

import threading
import time

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from shared.logs import log
from shared.offsets import end_offsets
from shared.outages import kafka_outage

GRACEFUL_STOP_SECONDS = 20  # Heroku sends SIGKILL 30 s after SIGTERM
# Above GRACEFUL_STOP_SECONDS: handing partitions over waits for the running
# batch, and the member must stay in the group meanwhile.
SESSION_TIMEOUT_MS = 30_000
# The last commit and leaving the group, each bounded: a copy must be gone 30 s
# after SIGTERM, and up to 20 s of those may go to the running batch.
STOP_STEP_TIMEOUT_MS = 4_000
# Spark keeps timestamps as microseconds in a long: a Kafka timestamp past
# this many milliseconds overflows, and fails Spark's Kafka source itself.
SPARK_MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
# Looking for such a record reads at most a batch per partition (2,000,000
# records: about 20 s in kafka-python); past this the broker is taken as away.
SCAN_TIMEOUT_S = 120


class GroupMember(ConsumerRebalanceListener):
    def __init__(self, kafka, app, topic, stop_requested):
        self.kafka = kafka
        self.topic = kafka.topic(topic)
        self.group_id = kafka.group_id(app)
        self.partitions = None  # assigned to this copy; None while the group rebalances
        self._query = None
        self._lock = threading.Lock()
        # The progress of the last micro-batch, handed over by Spark's listener
        # thread; the consumer is used by the polling thread alone (kafka-python's
        # consumer is not thread-safe).
        self._to_commit = None
        self._stop_requested = stop_requested
        self._commits_failing = False  # one line for a run of failed commits, not one per batch
        self._outage = kafka_outage(stop_requested)
        self._consumer = self._outage.retry(lambda: KafkaConsumer(
            group_id=self.group_id, enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=3_000,
            **kafka.kafka_python_kwargs()))
        self._consumer.subscribe([self.topic], listener=self)

    def wait_for_partitions(self, stop_requested):
        """Poll until the group gives this copy some partitions; None on stop."""
        idle_logged = False
        while not stop_requested.is_set():
            self.poll()
            if self.partitions:
                return self.partitions
            if self.partitions == () and not idle_logged:
                log("idle", group=self.group_id, reason="every partition has another owner")
                idle_logged = True
        return None

    def poll(self, seconds=0.5):
        """Keep the membership and commit the last micro-batch's offsets; a
        rebalance runs its callbacks from here. While the broker cannot be
        reached, waits with backoff instead. Main thread only: the consumer
        is used from this thread alone."""
        with self._lock:
            progress, self._to_commit = self._to_commit, None
        if progress is not None and self._owns(progress):
            self._commit_in_background(progress)
        self._outage.attempt(lambda: self._consumer.poll(timeout_ms=int(seconds * 1000)))

    def wait(self, seconds, stop_requested):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not stop_requested.is_set():
            self.poll()

    def start(self, start_query):
        """Start a query on the assigned partitions; a rebalance stops it."""
        with self._lock:
            self._query = start_query()
            return self._query

    def forget(self, query):
        """The query is over: a report of it still on its way (Spark's
        listener runs behind the query) must not commit over what follows."""
        with self._lock:
            if self._query is query:
                self._query, self._to_commit = None, None

    def committed(self):
        """{partition: next offset} as committed by the group, for the assigned partitions."""
        offsets = self._outage.retry(lambda: {
            p: self._consumer.committed(TopicPartition(self.topic, p)) for p in self.partitions or ()})
        return {partition: offset for partition, offset in offsets.items() if offset is not None}

    def offset_range(self, partition, starting):
        """(first, end): the offsets of `partition` from `starting` (an
        offset, or -2 for the earliest, -1 for the latest) to its end."""
        tp = TopicPartition(self.topic, partition)

        def read():
            end = self._consumer.end_offsets([tp])[tp]
            if starting >= 0:
                return starting, end
            return (end if starting == -1 else self._consumer.beginning_offsets([tp])[tp]), end
        return self._outage.retry(read)

    def report_data_lost(self, ranges):
        """Log `event=data_lost` for the records of `ranges` ({partition:
        (first, next offset)} a batch covered but did not read all of) that
        retention removed before they were read."""
        try:
            consumer = KafkaConsumer(**self.kafka.kafka_python_kwargs())
            try:
                earliest = consumer.beginning_offsets([TopicPartition(self.topic, p) for p in ranges])
            finally:
                consumer.close()
        except KafkaError as error:  # the broker went away meanwhile: say so, once
            log("data_lost_unknown", topic=self.topic, error=type(error).__name__)
            return
        for tp, offset in sorted(earliest.items()):
            first, end = ranges[tp.partition]
            if offset > first:
                log("data_lost", topic=self.topic, partition=tp.partition, records=min(offset, end) - first)

    def first_unreadable(self, starting, limit):
        """{partition: (first offset, offset of its first record whose
        timestamp Spark cannot convert)} among the next `limit` records of
        each partition from `starting` ({partition: offset, or -2/-1}); what
        was found so far once a stop is asked for."""
        consumer = KafkaConsumer(**self.kafka.kafka_python_kwargs(), enable_auto_commit=False,
                                 max_poll_records=5000)
        try:
            partitions = [TopicPartition(self.topic, p) for p in starting]
            consumer.assign(partitions)
            for tp in partitions:
                if starting[tp.partition] >= 0:
                    consumer.seek(tp, starting[tp.partition])
                elif starting[tp.partition] == -1:
                    consumer.seek_to_end(tp)
                else:
                    consumer.seek_to_beginning(tp)
            first = {tp.partition: consumer.position(tp) for tp in partitions}
            ends = {tp.partition: min(end, first[tp.partition] + limit)
                    for tp, end in consumer.end_offsets(partitions).items()}
            found: dict[int, tuple[int, int]] = {}
            reading = {tp for tp in partitions if first[tp.partition] < ends[tp.partition]}
            deadline = time.monotonic() + SCAN_TIMEOUT_S
            while reading and not self._stop_requested.is_set():
                if time.monotonic() > deadline:  # the broker is away: the caller retries with backoff
                    raise KafkaTimeoutError(f"scanning {self.topic} took over {SCAN_TIMEOUT_S} s")
                for tp, records in consumer.poll(timeout_ms=1000).items():
                    bad = next((r.offset for r in records if not 0 <= r.timestamp <= SPARK_MAX_TIMESTAMP_MS
                                and r.offset < ends[tp.partition]), None)
                    if bad is not None:
                        found.setdefault(tp.partition, (first[tp.partition], bad))
                # By position, not by the last record's offset: transaction
                # markers take offsets that no record shows.
                for tp in [tp for tp in reading
                           if tp.partition in found or consumer.position(tp) >= ends[tp.partition]]:
                    reading.discard(tp)
                    consumer.pause(tp)
            return found
        finally:
            consumer.close()

    def commit_now(self, offsets):
        """Commit {partition: next offset} and wait for the broker's answer."""
        self._outage.retry(lambda: self._consumer.commit(self._offsets(offsets)))

    def commit(self, progress):
        """Where a micro-batch ended, committed by the next poll(). Called on
        Spark's listener thread; never blocks."""
        with self._lock:
            self._to_commit = progress

    def commit_last(self, query, abandoned=frozenset()):
        """At a stop: commit where the query's last micro-batch ended, unless a
        rebalance took its partitions (and committed) already. A batch in
        `abandoned` stored nothing: then the last one handed over and not yet
        committed is, if any."""
        with self._lock:
            pending, self._to_commit = self._to_commit, None  # the last progress is committed here
        last = query.lastProgress
        if last is not None and last.batchId in abandoned:
            last = pending
        if last and self._owns(last):
            try:
                self._consumer.commit(self._offsets(end_offsets(last)), timeout_ms=STOP_STEP_TIMEOUT_MS)
            except KafkaError as error:  # the next owner repeats that batch, as after a crash
                self._commit_done(None, error)

    def _owns(self, progress):
        """A report of another query run is ignored: its partitions may have
        moved to another copy since."""
        with self._lock:
            return self._query is not None and str(self._query.runId) == str(progress.runId)

    def close(self):
        try:
            self._consumer.close(autocommit=False, timeout_ms=STOP_STEP_TIMEOUT_MS)
        except KafkaError as error:  # the group drops this member after its session timeout
            log("leave_failed", group=self.group_id, error=type(error).__name__)

    def on_partitions_revoked(self, revoked):
        """Called by kafka-python inside poll(), on the main thread: stops the
        query after its running batch (blocking up to GRACEFUL_STOP_SECONDS,
        within the session timeout) and commits where it ended."""
        with self._lock:
            query, self._query = self._query, None
            self.partitions, self._to_commit = None, None
        if query is not None and query.isActive:
            stop_gracefully(query)
            log("partitions_revoked", group=self.group_id)
            if query.lastProgress:
                self._commit_in_background(query.lastProgress)

    def on_partitions_assigned(self, assigned):
        """Called by kafka-python inside poll(), on the main thread."""
        self._consumer.pause(*assigned)
        self.partitions = tuple(sorted(tp.partition for tp in assigned if tp.topic == self.topic))
        log("partitions_assigned", group=self.group_id, topic=self.topic,
            partitions=",".join(map(str, self.partitions)) or "none")

    def _commit_in_background(self, progress):
        self._consumer.commit_async(self._offsets(end_offsets(progress)), callback=self._commit_done)

    def _commit_done(self, offsets, result):
        """Logs the first of a run of failed commits (a broker outage fails
        one per batch); a later batch's commit covers the offsets they missed."""
        failed = isinstance(result, Exception)
        if failed and not self._commits_failing:
            log("commit_failed", error=type(result).__name__)
        self._commits_failing = failed

    def _offsets(self, offsets):
        """Kafka's form of {partition: next offset}; each commit's metadata
        is its time in epoch milliseconds (the dashboard shows its age)."""
        committed_at = str(int(time.time() * 1000))
        return {TopicPartition(self.topic, partition): OffsetAndMetadata(offset, committed_at, -1)
                for partition, offset in offsets.items()}


def stop_gracefully(query):
    """Let the running micro-batch finish, then stop before the next begins."""
    deadline = time.monotonic() + GRACEFUL_STOP_SECONDS
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
