"""The OpenMetrics text of `GET /metrics` (services.web.metrics), parsed back
as a scraper reads it."""

from types import SimpleNamespace

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from services.web.metrics import exposition

WORKERS = [
    {"worker": "aggregator", "copies": 2, "last_commit_age_s": 4.5, "last_batch_ms": 1250, "lag": 5,
     "partitions": [{"partition": 0, "committed": 5, "end": 7, "lag": 2},
                    {"partition": 1, "committed": None, "end": 3, "lag": 3}]},
    {"worker": "text-processor", "copies": 0, "last_commit_age_s": None, "last_batch_ms": None, "lag": 0,
     "partitions": []},
]
ALERTS = [SimpleNamespace(severity="email", raised=3, published=3, delivered=2, refused=1),
          SimpleNamespace(severity="urgent", raised=1, published=0, delivered=0, refused=0)]


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    assert text.endswith(b"# EOF\n")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode()) for sample in family.samples}


def test_each_partitions_lag_and_offset_the_copies_and_the_age_of_the_last_batch():
    read = samples(exposition(WORKERS, ALERTS))
    assert read["streams_consumer_lag_records", (("partition", "0"), ("worker", "aggregator"))] == 2
    assert read["streams_consumer_lag_records", (("partition", "1"), ("worker", "aggregator"))] == 3
    assert read["streams_committed_offset", (("partition", "0"), ("worker", "aggregator"))] == 5
    assert ("streams_committed_offset", (("partition", "1"), ("worker", "aggregator"))) not in read  # none yet
    assert read["streams_copies", (("worker", "aggregator"),)] == 2
    assert read["streams_copies", (("worker", "text-processor"),)] == 0
    assert read["streams_last_commit_age_seconds", (("worker", "aggregator"),)] == 4.5
    assert ("streams_last_commit_age_seconds", (("worker", "text-processor"),)) not in read
    assert read["streams_last_batch_seconds", (("worker", "aggregator"),)] == 1.25
    assert ("streams_last_batch_seconds", (("worker", "text-processor"),)) not in read


def test_alerts_by_severity_and_channel():
    read = samples(exposition(WORKERS, ALERTS))
    assert read["streams_alerts_raised_total", (("severity", "email"),)] == 3
    assert read["streams_alerts_published_total", (("severity", "urgent"),)] == 0
    assert read["streams_alerts_delivered_total", (("channel", "email"), ("severity", "email"))] == 2
    assert read["streams_alerts_refused_total", (("channel", "pagerduty"), ("severity", "urgent"))] == 0


def test_a_reading_that_failed_is_left_out_and_said_so():
    read = samples(exposition(None, ALERTS))
    assert read["streams_kafka_up", ()] == 0 and read["streams_postgres_up", ()] == 1
    assert not any(name.startswith("streams_consumer") for name, _ in read)
    read = samples(exposition(WORKERS, None))
    assert read["streams_kafka_up", ()] == 1 and read["streams_postgres_up", ()] == 0
    assert not any(name.startswith("streams_alerts") for name, _ in read)


def test_dead_letters_are_counted_by_worker_and_reason_and_left_out_when_postgres_is_away():
    letters = [{"worker": "aggregator", "reason": "bad_key", "letters": 4},
               {"worker": "text-processor", "reason": "too_long", "letters": 1}]
    read = samples(exposition(WORKERS, ALERTS, letters))
    assert read["streams_dead_letters_total", (("reason", "bad_key"), ("worker", "aggregator"))] == 4
    assert read["streams_dead_letters_total", (("reason", "too_long"), ("worker", "text-processor"))] == 1
    assert not [name for name, _ in samples(exposition(WORKERS, None, None)) if name.startswith("streams_dead")]
