"""aggregator_worker: words -> windowed_counts, exactly once. Declared in worker.py.

Spark's JVM is launched before the worker's modules are imported, which
happens while it starts (shared.launch)."""

from shared.launch import Launch, begin

LAUNCH = Launch("aggregator", needs_database=True)

if __name__ == "__main__":
    launched = begin(LAUNCH)
    from services.aggregator.worker import AGGREGATOR
    from shared.worker import run

    run(AGGREGATOR, launched)
