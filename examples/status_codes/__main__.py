"""python -m examples.status_codes: the worker until SIGTERM."""

from shared.launch import Launch, begin

LAUNCH = Launch("status-codes", needs_database=True)

if __name__ == "__main__":
    launched = begin(LAUNCH)  # Spark's JVM starts while the rest is imported
    from examples.status_codes.worker import STATUS_CODES
    from shared.worker import run

    run(STATUS_CODES, launched)
