"""Each worker's health, as its consumer group shows it in Kafka.

Every worker commits the offsets each micro-batch reached to its group
(shared/worker/group_member.py), with the commit's time and the batch's
duration as the offsets' metadata (shared/commit_note.py). So Kafka alone
tells, per worker: its lag per partition (the topic's end offset minus the
committed one), how many copies are in the group, how long ago a batch was
last committed and how long it took.
"""

import threading
import time
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from services.workers import WORKERS
from shared import commit_note
from shared.config import KafkaConfig
from shared.outages import kafka_client

WORKER_INPUTS = {worker.name: worker.topic for worker in WORKERS.values()}
FRESH_FOR_S = 2.0  # one reading serves every page and API call for this long
REQUEST_TIMEOUT_MS = 5_000


class KafkaUnavailable(Exception):
    """The broker could not be asked; the message names the error's type only."""


class WorkerHealth:
    def __init__(self, kafka: KafkaConfig):
        self.kafka = kafka
        self._lock = threading.Lock()  # kafka-python's clients are not thread-safe
        self._admin: KafkaAdminClient | None = None
        self._reading: tuple[float, list[dict]] | None = None

    def read(self) -> list[dict]:
        """One dict per worker; raises KafkaUnavailable."""
        with self._lock:
            if self._reading and time.monotonic() - self._reading[0] < FRESH_FOR_S:
                return self._reading[1]
            try:
                workers = self._read()
            except KafkaError as error:
                self._close_admin()  # new connections on the next try
                raise KafkaUnavailable(type(error).__name__) from None
            self._reading = (time.monotonic(), workers)
            return workers

    def close(self) -> None:
        with self._lock:
            self._close_admin()

    def _read(self) -> list[dict]:
        if self._admin is None:
            # Bounded: by default a broker that is away holds the constructor
            # for 30 s, and every page's health call waits behind the lock.
            self._admin = kafka_client(KafkaAdminClient, **self.kafka.kafka_python_kwargs(),
                                       request_timeout_ms=REQUEST_TIMEOUT_MS, bootstrap_timeout_ms=REQUEST_TIMEOUT_MS,
                                       reconnect_backoff_max_ms=1_000)
        inputs = {app: self.kafka.topic(topic) for app, topic in WORKER_INPUTS.items()}
        groups = {app: self.kafka.group_id(app) for app in WORKER_INPUTS}
        partitions = {topic["name"]: sorted(TopicPartition(topic["name"], p["partition_index"])
                                            for p in topic["partitions"])
                      for topic in self._admin.describe_topics(list(inputs.values()))}
        present = {app: topic for app, topic in inputs.items() if partitions[topic]}  # a topic not created: none
        ends = self._admin.list_partition_offsets(
            {tp: OffsetSpec.LATEST for tps in partitions.values() for tp in tps}) if present else {}
        committed = self._admin.list_group_offsets(
            {groups[app]: partitions[topic] for app, topic in present.items()}) if present else {}
        described = self._admin.describe_groups(list(groups.values()))
        return [_worker(app, groups[app], topic, partitions[topic], ends, committed.get(groups[app], {}),
                        copies=len(described[groups[app]]["members"]))
                for app, topic in inputs.items()]

    def _close_admin(self) -> None:
        admin, self._admin, self._reading = self._admin, None, None
        if admin is not None:
            try:
                admin.close()
            except KafkaError:
                pass  # the connection is gone already


def _worker(app: str, group: str, topic: str, partitions: list[TopicPartition], ends: dict[TopicPartition, Any],
            committed: dict[TopicPartition, Any], copies: int) -> dict[str, Any]:
    """One worker's health from its group's committed offsets and the end offsets."""
    rows, commits = [], []
    for tp in partitions:
        end, mark = ends[tp].offset, committed.get(tp)
        offset = mark.offset if mark is not None and mark.offset >= 0 else None
        rows.append({"partition": tp.partition, "committed": offset, "end": end, "lag": end - (offset or 0)})
        if mark is not None and (note := commit_note.read(mark.metadata))[0] is not None:
            commits.append(note)
    last_at, last_batch_ms = max(commits, key=lambda note: note[0] or 0) if commits else (None, None)
    return {"worker": app, "group": group, "topic": topic,
            "copies": copies, "lag": sum(row["lag"] for row in rows), "partitions": rows,
            "last_commit_at": last_at, "last_batch_ms": last_batch_ms,
            "last_commit_age_s": None if last_at is None else round(time.time() - last_at, 1)}
