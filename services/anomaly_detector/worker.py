"""The anomaly detector: loglines -> alerts, one per threshold crossing.
Its Spark side is topology.py (parsing, counting); alerts.py decides and
publishes, channels.py delivers."""

from collections.abc import Iterable

from pyspark.sql import DataFrame, Row, SparkSession
from sqlalchemy import Connection

from services.anomaly_detector.alerts import ALERTS_TOPIC, AlertPublisher, Counts, record_failures
from services.anomaly_detector.channels import ChannelDelivery, configured_channels
from services.anomaly_detector.tables import MIGRATIONS
from services.anomaly_detector.topology import (
    MAX_COUNT_BYTES,
    Summary,
    counts_part,
    dead_letters,
    failed_logins,
    small_batch_counts,
    summary,
    summed_up,
)
from shared.config import Config
from shared.parts import collected_in_parts
from shared.retention import Retention
from shared.worker import BACK_TO_BACK, Context, DriverJvm, Jit, PostgresSink, Worker, kafka_records

# A batch's (user, window) counts reach Python this much at a time, as
# topology.summary estimates it (about 35,000 counts of 20-character user
# ids), so a batch of many distinct long user ids cannot fill the driver:
# 500,000 ids of 2,000 bytes are 1 GB. A part takes several times its
# estimate in Python while it is stored (rows, the SQL text, what Postgres
# returns).
PART_BYTES = 8 << 20

# What is past RETENTION_HOURS, a few thousand rows a statement
# (shared.retention): published alerts only, as delivery skips those older
# than the retention anyway.
RETENTION = {"alert_outbox": """
    DELETE FROM alert_outbox WHERE id IN (
        SELECT id FROM alert_outbox
        WHERE published_at IS NOT NULL AND window_start < now() - make_interval(hours => :hours)
        LIMIT :rows)"""}

# A batch's users' counts, cached in Spark to be read in parts (a large
# batch's) or in Python (a small one's); its summary.
Counted = tuple[DataFrame | Counts, Summary]


class FailedLogins(PostgresSink[Counted]):
    """Each batch's failed logins per user and window added to the counts,
    and an outbox row for each threshold a count crossed (alerts.py); one
    publisher, delivery thread and retention thread per process."""

    # Batches back to back (not STEADY_TRIGGER): an alert is due within a second.
    trigger = BACK_TO_BACK
    topics = (ALERTS_TOPIC,)  # the publisher's

    config: Config
    publisher: AlertPublisher

    def open(self, context: Context) -> None:
        engine, self.config = context.postgres.engine, context.config
        self.publisher = AlertPublisher(engine, context.kafka, context.stop_requested)
        self.publisher.start()
        ChannelDelivery(engine, configured_channels(self.config.channels), self.config.retention_hours,
                        context.stop_requested).start()
        Retention(engine, RETENTION, self.config.retention_hours, context.stop_requested).start()

    def summarize(self, batch: DataFrame, records: int) -> Counted:
        window_seconds = self.config.window_seconds
        if records * MAX_COUNT_BYTES <= PART_BYTES:
            # However many distinct users, the counts fit one part (a
            # steady stream's batches): collected by one job, nothing
            # cached, instead of a summary's job and a part's.
            return summed_up(small_batch_counts(batch, window_seconds).collect())
        counts = failed_logins(batch, window_seconds).persist()
        return counts, summary(counts)

    def dead_letters(self, batch: DataFrame, counted: Counted) -> DataFrame | None:
        result = counted[1]
        return dead_letters(batch) if result.no_user or result.bad_time else None

    def write(self, connection: Connection, counted: Counted) -> dict[str, int]:
        counts, result = counted
        if isinstance(counts, dict):
            parts: Iterable[Counts] = [counts]
        else:
            parts = collected_in_parts(result.user_bytes, PART_BYTES,
                                       lambda parts, part: as_counts(counts_part(counts, parts, part).collect()))
        alerts, pruned = record_failures(connection, parts, self.config)
        return {"rows_out": result.users, "failed_logins": result.failed_logins,
                "skipped_no_user": result.no_user, "skipped_bad_time": result.bad_time,
                "alerts": alerts, "windows_pruned": pruned}

    def after_commit(self) -> None:
        self.publisher.wake()  # the batch's alerts are in the outbox: publish them now


def as_counts(rows: Iterable[Row]) -> Counts:
    return {(row.user, row.window_start): row["count"] for row in rows}


def warm_up(spark: SparkSession, config: Config) -> None:
    lines = kafka_records(spark, ["user_id: alice | action: login failed", "bob | action: login"])
    small_batch_counts(lines, config.window_seconds).collect()
    counts = failed_logins(lines, config.window_seconds).persist()
    summary(counts)
    counts_part(counts, 1, 0).collect()
    counts.unpersist()


# C1 alone: its work per record and its plans are small, and without C2
# compiling beside them its cold first batches commit sooner; it drains and
# alerts as fast (docs/decisions/jit.md). The text processor and
# the aggregator need C2's code.
ANOMALY_DETECTOR = Worker(name="anomaly-detector", topic="loglines", sink=FailedLogins(), batch_records=500_000,
                          warm_up=warm_up, migrations=MIGRATIONS, jvm=DriverJvm(jit=Jit.C1_ONLY))
