"""The aggregator's tables: its declaration's migrations (shared.worker.Worker.migrations),
applied once each, in order; never edit a step that has shipped, add one."""

# The words per window of the counts stored so far.
FILL_WINDOW_TOTALS = """
    INSERT INTO window_totals
    SELECT window_start, sum(count) FROM windowed_counts GROUP BY window_start"""

MIGRATIONS = (
    ("windowed_counts", """
        CREATE TABLE windowed_counts (
            window_start timestamptz NOT NULL,
            window_end   timestamptz NOT NULL,
            word         text        NOT NULL,
            count        bigint      NOT NULL,
            PRIMARY KEY (window_start, word))"""),
    # The highest place (services/aggregator/topology.py) counted per words
    # partition and textlines partition, moved with the consumer's offsets.
    ("counted_places", """
        CREATE TABLE counted_places (
            consumer       text   NOT NULL,
            topic          text   NOT NULL,
            partition      int    NOT NULL,
            line_partition int    NOT NULL,
            line_offset    bigint NOT NULL,
            word_index     int    NOT NULL,
            PRIMARY KEY (consumer, topic, partition, line_partition))"""),
    # Words per window, added in each batch's transaction. (An aggregator of
    # the version before, still running while this step runs, adds counts
    # without totals until it stops.)
    ("window_totals", """
        CREATE TABLE window_totals (
            window_start timestamptz PRIMARY KEY,
            words        bigint      NOT NULL);
        """ + FILL_WINDOW_TOTALS),
)
