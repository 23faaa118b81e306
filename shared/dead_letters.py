"""Dead letters: every input record a worker skips, kept once.

A dead letter is one record of a worker's input topic that the worker left
out, named by where it came from: (worker, topic, partition, offset). That
name is its primary key in the table `dead_letters`, so storing one twice
stores it once, whoever stores it and however often a batch is re-sent.

Where each worker's go (docs/decisions/dead-letters.md):
- a worker whose progress is Postgres's stores them in its batch's own
  transaction (shared.worker.exactly_once), from its sink's `dead_letters`;
- a worker whose sink is Kafka's (the text processor, which needs no
  Postgres) writes them with its batch's records to the topic `dead-letters`
  (TOPIC), each keyed by its name, and the web process keeps that topic's
  records in the table (services/web/dead_letter_keeper.py);
- a record skipped by the search for one that fails its batch (or Spark
  cannot read) is stored as its offset is (shared.worker.runner.Supervisor.skip).

Kept of a record: its key and value, together at most KEPT_BYTES (the value
first, then the key in what is left: a dead letter must itself fit Kafka's
default 1 MB record), with their lengths as they were.
"""

from __future__ import annotations

import datetime
import glob
import json
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from shared.config import KafkaConfig

# The closed set of reasons, each as docs/operations.md says what to do about it.
REASONS = {
    "bad_time": "its Kafka timestamp is no plausible event time (before 1970, or over an hour past today)",
    "too_long": "a text line holding a word longer than a key may be (2,000 bytes): the line, once",
    "bad_key": "a record on words whose word Postgres cannot keep as a key (not UTF-8, a NUL, too long)",
    "no_user": "a failed login with no user id, or one Postgres cannot keep as a key",
    "unreadable": "its Kafka timestamp is beyond what Spark can read (past the year 294,247)",
    "failing": "it failed every micro-batch it was in, for a reason no worker knows",
}
TOPIC = "dead-letters"  # without the prefix
KEPT_BYTES = 1_000_000
# A dead letter on the topic: its name as key, the record's value as value,
# these headers: the rest of it as JSON, and the record's key (unless null).
FIELDS_HEADER, KEY_HEADER = "dead_letter", "key"
# A replayed record's header: the name of the dead letter it was.
REPLAY_HEADER = "dead_letter_replay"
READ_TIMEOUT_S = 30  # a record the search skipped, read or sent by itself

TABLE = ("dead_letters", """
    CREATE TABLE dead_letters (
        worker         text        NOT NULL,
        topic          text        NOT NULL,
        partition      int         NOT NULL,
        "offset"       bigint      NOT NULL,
        timestamp_ms   bigint,     -- the record's Kafka timestamp, as it was (it may be no date)
        reason         text        NOT NULL,
        skipped_at     timestamptz NOT NULL,
        key            bytea,
        value          bytea,
        key_bytes      int,        -- the lengths as they were; null for a null key or value
        value_bytes    int,
        replay_sent_from bigint,   -- a replay's: its partition's end offset before it sent it
        replayed_at    timestamptz,
        PRIMARY KEY (worker, topic, partition, "offset"));
    CREATE INDEX dead_letters_by_skipped_at ON dead_letters (skipped_at)""")
# A batch's letters are copied straight in (store_frame): skipped when their
# transaction began, and under a key whose first columns tell letters
# apart, so that adding one to its index compares numbers, seldom text.
COPIED_IN = ("dead_letters_copied_in", """
    ALTER TABLE dead_letters ALTER COLUMN skipped_at SET DEFAULT now(),
        DROP CONSTRAINT dead_letters_pkey, ADD PRIMARY KEY ("offset", partition, topic, worker)""")

INSERT = text("""
    INSERT INTO dead_letters (worker, topic, partition, "offset", timestamp_ms, reason, skipped_at,
                              key, value, key_bytes, value_bytes)
    VALUES (:worker, :topic, :partition, :offset, :timestamp_ms, :reason, :skipped_at,
            :key, :value, :key_bytes, :value_bytes)
    ON CONFLICT DO NOTHING""")


