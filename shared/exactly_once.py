"""Exactly-once micro-batches into Postgres.

A micro-batch's results and the offsets it reached go into Postgres in one
transaction, and a starting worker resumes from those offsets, so a dyno
restarted on an empty disk neither loses nor repeats a batch.

The offsets only move forward from where a batch began: for each partition,
the stored next offset must be at or before the batch's first offset there.
A batch that overlaps what is stored was already written (by this process
before a restart, or by another copy of the worker); its transaction is
rolled back whole and the query restarts from the stored offsets. So two
copies on the same partitions still count every record once.
"""

import time

from py4j.protocol import Py4JJavaError
from sqlalchemy import create_engine, text

from shared.batch_size import measurement, observed
from shared.logs import log
from shared.offsets import batch_ranges
from shared.outages import StopRequested, postgres_outage

STORED_FOR_UPDATE = text("""
    SELECT next_offset FROM kafka_offsets
    WHERE consumer = :consumer AND topic = :topic AND partition = :partition FOR UPDATE""")
ADVANCE = text("""
    INSERT INTO kafka_offsets (consumer, topic, partition, next_offset)
    VALUES (:consumer, :topic, :partition, :next_offset)
    ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset""")


class StaleBatchError(Exception):
    """The batch overlaps offsets already stored: it was written before."""


def engine_for(database_url):
    return create_engine(database_url, pool_pre_ping=True, pool_size=2, max_overflow=2)


class PostgresProgress:
    def __init__(self, engine, consumer, topic, stop_requested):
        self.engine = engine
        self.consumer = consumer
        self.topic = topic
        self.stop_requested = stop_requested

    def stored(self):
        """{partition: next offset} where this consumer's batches resume."""
        return self.read(lambda connection: dict(connection.execute(text(
            "SELECT partition, next_offset FROM kafka_offsets"
            " WHERE consumer = :consumer AND topic = :topic"),
            {"consumer": self.consumer, "topic": self.topic}).all()))

    def read(self, query):
        """query(connection), retried while Postgres cannot be reached."""
        def run():
            with self.engine.connect() as connection:
                return query(connection)
        return self.retrying(run)

    def commit(self, ranges, write):
        """In one transaction: advance the offsets past `ranges`, then
        `write(connection)`. Retried while Postgres cannot be reached."""
        def run():
            with self.engine.begin() as connection:
                self._advance(connection, ranges)
                return write(connection)
        return self.retrying(run)

    def retrying(self, action):
        """action(), again with backoff while Postgres cannot be reached (one
        log line per try); any other error is raised."""
        return postgres_outage(self.stop_requested).retry(action)

    def _advance(self, connection, ranges):
        for partition, (first, next_offset) in sorted(ranges.items()):
            stored = connection.execute(STORED_FOR_UPDATE, {
                "consumer": self.consumer, "topic": self.topic, "partition": partition}).scalar()
            if stored is not None and stored > first:
                raise StaleBatchError(f"{self.topic} partition {partition} is stored past offset {first}")
            if stored is not None and first > stored:  # retention removed what lay between
                log("data_lost", topic=self.topic, partition=partition, records=first - stored)
            connection.execute(ADVANCE, {"consumer": self.consumer, "topic": self.topic,
                                         "partition": partition, "next_offset": next_offset})


def foreach_batch(context, checkpoint, aggregate, write, after_commit=None):
    """A foreachBatch function for a query checkpointed in `checkpoint`:
    `aggregate(batch)` in Spark, then `write(connection, aggregated)` in the
    transaction that stores the offsets. `write` returns fields for the
    batch's log line (rows_out among them); `after_commit()` runs once that
    transaction is committed. What `aggregate` caches (persist) lives until
    then, or until the next batch begins if this one failed: nothing else of
    the process is cached. All three run on the thread Spark calls the
    foreachBatch function on, while the micro-batch is running; they may
    block (a Postgres outage waits here), and the query waits with them.

    A batch that cannot finish for an expected reason is abandoned: nothing
    of it is stored, and the query begins it again from Postgres's offsets.
    That is a stop asked for while Postgres is away, Spark failing to read
    the batch (a broker outage, a record it cannot convert), or a batch that
    another copy stored first. The function then returns instead of raising
    (Spark would print the Python traceback of a failed foreachBatch), and
    `context.run_error` tells the main loop to end this query run. Every
    later batch of the run is abandoned too: stored, it would leave the
    abandoned one's records as a gap."""
    abandoned_from = None  # the first batch of this query run that was abandoned

    def abandon(batch_id):
        nonlocal abandoned_from
        abandoned_from = batch_id
        context.batch_log.abandon(batch_id)

    def write_batch(batch, batch_id):
        if abandoned_from is not None or context.batch_size.changed:  # the run is ending
            context.batch_log.abandon(batch_id)
            return
        ranges = batch_ranges(checkpoint, batch_id, context.starting_offsets)
        if not ranges:
            return
        try:
            batch.sparkSession.catalog.clearCache()
            batch, observation = observed(batch)
            rows = aggregate(batch)
            began = time.monotonic()
            fields = context.progress.commit(ranges, lambda connection: write(connection, rows))
        except StopRequested:
            abandon(batch_id)
            log("batch_abandoned", batch=batch_id, reason="stop requested while Postgres was unreachable")
            return
        except (Py4JJavaError, StaleBatchError) as error:
            abandon(batch_id)
            context.run_error = error  # the main loop ends the run and logs it as query_failed
            return
        batch.sparkSession.catalog.clearCache()
        if after_commit:
            after_commit()
        if size := measurement(observation):
            context.batch_size.measured(*size)
            fields["bytes_in"] = size[1]
        context.batch_log.report(batch_id, postgres_ms=int((time.monotonic() - began) * 1000), **fields)

    return write_batch
