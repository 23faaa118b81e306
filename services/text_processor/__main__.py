"""text_processor_worker: textlines -> words. Declared in worker.py.

Spark's JVM is launched before the worker's modules are imported, which
happens while it starts (shared.launch)."""

from shared.launch import Launch, begin
from shared.spark import DriverJvm

# Its young generation four times the others': on a backlog it allocates
# about a gigabyte a second (each word's record goes through Spark's Kafka
# sink and the producer); with 64 MB a sixth of its time went to young
# collections, and with 256 MB its batches ran 5 to 10 % faster than with
# 128 (docs/decisions/memory.md, "The text processor's young generation").
LAUNCH = Launch("text-processor", needs_database=False, jvm=DriverJvm(young_generation_mb=256))

if __name__ == "__main__":
    launched = begin(LAUNCH)
    from services.text_processor.worker import TEXT_PROCESSOR
    from shared.worker import run

    run(TEXT_PROCESSOR, launched)
