"""The anomaly detector: loglines -> alerts, one per threshold crossing.
Its Spark side is topology.py (parsing, counting); alerts.py decides and
publishes, channels.py delivers."""

from collections.abc import Iterable

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery
from sqlalchemy import Connection

from services.anomaly_detector.alerts import AlertPublisher, Counts, record_failures
from services.anomaly_detector.channels import ChannelDelivery, configured_channels
from services.anomaly_detector.topology import (
    MAX_COUNT_BYTES,
    Summary,
    counts_part,
    failed_logins,
    small_batch_counts,
    summary,
    summed_up,
)
from shared.config import Config
from shared.exactly_once import foreach_batch
from shared.parts import collected_in_parts
from shared.retention import ALERT_OUTBOX, Retention
from shared.spark import BACK_TO_BACK
from shared.warm_up import kafka_records
from shared.worker import Context, Worker
from shared.worker.query_run import QueryRun

# A batch's (user, window) counts reach Python this much at a time, as
# topology.summary estimates it (about 35,000 counts of 20-character user
# ids), so a batch of many distinct long user ids cannot fill the driver:
# 500,000 ids of 2,000 bytes are 1 GB. A part takes about 5 times its
# estimate in Python while it is stored (rows, the SQL text, what Postgres
# returns): 32 MB parts peaked at 215 MB of Python, measured.
PART_BYTES = 8 << 20

# A batch's users' counts, cached in Spark to be read in parts (a large
# batch's) or in Python (a small one's); its summary.
Counted = tuple[DataFrame | Counts, Summary]


class AnomalyDetector:
    """One publisher, delivery thread and retention thread per process,
    across query restarts."""

    publisher: AlertPublisher

    def setup(self, context: Context) -> None:
        engine, config = context.postgres.engine, context.config
        self.publisher = AlertPublisher(engine, context.kafka, context.stop_requested)
        self.publisher.start()
        ChannelDelivery(engine, configured_channels(config.channels), config.retention_hours,
                        context.stop_requested).start()
        Retention(engine, {"alert_outbox": ALERT_OUTBOX}, config.retention_hours, context.stop_requested).start()

    def start_query(self, context: Context, run: QueryRun, source: DataFrame, checkpoint: str) -> StreamingQuery:
        config = context.config

        def count_failures(batch: DataFrame, records: int) -> Counted:
            if records * MAX_COUNT_BYTES <= PART_BYTES:
                # However many distinct users, the counts fit one part (a
                # steady stream's batches): collected by one job, nothing
                # cached, instead of a summary's job and a part's.
                return summed_up(small_batch_counts(batch, config.window_seconds).collect())
            counts = failed_logins(batch, config.window_seconds).persist()
            return counts, summary(counts)

        def write(connection: Connection, counted: Counted) -> dict[str, int]:
            counts, result = counted
            if isinstance(counts, dict):
                parts: Iterable[Counts] = [counts]
            else:
                parts = collected_in_parts(result.user_bytes, PART_BYTES,
                                           lambda parts, part: as_counts(counts_part(counts, parts, part).collect()))
            alerts, pruned = record_failures(connection, parts, config)
            return {"rows_out": result.users, "failed_logins": result.failed_logins,
                    "skipped_no_user": result.no_user, "skipped_bad_time": result.bad_time,
                    "alerts": alerts, "windows_pruned": pruned}

        write_batch = foreach_batch(context.postgres, context.batch_size, run, checkpoint, count_failures, write,
                                    after_commit=self.publisher.wake)
        # Batches back to back (not STEADY_TRIGGER): an alert is due within a second.
        return (source.writeStream.foreachBatch(write_batch).trigger(processingTime=run.trigger(BACK_TO_BACK))
                .option("checkpointLocation", checkpoint).start())


def as_counts(rows: Iterable[Row]) -> Counts:
    return {(row.user, row.window_start): row["count"] for row in rows}


def warm_up(spark: SparkSession, config: Config) -> None:
    lines = kafka_records(spark, ["user_id: alice | action: login failed", "bob | action: login"])
    small_batch_counts(lines, config.window_seconds).collect()
    counts = failed_logins(lines, config.window_seconds).persist()
    summary(counts)
    counts_part(counts, 1, 0).collect()
    counts.unpersist()


_DETECTOR = AnomalyDetector()
ANOMALY_DETECTOR = Worker(name="anomaly-detector", topic="loglines", batch_records=500_000,
                          start_query=_DETECTOR.start_query, progress="postgres", setup=_DETECTOR.setup,
                          warm_up=warm_up)
