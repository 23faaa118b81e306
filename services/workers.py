"""Every worker of the project, declared once each (shared.worker.Worker).
Everything that lists workers derives from this: the web process's health,
the class-data archive's build, the release's tables, the topics and
consumer groups the setup creates, the benchmarks and the tests.

    python -m services.workers     (bin/heroku-setup, on the app)

prints what the setup makes for them, one line each: `topic <name>` and
`group <name>` without the prefix (Heroku's CLI adds it on basic plans),
and `process <Procfile process type>`."""

from services.aggregator.worker import AGGREGATOR
from services.anomaly_detector.worker import ANOMALY_DETECTOR
from services.text_processor.worker import TEXT_PROCESSOR
from shared.config import KafkaConfig
from shared.worker import Worker

WORKERS: dict[str, Worker] = {worker.name: worker for worker in (TEXT_PROCESSOR, AGGREGATOR, ANOMALY_DETECTOR)}
# Each once, in the workers' order.
TOPICS: tuple[str, ...] = tuple(dict.fromkeys(topic for worker in WORKERS.values() for topic in worker.topics))
GROUPS: tuple[str, ...] = tuple(KafkaConfig(brokers=(), use_tls=False).group_id(name) for name in WORKERS)

if __name__ == "__main__":
    print("\n".join([*(f"topic {topic}" for topic in TOPICS), *(f"group {group}" for group in GROUPS),
                     *(f"process {worker.process_type}" for worker in WORKERS.values())]))
