"""aggregator_worker: words -> windowed_counts, exactly once. See topology.py."""

import csv
import io

from services.aggregator.topology import count_words
from shared import worker
from shared.exactly_once import foreach_batch

# A batch's counts are copied in bulk, then added to what earlier batches stored.
BATCH_TABLE = """
    CREATE TEMPORARY TABLE batch_counts (window_start bigint, word text, count bigint)
    ON COMMIT DROP"""
ADD_COUNTS = """
    INSERT INTO windowed_counts (window_start, window_end, word, count)
    SELECT to_timestamp(window_start), to_timestamp(window_start + %(window_seconds)s), word, count
    FROM batch_counts
    ON CONFLICT (window_start, word) DO UPDATE
    SET count = windowed_counts.count + EXCLUDED.count"""


def add_counts(connection, rows, window_seconds):
    buffer = io.StringIO()
    csv.writer(buffer).writerows((row.window_start, row.word, row["count"]) for row in rows)
    buffer.seek(0)
    with connection.connection.cursor() as cursor:
        cursor.execute(BATCH_TABLE)
        cursor.copy_expert("COPY batch_counts FROM STDIN WITH (FORMAT csv)", buffer)
        cursor.execute(ADD_COUNTS, {"window_seconds": window_seconds})
    return {"counted": sum(row["count"] for row in rows)}


def start_query(context, source, checkpoint):
    window_seconds = context.config.window_seconds
    write = foreach_batch(context, checkpoint, lambda batch: count_words(batch, window_seconds),
                          lambda connection, rows: add_counts(connection, rows, window_seconds))
    return source.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint).start()


if __name__ == "__main__":
    worker.run("aggregator", "words", start_query, batch_records=1_000_000, read_headers=True,
               transactional=True)