@dataclass(frozen=True)
class DeadLetter:
    worker: str
    topic: str  # as the worker reads it: prefixed
    partition: int
    offset: int
    timestamp_ms: int | None
    reason: str
    skipped_at: datetime.datetime
    key: bytes | None
    value: bytes | None
    key_bytes: int | None
    value_bytes: int | None

    @property
    def name(self) -> str:
        return name(self.worker, self.topic, self.partition, self.offset)

    @staticmethod
    def of_record(worker: str, record: Any, reason: str) -> DeadLetter:
        """The dead letter of a kafka-python ConsumerRecord, skipped now."""
        value = None if record.value is None else record.value[:KEPT_BYTES]
        key = None if record.key is None else record.key[:KEPT_BYTES - len(value or b"")]
        return DeadLetter(worker, record.topic, record.partition, record.offset, record.timestamp, reason,
                          datetime.datetime.now(datetime.timezone.utc), key, value,
                          _length(record.key), _length(record.value))

    def as_kafka(self) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
        """(key, value, headers) of its record on the dead-letters topic,
        which is to be stamped when it was skipped (the producer's now)."""
        fields = {"worker": self.worker, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                  "timestamp": self.timestamp_ms, "reason": self.reason,
                  "key_bytes": self.key_bytes, "value_bytes": self.value_bytes}
        headers = [(FIELDS_HEADER, json.dumps(fields).encode())]
        return self.name.encode(), self.value, headers + ([(KEY_HEADER, self.key)] if self.key is not None else [])

    @staticmethod
    def of_kafka(record: Any) -> DeadLetter:
        """A record of the dead-letters topic (kafka-python's), as written
        by `as_kafka` or by the Kafka sink (`kafka_columns`)."""
        headers = dict(record.headers or [])
        fields = json.loads(headers[FIELDS_HEADER])
        skipped_at = datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.timezone.utc)
        return DeadLetter(fields["worker"], fields["topic"], fields["partition"], fields["offset"],
                          fields.get("timestamp"), fields["reason"], skipped_at, headers.get(KEY_HEADER),
                          record.value, fields.get("key_bytes"), fields.get("value_bytes"))

    def row(self) -> dict[str, Any]:
        return {field: getattr(self, field) for field in self.__dataclass_fields__}


def name(worker: str, topic: str, partition: int, offset: int) -> str:
    """A dead letter's name: its key on the topic, and what a replayed record's header says."""
    return f"{worker}/{topic}/{partition}/{offset}"


def _length(data: bytes | None) -> int | None:
    return None if data is None else len(data)


def store(connection: Connection, letters: list[DeadLetter]) -> int:
    """Store each letter not stored yet; how many were new."""
    if not letters:
        return 0
    return connection.execute(INSERT, [letter.row() for letter in letters]).rowcount


# Spark's side: a worker's dead letters as a column, for its topology or its sink.

def dead_letter(reason: Column, record: Column | None = None) -> Column:
    """The dead letter of the Kafka record in scope (the source's columns
    key, value, topic, partition, offset, timestamp, or those fields of the
    struct `record`), null where `reason` (one of REASONS) is null: a struct
    a worker's topology or sink hands the framework, which stores it
    (`kafka_columns`, `store_frame`). When it was skipped is not in it: a
    streaming query writes the batch's time into the code it generates, and
    would compile new code for every batch (shared.events): it is the
    letter's record's timestamp on the topic, or its transaction's time."""
    from pyspark.sql import functions as F

    def field(name: str) -> Column:
        return F.col(name) if record is None else record[name]

    value = F.substring(field("value"), F.lit(1), F.lit(KEPT_BYTES))
    room = F.greatest(F.lit(0), F.lit(KEPT_BYTES) - F.coalesce(F.octet_length(value), F.lit(0)))
    return F.when(reason.isNotNull(), F.struct(
        reason.alias("reason"), field("topic").alias("topic"), field("partition").alias("partition"),
        field("offset").alias("offset"), F.unix_millis(field("timestamp")).alias("timestamp"),
        F.substring(field("key"), F.lit(1), room).alias("key"), value.alias("value"),
        F.octet_length(field("key")).alias("key_bytes"), F.octet_length(field("value")).alias("value_bytes")))


