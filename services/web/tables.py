"""What the web process reads: the aggregator's and the anomaly detector's
tables, and the indexes its queries need (queries.py), migrated as it
starts; and where its dead-letter keeper has read to."""

from services.aggregator.tables import MIGRATIONS as AGGREGATOR_TABLES
from services.anomaly_detector.tables import MIGRATIONS as ANOMALY_DETECTOR_TABLES
from services.web.dead_letter_keeper import MIGRATIONS as KEEPER_TABLES

# The dashboard's queries: one word's series, and the alerts raised since a time.
INDEXES = (
    ("windowed_counts_by_word", """
        CREATE INDEX windowed_counts_by_word ON windowed_counts (word, window_start)"""),
    ("alert_outbox_by_created_at", """
        CREATE INDEX alert_outbox_by_created_at ON alert_outbox (created_at)"""),
)

MIGRATIONS = (*AGGREGATOR_TABLES, *ANOMALY_DETECTOR_TABLES, *INDEXES, *KEEPER_TABLES)
