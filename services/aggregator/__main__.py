"""aggregator_worker: words -> windowed_counts, exactly once. Declared in worker.py."""

from services.aggregator.worker import AGGREGATOR
from shared.worker import run

if __name__ == "__main__":
    run(AGGREGATOR)
