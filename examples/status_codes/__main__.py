"""python -m examples.status_codes: HTTP statuses per window, until SIGTERM. Declared in worker.py."""

from shared.worker import main

if __name__ == "__main__":
    main("examples.status_codes.worker")
