"""What a failed query's error says, read once into a RunEnded.

A query fails with a StreamingQueryException, or a foreachBatch function
gives a batch up with the Py4JJavaError it met (shared.worker.exactly_once); both
hold the Java exception that a task or the driver threw.
"""

import re

from shared.worker.lifecycle import Ended, RunEnded

# How Spark's Kafka source fails on a record timestamp it cannot convert to
# microseconds (a KafkaIllegalStateException).
UNCONVERTIBLE_TIMESTAMP = "overflows when converting to Spark"
# Exceptions that say nothing of a record: the broker, Spark's Kafka plumbing
# or the network (an outage), memory, or a class or native library missing
# from the slug (a bug of the build, which would otherwise have every record
# it meets skipped).
NOT_A_RECORD = re.compile(
    r"^(org\.apache\.kafka\.|org\.apache\.spark\.sql\.kafka010\.|java\.io\.|java\.net\.)|Timeout|OutOfMemory"
    r"|ClassNotFound|NoClassDefFound|UnsatisfiedLink|NoSuch(Method|Field)Error")


def failed(error: BaseException | None, stored_a_batch: bool) -> RunEnded:
    """How a run that failed with `error` (None: it ended with no error
    Spark reported) ended."""
    return RunEnded(Ended.FAILED, stored_a_batch, error_summary(error) if error else "query stopped with no error",
                    unreadable=UNCONVERTIBLE_TIMESTAMP in str(error), cause=failing_record_cause(error))


def failing_record_cause(error: BaseException | None) -> str | None:
    """The class of the exception at the root of a failed query's `error`,
    if a task threw it while reading records (not Spark planning a batch,
    not Python) and it says something of them (NOT_A_RECORD)."""
    root = None
    while error is not None and root is None:  # query.exception() holds its Java error in its cause
        root = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
        error = getattr(error, "_cause", None)
    if root is None:
        return None
    while root.getCause() is not None:
        root = root.getCause()
    name: str = root.getClass().getName()
    in_a_task = any(frame.getClassName() == "org.apache.spark.scheduler.Task" for frame in root.getStackTrace())
    return name if in_a_task and not NOT_A_RECORD.search(name) else None


def error_summary(error: BaseException) -> str:
    """The innermost exception line: a failed query wraps the Python error of
    a foreachBatch function in pages of Spark's own text."""
    text = str(error)
    causes = re.findall(r"([\w.$]*(?:Error|Exception)): ([^\n]+)", text)
    line = "{}: {}".format(*causes[-1]) if causes else f"{type(error).__name__}: {text.strip()}"
    return line.splitlines()[0][:300]