def kafka_columns(worker: str, letter: Column) -> tuple[Column, Column, Column]:
    """(key, value, headers) of a dead letter's record on the topic, as `as_kafka` makes them."""
    from pyspark.sql import functions as F

    fields = F.to_json(F.struct(F.lit(worker).alias("worker"), *[letter[field].alias(field) for field in (
        "topic", "partition", "offset", "timestamp", "reason", "key_bytes", "value_bytes")]))
    key = F.concat_ws("/", F.lit(worker), letter["topic"], letter["partition"], letter["offset"]).cast("binary")
    headers = F.array(F.struct(F.lit(FIELDS_HEADER).alias("key"), fields.cast("binary").alias("value")),
                      F.struct(F.lit(KEY_HEADER).alias("key"), letter["key"].alias("value")))
    return key, letter["value"], headers


# In Postgres from Spark: a batch's dead letters as COPY text, a part at a
# time (shared.parts), key and value as bytea's hex so nothing needs escaping.
# Straight into the table: before a batch no letter of its offsets is
# stored, unless its offsets were reset. Then the COPY meets one and fails,
# and the letters go through a table of their own, each added unless stored.
COPY_COLUMNS = 'worker, topic, partition, "offset", timestamp_ms, reason, key, value, key_bytes, value_bytes'
COPY_FIELDS = ("topic", "partition", "offset", "timestamp", "reason", "key", "value", "key_bytes", "value_bytes")
COPY_SOME_STORED = """
    CREATE TEMPORARY TABLE batch_dead_letters (LIKE dead_letters INCLUDING DEFAULTS) ON COMMIT DROP"""
FROM_COPY = f"""
    INSERT INTO dead_letters ({COPY_COLUMNS}) SELECT {COPY_COLUMNS} FROM batch_dead_letters
    ON CONFLICT DO NOTHING"""


def copy_line(worker: str) -> Column:
    """A dead letter of `worker`, its fields as columns, as one line of COPY
    text (null fields as \\N; the name escaped as COPY reads it, the rest
    needs no escaping: hex, numbers, a topic's and a reason's characters)."""
    from pyspark.sql import functions as F

    def field(name: str) -> Column:
        value = F.concat(F.lit("\\\\x"), F.hex(name)) if name in ("key", "value") else F.col(name).cast("string")
        return F.coalesce(value, F.lit("\\N"))
    as_text = worker.translate({ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})
    return F.concat_ws("\t", F.lit(as_text), *[field(name) for name in COPY_FIELDS])


# On a cluster, a batch's dead letters reach Python this much COPY text at
# a time: a flood of 1 MB values is never all in the driver at once.
PART_BYTES = 16 << 20
LINE_OVERHEAD_BYTES = 200  # a line's fields besides its key's and value's hex


class Readable(Protocol):
    """COPY text as psycopg2's copy_expert reads it."""

    def read(self, size: int) -> bytes: ...


def store_frame(connection: Connection, worker: str, letters: DataFrame) -> int:
    """Store the letters of the `dead_letter` column of `letters` (null: no
    letter); how many were new. Called inside a micro-batch.

    With Spark in the driver's process (SPARK_MASTER local), Spark writes
    their COPY text into files, which are copied into Postgres: one job,
    nothing cached, no letter through Python as a row, which costs more
    than the job (docs/decisions/dead-letters.md). On a cluster the files
    would be on the executors' disks: the letters are cached, and their
    text collected a part (PART_BYTES) at a time, so a flood of large
    values never fills the driver."""
    from pyspark.sql import functions as F

    # Made nondeterministic (it holds the task's partition id, always 0 or
    # more), the letter keeps the filter above the letters' projections:
    # Spark pushes a filter only through deterministic ones, and pushed
    # down, the filter would evaluate each reason once more.
    letter = F.when(F.spark_partition_id() >= 0, F.col("dead_letter"))
    chosen = letters.select(letter.alias("letter")).where(F.col("letter").isNotNull()).select("letter.*")
    if (letters.sparkSession.sparkContext.master or "").startswith("local"):
        with tempfile.TemporaryDirectory(prefix="dead-letters-") as folder:
            chosen.select(copy_line(worker)).write.text(f"{folder}/text")
            return _copy(connection, lambda: _files(sorted(glob.glob(f"{folder}/text/part-*"))))
    cached = chosen.persist()
    return _copy(connection, lambda: _collected(worker, cached))


