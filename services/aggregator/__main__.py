"""aggregator_worker: words -> windowed_counts, exactly once. See topology.py."""

import io

from services.aggregator.topology import copy_text, count_words
from shared import worker
from shared.exactly_once import foreach_batch

# A batch's counts are copied in bulk, then added to what earlier batches stored.
BATCH_TABLE = """
    CREATE TEMPORARY TABLE batch_counts (window_start bigint, word_hex text, count bigint)
    ON COMMIT DROP"""
ADD_COUNTS = """
    INSERT INTO windowed_counts (window_start, window_end, word, count)
    SELECT to_timestamp(window_start), to_timestamp(window_start + %(window_seconds)s),
           convert_from(decode(word_hex, 'hex'), 'UTF8'), count
    FROM batch_counts
    ON CONFLICT (window_start, word) DO UPDATE
    SET count = windowed_counts.count + EXCLUDED.count"""


def add_counts(connection, batch, window_seconds):
    """`batch`: the one row of copy_text."""
    if batch.rows:
        with connection.connection.cursor() as cursor:
            cursor.execute(BATCH_TABLE)
            cursor.copy_expert("COPY batch_counts FROM STDIN", io.StringIO(batch.lines))
            cursor.execute(ADD_COUNTS, {"window_seconds": window_seconds})
    return {"rows_out": batch.rows, "counted": batch.words or 0}


def start_query(context, source, checkpoint):
    window_seconds = context.config.window_seconds
    write = foreach_batch(context, checkpoint,
                          lambda batch: copy_text(count_words(batch, window_seconds)),
                          lambda connection, rows: add_counts(connection, rows[0], window_seconds))
    return source.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint).start()


if __name__ == "__main__":
    worker.run("aggregator", "words", start_query, batch_records=2_000_000, read_headers=True,
               transactional=True)
