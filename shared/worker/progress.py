"""Where a worker's progress lives: the offsets its next query run resumes
from, outside the dyno (whose disk starts empty).

Two stores, one protocol:
- GroupProgress: the consumer group's committed offsets (the text processor).
- PostgresProgress: a table beside the results, written in each batch's
  transaction behind a fence (the aggregator and the anomaly detector: see
  shared.worker.exactly_once).
Either way each batch's offsets are also committed to the group, so Kafka's
own tools (and the dashboard) show every worker's lag.
"""

import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from sqlalchemy import Connection, Engine, create_engine, text

from shared import dead_letters
from shared.dead_letters import DeadLetter
from shared.logs import log
from shared.offsets import EARLIEST, LATEST, Offsets, Ranges
from shared.outages import postgres_outage
from shared.worker.group_member import GroupMember

T = TypeVar("T")


class ProgressStore(Protocol):
    def stored(self) -> Offsets:
        """{partition: next offset} where this worker's runs resume."""

    def skip(self, partition: int, offset: int, letter: DeadLetter | None) -> None:
        """Store the offset past one record, unread, and its dead letter."""


def starting_offsets(partitions: tuple[int, ...], store: ProgressStore, start_from: str = "earliest") -> Offsets:
    """Where a run on `partitions` begins. Spark wants every partition named:
    stored ones resume, new ones begin at the earliest or latest offset."""
    stored = store.stored()
    default = LATEST if start_from == "latest" else EARLIEST
    return {partition: stored.get(partition, default) for partition in partitions}


class GroupProgress:
    def __init__(self, member: GroupMember) -> None:
        self.member = member

    def stored(self) -> Offsets:
        return self.member.committed()

    def skip(self, partition: int, offset: int, letter: DeadLetter | None) -> None:
        if letter is not None:  # before the commit: sent twice after a crash, it is still kept once
            dead_letters.send(self.member.kafka, [letter], self.member.stop_requested)
        self.member.commit({partition: offset + 1})


STORED_FOR_UPDATE = text("""
    SELECT next_offset FROM kafka_offsets
    WHERE consumer = :consumer AND topic = :topic AND partition = :partition FOR UPDATE""")
ADVANCE = text("""
    INSERT INTO kafka_offsets (consumer, topic, partition, next_offset)
    VALUES (:consumer, :topic, :partition, :next_offset)
    ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset""")


class StaleBatchError(Exception):
    """The batch overlaps offsets already stored: it was written before."""


def engine_for(database_url: str) -> Engine:
    return create_engine(database_url, pool_pre_ping=True, pool_size=2, max_overflow=2)


class PostgresProgress:
    """Offsets in `kafka_offsets`, which only move forward from where a batch
    began: the stored next offset of each partition must be at or before the
    batch's first offset there, or the batch was written before (by this
    process before a restart, or by another copy) and StaleBatchError rolls
    its transaction back whole."""

    def __init__(self, engine: Engine, consumer: str, topic: str, stop_requested: threading.Event) -> None:
        self.engine = engine
        self.consumer = consumer
        self.topic = topic
        self.stop_requested = stop_requested

    def stored(self) -> Offsets:
        return self.read(lambda connection: {partition: offset for partition, offset in connection.execute(text(
            "SELECT partition, next_offset FROM kafka_offsets WHERE consumer = :consumer AND topic = :topic"),
            {"consumer": self.consumer, "topic": self.topic}).all()})

    def skip(self, partition: int, offset: int, letter: DeadLetter | None) -> None:
        self.commit({partition: (offset, offset + 1)},
                    lambda connection: dead_letters.store(connection, [letter] if letter else []))

    def read(self, query: Callable[[Connection], T]) -> T:
        """query(connection), retried while Postgres cannot be reached."""
        def run() -> T:
            with self.engine.connect() as connection:
                return query(connection)
        return self.retrying(run)

    def commit(self, ranges: Ranges, write: Callable[[Connection], T]) -> T:
        """In one transaction: advance the offsets past `ranges`, then
        `write(connection)`. Retried while Postgres cannot be reached."""
        def run() -> T:
            with self.engine.begin() as connection:
                self._advance(connection, ranges)
                return write(connection)
        return self.retrying(run)

    def retrying(self, action: Callable[[], T]) -> T:
        """action(), again with backoff while Postgres cannot be reached (one
        log line per try); any other error is raised, StopRequested on a stop."""
        return postgres_outage(self.stop_requested).retry(action)

    def _advance(self, connection: Connection, ranges: Ranges) -> None:
        for partition, (first, next_offset) in sorted(ranges.items()):
            stored = connection.execute(STORED_FOR_UPDATE, {
                "consumer": self.consumer, "topic": self.topic, "partition": partition}).scalar()
            if stored is not None and stored > first:
                raise StaleBatchError(f"{self.topic} partition {partition} is stored past offset {first}")
            if stored is not None and first > stored:  # retention removed what lay between
                log("data_lost", topic=self.topic, partition=partition, records=first - stored)
            connection.execute(ADVANCE, {"consumer": self.consumer, "topic": self.topic,
                                         "partition": partition, "next_offset": next_offset})
