"""The dead-letters topic kept in Postgres, and dead letters past RETENTION_HOURS deleted.

A worker whose sink is Kafka's writes its dead letters to the topic
`<prefix>dead-letters` (shared.dead_letters); this thread of the web
process reads every partition of it and stores what it read, with the
offsets it read to (`dead_letter_positions`), in one transaction. It joins
no consumer group: its progress is Postgres's, as a Postgres sink's is. A
letter written twice (a text processor's batch re-sent) or read twice (two
web dynos, a crash before the commit) has one name, and so one row.

Threads: the keeper's own (shared.background), which alone writes; it uses
an engine of its own, as the dashboard's sessions are read-only.
"""

import threading

from kafka import KafkaConsumer, TopicPartition
from sqlalchemy import Connection, Engine, text

from shared import background, dead_letters
from shared.config import KafkaConfig
from shared.dead_letters import DeadLetter
from shared.logs import log
from shared.outages import kafka_client
from shared.retention import Retention

EVERY_S = 2
POLL_MS = 1000
RECORDS_PER_POLL = 500  # up to 1 MB each: a transaction's worth
READ_POSITIONS = text("SELECT partition, next_offset FROM dead_letter_positions WHERE topic = :topic")
MOVE_POSITION = text("""
    INSERT INTO dead_letter_positions (topic, partition, next_offset) VALUES (:topic, :partition, :next_offset)
    ON CONFLICT (topic, partition) DO UPDATE
    SET next_offset = GREATEST(dead_letter_positions.next_offset, EXCLUDED.next_offset)""")
RETENTION = {"dead_letters": """
    DELETE FROM dead_letters WHERE (worker, topic, partition, "offset") IN (
        SELECT worker, topic, partition, "offset" FROM dead_letters
        WHERE skipped_at < now() - make_interval(hours => :hours) LIMIT :rows)"""}

MIGRATIONS = (
    ("dead_letter_positions", """
        CREATE TABLE dead_letter_positions (
            topic       text   NOT NULL,
            partition   int    NOT NULL,
            next_offset bigint NOT NULL,
            PRIMARY KEY (topic, partition))"""),
)


class DeadLetterKeeper:
    def __init__(self, engine: Engine, kafka: KafkaConfig, retention_hours: int,
                 stop_requested: threading.Event) -> None:
        self.engine, self.kafka, self.stop_requested = engine, kafka, stop_requested
        self.topic = kafka.topic(dead_letters.TOPIC)
        self.retention = Retention(engine, RETENTION, retention_hours, stop_requested)
        self._consumer: KafkaConsumer | None = None

    def start(self) -> None:
        # A failed pass (the broker or Postgres away) is logged, and the next
        # begins afresh from the stored positions.
        background.every(EVERY_S, self.keep, name="dead_letter_keeper", failure_event="dead_letter_keeper_failed",
                         stop_requested=self.stop_requested)
        self.retention.start()

    def keep(self) -> int:
        """Store what the topic holds past the stored positions, a poll's
        records a transaction, until a poll finds nothing; how many were new."""
        try:
            consumer = self._assigned()
            kept = 0
            while not self.stop_requested.is_set():
                polled = consumer.poll(timeout_ms=POLL_MS, max_records=RECORDS_PER_POLL)
                if not polled:
                    return kept
                with self.engine.begin() as connection:
                    kept += self._store(connection, polled)
            return kept
        except BaseException:
            self.close()  # the next pass seeks to what Postgres has
            raise

    def _assigned(self) -> KafkaConsumer:
        if self._consumer is None:
            consumer = kafka_client(KafkaConsumer, **self.kafka.kafka_python_kwargs(), enable_auto_commit=False)
            numbers = sorted(consumer.partitions_for_topic(self.topic) or ())
            partitions = [TopicPartition(self.topic, partition) for partition in numbers]
            if not partitions:  # not made yet (the setup makes it): the next pass looks again
                consumer.close()
                raise LookupError(f"no topic {self.topic}")
            consumer.assign(partitions)
            with self.engine.connect() as connection:
                stored = {row.partition: row.next_offset
                          for row in connection.execute(READ_POSITIONS, {"topic": self.topic})}
            for tp in partitions:
                if tp.partition in stored:
                    consumer.seek(tp, stored[tp.partition])
                else:
                    consumer.seek_to_beginning(tp)
            self._consumer = consumer
        return self._consumer

    def _store(self, connection: Connection, polled: dict) -> int:
        letters = []
        for records in polled.values():
            for record in records:
                try:
                    letters.append(DeadLetter.of_kafka(record))
                except (KeyError, TypeError, ValueError):  # not a worker's letter: one record never stalls the rest
                    log("dead_letter_unreadable", partition=record.partition, offset=record.offset)
        kept = dead_letters.store(connection, letters)
        connection.execute(MOVE_POSITION, [{"topic": self.topic, "partition": tp.partition,
                                            "next_offset": records[-1].offset + 1} for tp, records in polled.items()])
        return kept

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
