"""anomaly_detector_worker: loglines -> alerts, one per threshold crossing. Declared in worker.py."""

from shared.worker import main

if __name__ == "__main__":
    main("services.anomaly_detector.worker")
