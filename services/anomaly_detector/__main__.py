"""anomaly_detector_worker: loglines -> alerts, one per threshold crossing. Declared in worker.py."""

from services.anomaly_detector.worker import ANOMALY_DETECTOR
from shared.worker import run

if __name__ == "__main__":
    run(ANOMALY_DETECTOR)
