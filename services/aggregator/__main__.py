"""aggregator_worker: words -> windowed_counts, exactly once. Declared in worker.py.

Spark's JVM is launched before the worker's modules are imported, which
happens while it starts (shared.launch)."""

from shared.launch import Launch, begin
from shared.spark import DriverJvm, Jit

# C2 for its records' code only (Jit.TIERED_RECORDS): it commits first, and
# drains, sooner, and reads more words a CPU second; the text processor's
# drain was slower with it (docs/decisions/jit.md).
LAUNCH = Launch("aggregator", needs_database=True, jvm=DriverJvm(jit=Jit.TIERED_RECORDS))

if __name__ == "__main__":
    launched = begin(LAUNCH)
    from services.aggregator.worker import AGGREGATOR
    from shared.worker import run

    run(AGGREGATOR, launched)
