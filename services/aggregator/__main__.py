"""aggregator_worker: words -> windowed_counts, exactly once. Declared in worker.py."""

from shared.worker import main

if __name__ == "__main__":
    main("services.aggregator.worker")
