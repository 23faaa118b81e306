"""accesslines -> status_counts: HTTP status codes per window, exactly once.

A line ends with its status code (`GET /index.html 200`); its window is its
Kafka record's timestamp's. A line without one is skipped and counted."""

from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from sqlalchemy import Connection, text

from shared.worker import Context, PostgresSink, Worker

MIGRATIONS = (
    ("status_counts", """
        CREATE TABLE status_counts (
            window_start timestamptz NOT NULL,
            status       int         NOT NULL,
            count        bigint      NOT NULL,
            PRIMARY KEY (window_start, status))"""),
)
ADD_COUNTS = text("""
    INSERT INTO status_counts (window_start, status, count)
    VALUES (to_timestamp(:window_start), :status, :count)
    ON CONFLICT (window_start, status) DO UPDATE SET count = status_counts.count + EXCLUDED.count""")


def statuses(records: DataFrame, run: int) -> DataFrame:
    """Kafka records -> (second, status): status "" for a line without one."""
    status = F.regexp_extract(F.col("value").cast("string"), r"\s([1-5][0-9][0-9])\s*$", 1)
    return records.select(F.unix_seconds("timestamp").alias("second"), status.alias("status"))


class StatusCounts(PostgresSink[list[Row]]):
    window_seconds: int

    def open(self, context: Context) -> None:
        self.window_seconds = context.config.window_seconds

    def summarize(self, batch: DataFrame, records: int) -> list[Row]:
        window_start = F.floor(F.col("second") / self.window_seconds) * self.window_seconds
        return batch.groupBy(window_start.alias("window_start"), "status").count().collect()

    def write(self, connection: Connection, summary: list[Row]) -> dict[str, Any]:
        counts = [{"window_start": row.window_start, "status": int(row.status), "count": row["count"]}
                  for row in summary if row.status]
        if counts:
            connection.execute(ADD_COUNTS, counts)
        return {"rows_out": len(counts), "skipped_no_status": sum(row["count"] for row in summary if not row.status)}


STATUS_CODES = Worker(name="status-codes", topic="accesslines", topology=statuses, sink=StatusCounts(),
                      migrations=MIGRATIONS)
