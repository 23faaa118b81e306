"""The aggregator: words -> windowed_counts, exactly once. Its Spark side is topology.py."""

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy import Connection, text

from services.aggregator.tables import MIGRATIONS
from services.aggregator.topology import (
    MAX_COPY_LINE_BYTES,
    Summary,
    copy_text,
    dead_letters,
    grouped,
    run_thresholds,
    small_batch_groups,
    summary,
    summed_up,
)
from shared.config import Config
from shared.events import PLACE_HEADER, line_place, place_value
from shared.parts import CopySource, collected_in_parts
from shared.retention import Retention
from shared.worker import Context, DriverJvm, Jit, PostgresSink, Worker, kafka_records

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
# Each window's words in all, for the dashboard: an hour of windows is 360
# rows here, not every word of them.
ADD_WINDOW_TOTALS = """
    INSERT INTO window_totals (window_start, words)
    SELECT to_timestamp(window_start), sum(count) FROM batch_counts GROUP BY window_start
    ON CONFLICT (window_start) DO UPDATE SET words = window_totals.words + EXCLUDED.words"""

# What is past RETENTION_HOURS, a few thousand rows a statement (shared.retention).
RETENTION = {
    "windowed_counts": """
        DELETE FROM windowed_counts WHERE (window_start, word) IN (
            SELECT window_start, word FROM windowed_counts
            WHERE window_start < now() - make_interval(hours => :hours) LIMIT :rows)""",
    "window_totals": """
        DELETE FROM window_totals WHERE window_start IN (
            SELECT window_start FROM window_totals
            WHERE window_start < now() - make_interval(hours => :hours) LIMIT :rows)""",
}

COUNTED_PLACES = text("""
    SELECT partition, line_partition, line_offset, word_index FROM counted_places
    WHERE consumer = :consumer AND topic = :topic""")
STORE_PLACE = text("""
    INSERT INTO counted_places (consumer, topic, partition, line_partition, line_offset, word_index)
    VALUES (:consumer, :topic, :partition, :line_partition, :line_offset, :word_index)
    ON CONFLICT (consumer, topic, partition, line_partition) DO UPDATE
    SET line_offset = EXCLUDED.line_offset, word_index = EXCLUDED.word_index""")


Places = dict[tuple[int, int], tuple[int, int]]  # (partition, line partition) -> (line offset, word index)
# A batch's groups (None: its summary holds its COPY text), its summary, the places it moved.
Summarized = tuple[DataFrame | None, Summary, Places]

# The COPY text is collected this much at a time (about 750,000 counts of
# 20-letter words), so a batch of long distinct words cannot fill the
# driver: 2,000,000 words of 2,000 bytes would be 8 GB of text. Enough for
# a cold first batch's, however long its words, to be collected whole.
COPY_PART_BYTES = 48 << 20


def add_counts(connection: Connection, groups: DataFrame | None, result: Summary, window_seconds: int) -> None:
    if result.rows:
        parts: Iterable[str] = [result.lines or ""] if groups is None else collected_in_parts(
            result.copy_bytes, COPY_PART_BYTES,
            lambda slices, part: copy_text(groups, slices, part).collect()[0].lines or "")
        raw: Any = connection.connection  # psycopg2's, whose cursor is a context manager
        with raw.cursor() as cursor:
            cursor.execute(BATCH_TABLE)
            cursor.copy_expert("COPY batch_counts FROM STDIN", CopySource(parts), size=1 << 20)
            cursor.execute(ADD_COUNTS, {"window_seconds": window_seconds})
            cursor.execute(ADD_WINDOW_TOTALS)


