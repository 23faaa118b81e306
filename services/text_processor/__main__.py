"""text_processor_worker: textlines -> words. Declared in worker.py."""

from shared.worker import main

if __name__ == "__main__":
    main("services.text_processor.worker")
