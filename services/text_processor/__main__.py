"""text_processor_worker: textlines -> words. Declared in worker.py."""

from services.text_processor.worker import TEXT_PROCESSOR
from shared.worker import run

if __name__ == "__main__":
    run(TEXT_PROCESSOR)
