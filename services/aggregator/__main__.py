"""aggregator_worker: words -> windowed_counts, exactly once. See topology.py."""

import io

from sqlalchemy import text

from services.aggregator.topology import run_thresholds, summarize
from shared import worker
from shared.exactly_once import foreach_batch
from shared.retention import WINDOWED_COUNTS, Retention

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

COUNTED_PLACES = text("""
    SELECT partition, line_partition, line_offset, word_index FROM counted_places
    WHERE consumer = :consumer AND topic = :topic""")
STORE_PLACE = text("""
    INSERT INTO counted_places (consumer, topic, partition, line_partition, line_offset, word_index)
    VALUES (:consumer, :topic, :partition, :line_partition, :line_offset, :word_index)
    ON CONFLICT (consumer, topic, partition, line_partition) DO UPDATE
    SET line_offset = EXCLUDED.line_offset, word_index = EXCLUDED.word_index""")


def add_counts(connection, summary, window_seconds):
    if summary.rows:
        with connection.connection.cursor() as cursor:
            cursor.execute(BATCH_TABLE)
            cursor.copy_expert("COPY batch_counts FROM STDIN", io.StringIO(summary.lines))
            cursor.execute(ADD_COUNTS, {"window_seconds": window_seconds})


def start_query(context, source, checkpoint):
    window_seconds = context.config.window_seconds
    progress = context.progress
    owner = {"consumer": progress.consumer, "topic": progress.topic}

    def counted_places():
        rows = progress.read(lambda connection: connection.execute(COUNTED_PLACES, owner).all())
        return {(w, p): (offset, index) for w, p, offset, index in rows}

    def summarize_batch(batch):
        """The batch's summary and the highest places after it. (The fence
        on offsets guarantees nobody else moved those places meanwhile: they
        move only with the offsets, in one transaction.)"""
        before = counted_places()

        def summary(thresholds):
            return summarize(batch, window_seconds, thresholds).first()

        result = summary(before)
        per_run, after, repeats = run_thresholds(before, result.runs)
        if repeats:
            result = summary(per_run)
        return result, {pair: place for pair, place in after.items() if before.get(pair) != place}

    def write(connection, summarized):
        result, moved = summarized
        add_counts(connection, result, window_seconds)
        if moved:
            connection.execute(STORE_PLACE, [
                {**owner, "partition": w, "line_partition": p, "line_offset": offset, "word_index": index}
                for (w, p), (offset, index) in moved.items()])
        # rows_in: Spark counts the records of a batch summarized twice twice.
        skipped = result.repeated + result.bad_time + result.bad_key
        return {"rows_in": result.counted + skipped, "rows_out": result.rows, "counted": result.counted,
                "skipped_repeated": result.repeated, "skipped_bad_time": result.bad_time,
                "skipped_bad_key": result.bad_key}

    write_batch = foreach_batch(context, checkpoint, summarize_batch, write)
    return source.writeStream.foreachBatch(write_batch).option("checkpointLocation", checkpoint).start()


def setup(context):
    Retention(context.progress.engine, {"windowed_counts": WINDOWED_COUNTS}, context.config.retention_hours,
              context.stop_requested).start()


if __name__ == "__main__":
    worker.run("aggregator", "words", start_query, batch_records=2_000_000, read_headers=True,
               transactional=True, setup=setup)
