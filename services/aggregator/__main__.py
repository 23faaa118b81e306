"""aggregator_worker: words -> windowed_counts, exactly once. See topology.py."""

from psycopg2.extras import execute_values

from services.aggregator.topology import count_words
from shared import worker
from shared.exactly_once import foreach_batch

# Additive: a batch adds its counts to what earlier batches stored.
ADD_COUNTS = """
    INSERT INTO windowed_counts (window_start, window_end, word, count) VALUES %s
    ON CONFLICT (window_start, word) DO UPDATE
    SET count = windowed_counts.count + EXCLUDED.count"""
ROW = "(to_timestamp(%s), to_timestamp(%s), %s, %s)"


def start_query(context, source, checkpoint):
    window_seconds = context.config.window_seconds

    def add_counts(connection, rows):
        values = [(row.window_start, row.window_start + window_seconds, row.word, row["count"])
                  for row in rows]
        with connection.connection.cursor() as cursor:
            execute_values(cursor, ADD_COUNTS, values, template=ROW, page_size=5000)
        return {"counted": sum(value[3] for value in values)}

    write = foreach_batch(context, lambda batch: count_words(batch, window_seconds), add_counts)
    return source.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint).start()


if __name__ == "__main__":
    worker.run("aggregator", "words", start_query, transactional=True)
