"""`GET /metrics`: the workers' state in the OpenMetrics text format, for
Prometheus-style scrapers, from the same readings as the dashboard: each
consumer group in Kafka (lag and committed offset per partition, copies, the
age of the last committed batch), the alert outbox in Postgres (alerts
raised, published and delivered, by severity and channel) and the dead
letters (by worker and reason).

A reading that fails (the broker or Postgres away) leaves its families out
and says so in `streams_kafka_up` or `streams_postgres_up`, so a scrape
always answers.
"""

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from services.web.queries import CHANNEL_OF_SEVERITY

__all__ = ["CONTENT_TYPE_LATEST", "exposition"]


def exposition(workers: list[dict[str, Any]] | None, alerts: list[Any] | None,
               letters: list[dict[str, Any]] | None = None) -> bytes:
    """The OpenMetrics text of `workers` (as WorkerHealth.read gives them),
    `alerts` (rows of queries.alert_totals) and `letters` (as
    queries.dead_letter_counts gives them); None for a reading that failed."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Reading(workers, alerts, letters))
    return generate_latest(registry)


class _Reading(Collector):
    def __init__(self, workers: list[dict[str, Any]] | None, alerts: list[Any] | None,
                 letters: list[dict[str, Any]] | None) -> None:
        self.workers, self.alerts, self.letters = workers, alerts, letters

    def collect(self) -> Iterable[Metric]:
        kafka_up = GaugeMetricFamily("streams_kafka_up", "Whether the brokers answered this scrape")
        kafka_up.add_metric([], 0 if self.workers is None else 1)
        postgres_up = GaugeMetricFamily("streams_postgres_up", "Whether Postgres answered this scrape")
        postgres_up.add_metric([], 0 if self.alerts is None else 1)
        yield from (kafka_up, postgres_up)
        if self.workers is not None:
            yield from _worker_families(self.workers)
        if self.alerts is not None:
            yield from _alert_families(self.alerts)
        if self.letters is not None:
            # Rows of the table: RETENTION_HOURS deletes old ones (a counter reset).
            letters = CounterMetricFamily("streams_dead_letters", "Records a worker skipped and kept",
                                          labels=["worker", "reason"])
            for row in self.letters:
                letters.add_metric([row["worker"], row["reason"]], row["letters"])
            yield letters


def _worker_families(workers: list[dict[str, Any]]) -> Iterable[Metric]:
    lag = GaugeMetricFamily("streams_consumer_lag_records", "Records on the input topic past the group's commit",
                            labels=["worker", "partition"])
    committed = GaugeMetricFamily("streams_committed_offset", "The group's committed next offset",
                                  labels=["worker", "partition"])
    copies = GaugeMetricFamily("streams_copies", "Members of the worker's consumer group", labels=["worker"])
    age = GaugeMetricFamily("streams_last_commit_age_seconds", "Seconds since the group last committed a batch",
                            labels=["worker"])
    took = GaugeMetricFamily("streams_last_batch_seconds", "How long the last committed batch took",
                             labels=["worker"])
    for worker in workers:
        name = worker["worker"]
        copies.add_metric([name], worker["copies"])
        if worker["last_commit_age_s"] is not None:
            age.add_metric([name], worker["last_commit_age_s"])
        if worker["last_batch_ms"] is not None:
            took.add_metric([name], worker["last_batch_ms"] / 1000)
        for row in worker["partitions"]:
            lag.add_metric([name, str(row["partition"])], row["lag"])
            if row["committed"] is not None:
                committed.add_metric([name, str(row["partition"])], row["committed"])
    return lag, committed, copies, age, took


def _alert_families(alerts: list[Any]) -> Iterable[Metric]:
    # Counts of the outbox's rows: RETENTION_HOURS deletes published alerts,
    # which a scraper sees as a counter reset.
    raised = CounterMetricFamily("streams_alerts_raised", "Alerts raised, by severity", labels=["severity"])
    published = CounterMetricFamily("streams_alerts_published", "Alerts published to the alerts topic",
                                    labels=["severity"])
    delivered = CounterMetricFamily("streams_alerts_delivered", "Alerts a channel took",
                                    labels=["severity", "channel"])
    refused = CounterMetricFamily("streams_alerts_refused", "Alerts a channel refused for good",
                                  labels=["severity", "channel"])
    for row in alerts:
        raised.add_metric([row.severity], row.raised)
        published.add_metric([row.severity], row.published)
        channel = CHANNEL_OF_SEVERITY.get(row.severity, "none")
        delivered.add_metric([row.severity, channel], row.delivered)
        refused.add_metric([row.severity, channel], row.refused)
    return raised, published, delivered, refused