class WordCounts(PostgresSink[Summarized]):
    """Each batch's counts per word and window added to windowed_counts
    (and window_totals), with the places it counted up to, so a word re-sent
    by the text processor is counted once (topology.py)."""

    # Its steady batches begin half a second past the second, once the text
    # processor's batch begun on that second has written its words: begun on
    # the second too, they found those words a second late (shared.levers.phase).
    phase_s = 0.5

    context: Context
    window_seconds: int
    owner: dict[str, str]  # the rows of counted_places that are this worker's

    def open(self, context: Context) -> None:
        self.context, self.window_seconds = context, context.config.window_seconds
        self.owner = {"consumer": context.postgres.consumer, "topic": context.postgres.topic}
        Retention(context.postgres.engine, RETENTION, context.config.retention_hours, context.stop_requested).start()

    def counted_places(self) -> Places:
        rows = self.context.postgres.read(lambda connection: connection.execute(COUNTED_PLACES, self.owner).all())
        return {(w, p): (offset, index) for w, p, offset, index in rows}

    def summarize(self, batch: DataFrame, records: int) -> Summarized:
        """The batch's groups (cached until its transaction is committed;
        None for a small batch, whose summary holds its COPY text), its
        summary and the highest places after it. (The fence on offsets
        guarantees nobody else moved those places meanwhile: they move only
        with the offsets, in one transaction.)"""
        before = self.counted_places()

        def summarized(thresholds: dict[Any, Any]) -> tuple[DataFrame | None, Summary]:
            if records * MAX_COPY_LINE_BYTES <= COPY_PART_BYTES:
                # However long its words, its COPY text fits one part (a
                # steady stream's batches): its groups collected by one job.
                return None, summed_up(small_batch_groups(batch, self.window_seconds, thresholds).collect())
            groups = grouped(batch, self.window_seconds, thresholds).persist()
            return groups, summary(groups)

        groups, result = summarized(before)
        per_run, after, repeats = run_thresholds(before, result.runs)
        if repeats:
            if groups is not None:
                groups.unpersist()
            groups, result = summarized(per_run)
        return groups, result, {pair: place for pair, place in after.items() if before.get(pair) != place}

    def dead_letters(self, batch: DataFrame, summarized: Summarized) -> DataFrame | None:
        result = summarized[1]
        return dead_letters(batch, self.window_seconds) if result.bad_time or result.bad_key else None

    def write(self, connection: Connection, summarized: Summarized) -> dict[str, int]:
        groups, result, moved = summarized
        add_counts(connection, groups, result, self.window_seconds)
        if moved:
            connection.execute(STORE_PLACE, [
                {**self.owner, "partition": w, "line_partition": p, "line_offset": offset, "word_index": index}
                for (w, p), (offset, index) in moved.items()])
        # rows_in: Spark counts the records of a batch summarized twice twice.
        skipped = result.repeated + result.bad_time + result.bad_key
        return {"rows_in": result.counted + skipped, "rows_out": result.rows, "counted": result.counted,
                "skipped_repeated": result.repeated, "skipped_bad_time": result.bad_time,
                "skipped_bad_key": result.bad_key}


def warm_up(spark: SparkSession, config: Config) -> None:
    place = place_value(line_place(F.col("partition"), F.col("offset"), F.lit(0), F.unix_millis("timestamp")),
                        F.lit(0))
    header = F.struct(F.lit(PLACE_HEADER).alias("key"), place.alias("value"))
    words = kafka_records(spark, ["fox", "jumps"], F.array(header))
    small_batch_groups(words, config.window_seconds, {}).collect()
    groups = grouped(words, config.window_seconds, {}).persist()
    summary(groups)
    copy_text(groups, 1, 0).collect()
    groups.unpersist()


# C2 for its records' code only (Jit.TIERED_RECORDS): it commits first, and
# drains, sooner, and reads more words a CPU second; the text processor's
# drain was slower with it (docs/decisions/jit.md).
AGGREGATOR = Worker(name="aggregator", topic="words", sink=WordCounts(), batch_records=2_000_000,
                    read_headers=True, warm_up=warm_up, migrations=MIGRATIONS, jvm=DriverJvm(jit=Jit.TIERED_RECORDS))