def _copy(connection: Connection, texts: Callable[[], Iterable[Readable]]) -> int:
    """COPY each of `texts()` into the table, in one savepoint; how many
    letters were new."""
    from psycopg2.errors import UniqueViolation

    def copy(cursor: Any, table: str) -> int:
        copied = 0
        for each in texts():
            cursor.copy_expert(f"COPY {table} ({COPY_COLUMNS}) FROM STDIN", each, size=1 << 20)
            copied += cursor.rowcount
        return copied

    raw: Any = connection.connection  # psycopg2's, whose cursor is a context manager
    with raw.cursor() as cursor:
        cursor.execute("SAVEPOINT dead_letters")
        try:
            return copy(cursor, "dead_letters")
        except UniqueViolation:
            cursor.execute("ROLLBACK TO SAVEPOINT dead_letters")
        cursor.execute(COPY_SOME_STORED)
        copy(cursor, "batch_dead_letters")
        cursor.execute(FROM_COPY)
        return int(cursor.rowcount)


def _files(paths: list[str]) -> Iterator[Readable]:
    for path in paths:
        with open(path, "rb") as file:
            yield file


def _collected(worker: str, letters: DataFrame) -> Iterator[Readable]:
    """The COPY text of `letters` (cached), collected in parts."""
    from pyspark.sql import functions as F

    from shared.parts import CopySource, collected_in_parts, in_part, one_ahead

    hex_bytes = 2 * (F.coalesce(F.octet_length("key"), F.lit(0)) + F.coalesce(F.octet_length("value"), F.lit(0)))
    total = letters.agg(F.sum(hex_bytes + LINE_OVERHEAD_BYTES)).first()
    assert total is not None  # an aggregate: one row

    def part_text(parts: int, part: int) -> str:
        rows = letters.where(in_part(parts, part, "partition", "offset")).select(copy_line(worker).alias("line"))
        return "\n".join(row.line for row in rows.collect())
    if total[0]:
        yield CopySource(one_ahead(collected_in_parts(total[0], PART_BYTES, part_text)))


# The driver's side: a record the search skipped, read and kept by itself.

def read(kafka: KafkaConfig, worker: str, topic: str, partition: int, offset: int, reason: str,
         stop_requested: threading.Event) -> DeadLetter | None:
    """The dead letter of one record of `topic` (prefixed), read now; None
    if it is gone (retention removed it). Waits out a broker's outage
    (StopRequested on a stop meanwhile)."""
    from shared.outages import kafka_outage
    from shared.topic_reader import TopicReader

    def read_it() -> DeadLetter | None:
        with TopicReader(kafka, topic, [partition]) as reader:
            reader.seek({partition: offset})
            for record in reader.records({partition: offset + 1}, READ_TIMEOUT_S):
                return DeadLetter.of_record(worker, record, reason)
        return None
    return kafka_outage(stop_requested).retry(read_it)


def send(kafka: KafkaConfig, letters: list[DeadLetter], stop_requested: threading.Event) -> None:
    """Write letters to the dead-letters topic, and wait until the brokers
    have them all; through a broker's outage (StopRequested on a stop)."""
    from kafka import KafkaProducer

    from shared.outages import kafka_client, kafka_outage

    def send_them() -> None:
        producer = kafka_client(KafkaProducer, **kafka.kafka_python_kwargs(), acks="all",
                                max_request_size=KEPT_BYTES + (48 << 10))
        try:
            sent = [producer.send(kafka.topic(TOPIC), key=key, value=value, headers=headers)
                    for key, value, headers in (letter.as_kafka() for letter in letters)]
            producer.flush(timeout=READ_TIMEOUT_S)
            for each in sent:
                each.get(timeout=READ_TIMEOUT_S)  # raises what the brokers answered, if not taken
        finally:
            producer.close(timeout=5)
    kafka_outage(stop_requested).retry(send_them)
