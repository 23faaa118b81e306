"""anomaly_detector_worker: loglines -> alerts, one per threshold crossing.
See topology.py (parsing, counting) and alerts.py (deciding, publishing)."""

from services.anomaly_detector.alerts import AlertPublisher, record_failures
from services.anomaly_detector.channels import ChannelDelivery, configured_channels
from services.anomaly_detector.topology import NO_USER, failed_logins
from shared import worker
from shared.exactly_once import foreach_batch
from shared.retention import ALERT_OUTBOX, Retention

BATCH_RECORDS = 500_000  # a micro-batch's records unless MAX_OFFSETS_PER_TRIGGER says


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

        def write(connection, rows):
            counts = {(row.user, row.window_start): row["count"] for row in rows if row.user != NO_USER}
            skipped = [row for row in rows if row.user == NO_USER]
            alerts, pruned = record_failures(connection, counts, config) if counts else (0, 0)
            return {"rows_out": len(rows), "failed_logins": sum(counts.values()),
                    "skipped_no_user": sum(r["count"] for r in skipped if r.window_start is not None),
                    "skipped_bad_time": sum(r["count"] for r in skipped if r.window_start is None),
                    "alerts": alerts, "windows_pruned": pruned}

        write_batch = foreach_batch(context, checkpoint,
                                    lambda batch: failed_logins(batch, config.window_seconds).collect(),
                                    write, after_commit=self.publisher.wake)
        return source.writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint).start()


if __name__ == "__main__":
    detector = AnomalyDetector()
    worker.run("anomaly-detector", "loglines", detector.start_query, batch_records=BATCH_RECORDS,
               transactional=True, setup=detector.setup)
