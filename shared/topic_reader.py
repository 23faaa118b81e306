"""Reading a topic's records or offsets directly, apart from Spark and from
the group: the one place a worker opens a consumer of its own.

Used for the scan for records Spark cannot read (shared.worker.search), the
lookup of records retention removed (shared.worker.group_member), and the
alert publisher's look for alerts already on the topic
(services.anomaly_detector.alerts). Each opens a reader, uses it, closes it.
"""

import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError

from shared.config import KafkaConfig
from shared.offsets import EARLIEST, LATEST, Offsets
from shared.outages import kafka_client


class TopicReader:
    def __init__(self, kafka: KafkaConfig, topic: str, partitions: list[int] | None = None) -> None:
        """A consumer of `topic` (prefixed already) on `partitions` (all of them if None)."""
        self.topic = topic
        self._consumer = kafka_client(KafkaConsumer, **kafka.kafka_python_kwargs(), enable_auto_commit=False,
                                      max_poll_records=5000)
        if partitions is None:
            partitions = sorted(self._consumer.partitions_for_topic(topic) or ())
        self._partitions = [TopicPartition(topic, p) for p in partitions]
        self._consumer.assign(self._partitions)
        self._reading: set[TopicPartition] = set()

    def __enter__(self) -> "TopicReader":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._consumer.close()

    def earliest(self) -> Offsets:
        return {tp.partition: offset for tp, offset in self._consumer.beginning_offsets(self._partitions).items()}

    def latest(self) -> Offsets:
        return {tp.partition: offset for tp, offset in self._consumer.end_offsets(self._partitions).items()}

    def at_time(self, millis: int) -> Offsets:
        """The first offset of each partition stamped at or after `millis` (its end if none is)."""
        found = self._consumer.offsets_for_times({tp: millis for tp in self._partitions})
        ends = self.latest()
        return {tp.partition: found[tp].offset if found[tp] else ends[tp.partition] for tp in self._partitions}

    def seek(self, starting: Offsets) -> Offsets:
        """Read each partition from `starting` (an offset, or EARLIEST /
        LATEST) on; the offsets that reading begins at."""
        for tp in self._partitions:
            offset = starting[tp.partition]
            if offset == LATEST:
                self._consumer.seek_to_end(tp)
            elif offset == EARLIEST:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)
        return {tp.partition: self._consumer.position(tp) for tp in self._partitions}

    def records(self, ends: Offsets, timeout_s: float,
                stop_requested: threading.Event | None = None) -> Iterator[Any]:
        """The records of each partition from where `seek` put it up to
        `ends` (exclusive), partitions interleaved; until a stop is asked
        for, or `stop_reading` was called for every partition. Raises
        KafkaTimeoutError past `timeout_s` (the broker is away)."""
        self._reading = {tp for tp in self._partitions if self._consumer.position(tp) < ends[tp.partition]}
        deadline = time.monotonic() + timeout_s
        while self._reading and not (stop_requested and stop_requested.is_set()):
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"reading {self.topic} took over {timeout_s} s")
            for tp, batch in self._consumer.poll(timeout_ms=1000).items():
                yield from (record for record in batch if record.offset < ends[tp.partition])
            # By position, not by the last record's offset: transaction
            # markers take offsets that no record shows.
            for tp in [tp for tp in self._reading if self._consumer.position(tp) >= ends[tp.partition]]:
                self.stop_reading(tp.partition)

    def stop_reading(self, partition: int) -> None:
        """No more records of `partition` (read to its end, or the caller found what it looked for)."""
        tp = TopicPartition(self.topic, partition)
        self._reading.discard(tp)
        self._consumer.pause(tp)
