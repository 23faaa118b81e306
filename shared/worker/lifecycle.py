"""What a worker does next, decided in one pure function.

`next_step(event, history)` is the whole policy of a worker's main loop: it
gets how the last query run (or a scan, or a search) ended and how many runs
failed in a row, and returns the next step and the new history. It reads no
clock, no Spark, no broker: tests/unit/test_lifecycle.py drives every
transition in milliseconds. shared.worker.runner carries the steps out.
"""

from dataclasses import dataclass
from enum import Enum

from shared.outages import backoff_seconds

# A query that failed this many times in a row, each time with a task failing
# on the same exception about a record, has that record searched for and
# skipped (shared.worker.search).
SEARCH_AFTER_FAILURES = 3


class Ended(Enum):
    """Why a query run ended. The first reason given wins."""

    STOPPED = "stopped"  # a stop was asked for (SIGTERM, SIGINT)
    REVOKED = "revoked"  # a rebalance took this copy's partitions
    RESIZED = "resized"  # a batch measured a new size: its batches must read another number of records
    FIRST_BATCH = "first_batch"  # a cold process's small first run stored its one batch
    FAILED = "failed"  # the query failed, or a foreachBatch function gave up a batch
    SPARK_LOST = "spark_lost"  # a Spark cluster's outage took the driver's session (shared.worker.driver)


@dataclass(frozen=True)
class RunEnded:
    """How a query run ended."""

    ended: Ended
    stored_a_batch: bool = False  # its last batch went through
    error: str = ""  # the innermost line of the error, for the log
    unreadable: bool = False  # Spark's Kafka source met a timestamp it cannot convert
    cause: str | None = None  # the exception a task threw reading a record, if it names one


@dataclass(frozen=True)
class ScanEnded:
    """The scan for records Spark cannot read (after `failure`) ended."""

    failure: RunEnded
    skipped: bool  # it found such records and stored the offsets past them
    stopped: bool = False


@dataclass(frozen=True)
class SearchEnded:
    """The search for the one record that fails its batch (after `failure`) ended."""

    failure: RunEnded
    skipped: bool  # it found that record and stored the offset past it
    stopped: bool = False


Event = RunEnded | ScanEnded | SearchEnded


@dataclass(frozen=True)
class Resume:
    """Start the next query run from the stored offsets, once the group has
    given this copy its partitions."""


@dataclass(frozen=True)
class BackOff:
    """Log `query_failed`, wait `seconds` (still in the group), then resume."""

    seconds: int
    error: str


@dataclass(frozen=True)
class NewSession:
    """Log `spark_lost`, wait `seconds` (still in the group), start a new
    Spark session, then resume."""

    seconds: int
    error: str


@dataclass(frozen=True)
class Scan:
    """Look for records whose timestamp Spark cannot convert and skip them."""


@dataclass(frozen=True)
class Search:
    """Bisect the failing batch, one partition at a time, for the record that fails on `cause`."""

    cause: str


@dataclass(frozen=True)
class Stop:
    """Leave the loop: the worker releases Spark and the group, and exits 0."""


Step = Resume | BackOff | NewSession | Scan | Search | Stop


@dataclass(frozen=True)
class History:
    failures: int = 0  # query runs that failed in a row with no batch stored between


def next_step(event: Event, history: History) -> tuple[Step, History]:
    """The transition table:

        run stopped, or a scan or search cut by a stop  -> Stop
        run revoked or resized                           -> Resume
        run ended by Spark's loss (a cluster's outage)   -> NewSession, after a back-off that grows
                                                            while no batch is stored between
        run failed on an unreadable timestamp            -> Scan
        scan skipped records                             -> Resume
        run failed, or scan found nothing                -> Search, on the 3rd failure in a row
                                                            naming a record's exception; else BackOff
        search skipped a record                          -> Resume; the next failure searches at once
        search found nothing (an outage, a resize)       -> BackOff
    """
    match event:
        case RunEnded(ended=Ended.STOPPED) | ScanEnded(stopped=True) | SearchEnded(stopped=True):
            return Stop(), history
        case RunEnded(ended=Ended.REVOKED | Ended.RESIZED | Ended.FIRST_BATCH):
            return Resume(), history
        case RunEnded(ended=Ended.SPARK_LOST) as lost:
            failures = _failures(lost, history)
            return NewSession(backoff_seconds(failures), lost.error), History(failures)
        case RunEnded(unreadable=True):
            return Scan(), history
        case ScanEnded(skipped=True):
            return Resume(), history
        case RunEnded() as failure:
            return _failed(failure, history)
        case ScanEnded(failure=failure):
            return _failed(failure, history)
        case SearchEnded(skipped=True):
            # Bad records often come in runs: the next failure searches at once.
            return Resume(), History(SEARCH_AFTER_FAILURES - 1)
        case SearchEnded(failure=failure):
            return BackOff(backoff_seconds(history.failures), failure.error), history
    raise AssertionError(f"no transition for {event}")


def _failures(failure: RunEnded, history: History) -> int:
    """Failed runs in a row, this one included: a stored batch begins a new count."""
    return 1 if failure.stored_a_batch else history.failures + 1


def _failed(failure: RunEnded, history: History) -> tuple[Step, History]:
    failures = _failures(failure, history)
    if failures >= SEARCH_AFTER_FAILURES and failure.cause:
        return Search(failure.cause), History(failures)
    return BackOff(backoff_seconds(failures), failure.error), History(failures)
