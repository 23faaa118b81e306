"""anomaly_detector_worker: loglines -> alerts, one per threshold crossing. Declared in worker.py.

Spark's JVM is launched before the worker's modules are imported, which
happens while it starts (shared.launch)."""

from shared.launch import Launch, begin
from shared.spark import DriverJvm, Jit

# C1 alone: its work per record and its plans are small, and without C2
# compiling beside them its cold first batches commit 1.3 s sooner; it
# drains and alerts as fast (docs/decisions/jit.md). The text processor and
# the aggregator need C2's code.
LAUNCH = Launch("anomaly-detector", needs_database=True, jvm=DriverJvm(jit=Jit.C1_ONLY))

if __name__ == "__main__":
    launched = begin(LAUNCH)
    from services.anomaly_detector.worker import ANOMALY_DETECTOR
    from shared.worker import run

    run(ANOMALY_DETECTOR, launched)
