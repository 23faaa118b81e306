"""anomaly_detector_worker: loglines -> alerts, one per threshold crossing.
See topology.py (parsing, counting) and alerts.py (deciding, publishing)."""

from services.anomaly_detector.alerts import AlertPublisher, record_failures
from services.anomaly_detector.channels import ChannelDelivery, configured_channels
from services.anomaly_detector.topology import counts_part, failed_logins, summary
from shared import worker
from shared.exactly_once import foreach_batch
from shared.parts import collected_in_parts
from shared.retention import ALERT_OUTBOX, Retention
from shared.warm_up import kafka_records

BATCH_RECORDS = 500_000  # a micro-batch's records unless MAX_OFFSETS_PER_TRIGGER says
# A batch's (user, window) counts reach Python this much at a time, as
# topology.summary estimates it (about 35,000 counts of 20-character user
# ids), so a batch of many distinct long user ids cannot fill the driver:
# 500,000 ids of 2,000 bytes are 1 GB. A part takes about 5 times its
# estimate in Python while it is stored (rows, the SQL text, what Postgres
# returns): 32 MB parts peaked at 215 MB of Python, measured.
PART_BYTES = 8 << 20


class AnomalyDetector:
    """One publisher, delivery thread and retention thread per process,
    across query restarts."""

    def setup(self, context):
        engine, config = context.progress.engine, context.config
        self.publisher = AlertPublisher(engine, config.kafka, context.stop_requested)
        self.publisher.start()
        ChannelDelivery(engine, configured_channels(config.channels), config.retention_hours,
                        context.stop_requested).start()
        Retention(engine, {"alert_outbox": ALERT_OUTBOX}, config.retention_hours, context.stop_requested).start()

    def start_query(self, context, source, checkpoint):
        config = context.config

        def count_failures(batch):
            counts = failed_logins(batch, config.window_seconds).persist()
            return counts, summary(counts).first()

        def write(connection, counted):
            counts, result = counted
            parts = collected_in_parts(result.user_bytes, PART_BYTES, lambda parts, part: {
                (row.user, row.window_start): row["count"] for row in counts_part(counts, parts, part).collect()})
            alerts, pruned = record_failures(connection, parts, config)
            return {"rows_out": result.users, "failed_logins": result.failed_logins,
                    "skipped_no_user": result.no_user, "skipped_bad_time": result.bad_time,
                    "alerts": alerts, "windows_pruned": pruned}

        write_batch = foreach_batch(context, checkpoint, count_failures, write, after_commit=self.publisher.wake)
        return source.writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint).start()


def warm_up(spark, config):
    lines = kafka_records(spark, ["user_id: alice | action: login failed", "bob | action: login"])
    counts = failed_logins(lines, config.window_seconds).persist()
    summary(counts).first()
    counts_part(counts, 1, 0).collect()
    counts.unpersist()


if __name__ == "__main__":
    detector = AnomalyDetector()
    worker.run("anomaly-detector", "loglines", detector.start_query, batch_records=BATCH_RECORDS,
               transactional=True, setup=detector.setup, warm_up=warm_up)
