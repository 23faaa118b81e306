"""Every worker of the project, declared once each (shared.worker.Worker).
Everything that lists workers derives from this: the web process's health,
the class-data archive's build, the benchmarks and the tests."""

from services.aggregator.worker import AGGREGATOR
from services.anomaly_detector.worker import ANOMALY_DETECTOR
from services.text_processor.worker import TEXT_PROCESSOR
from shared.worker import Worker

WORKERS: dict[str, Worker] = {worker.name: worker for worker in (TEXT_PROCESSOR, AGGREGATOR, ANOMALY_DETECTOR)}
