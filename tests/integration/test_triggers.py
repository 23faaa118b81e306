"""The processing-time triggers the workers start their queries with, on
real Spark: a query run of one batch (a cold start's small first one) runs
that batch as it starts and begins no second, so it is stopped with no
batch running."""

from devstack.local_stack import wait_until
from shared.levers.small_first_batch import ONE_BATCH_TRIGGER
from shared.worker.query_run import BETWEEN_TRIGGERS
from shared.worker.triggers import STEADY_TRIGGER


def test_a_one_batch_trigger_runs_a_batch_as_it_starts_and_no_second(spark, tmp_path):
    def started(trigger: str, name: str):
        # A source with records for every trigger, as a backlog has.
        rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10).load()
        return (rows.writeStream.format("noop").trigger(processingTime=trigger)
                .option("checkpointLocation", str(tmp_path / name)).start())

    one_batch = started(ONE_BATCH_TRIGGER, "one-batch")
    steady = started(STEADY_TRIGGER, "steady")
    try:
        wait_until(lambda: one_batch.status["message"] == BETWEEN_TRIGGERS, 120, "the one batch's trigger over")
        assert one_batch.lastProgress["batchId"] == 0 and one_batch.lastProgress["numInputRows"] == 10
        # Seconds of triggers pass on the steady query: the one-batch query begins none.
        wait_until(lambda: steady.lastProgress is not None and steady.lastProgress["batchId"] >= 3, 60,
                   "four steady batches")
        assert one_batch.lastProgress["batchId"] == 0
        assert one_batch.status == {"message": BETWEEN_TRIGGERS, "isDataAvailable": True, "isTriggerActive": False}
    finally:
        one_batch.stop()
        steady.stop()
