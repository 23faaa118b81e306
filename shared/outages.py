"""Waiting out a broker or a Postgres that cannot be reached.

An outage at any moment of a worker's life delays it and never stops it: the
step that needs the service is tried again with backoff, one `key=value` line
per try (`event=kafka_unavailable` or `event=postgres_unavailable`), until it
works or a stop is asked for (then StopRequested ends the worker cleanly).
"""

import threading
from typing import Any, Callable, TypeVar

from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient
from sqlalchemy.exc import DBAPIError, OperationalError

from shared.logs import log

MAX_BACKOFF_SECONDS = 30
T = TypeVar("T")


def backoff_seconds(doublings: int, most: int = MAX_BACKOFF_SECONDS) -> int:
    """2 ** doublings seconds, at most `most`."""
    return min(most, 2 ** doublings)


class StopRequested(Exception):
    """A stop was asked for while a step waited for a service."""


class Outage:
    """One service's outages, for one thread: the backoff grows with the
    failures in a row."""

    def __init__(self, event: str, is_outage: Callable[[Exception], bool],
                 stop_requested: threading.Event):
        self.event = event
        self.is_outage = is_outage
        self.stop_requested = stop_requested
        self.failures = 0

    def retry(self, action: Callable[[], T]) -> T:
        """action(), tried until it works; other errors are raised, and
        StopRequested once a stop is asked for between tries."""
        while True:
            succeeded, result = self.attempt(action)
            if succeeded:
                return result  # type: ignore[return-value]  # T itself when it succeeded
            if self.stop_requested.is_set():
                raise StopRequested()

    def attempt(self, action: Callable[[], T]) -> tuple[bool, T | None]:
        """(True, action()), or (False, None) after an outage and its backoff
        (cut short by a stop asked for)."""
        try:
            result = action()
        except Exception as error:
            if not self.is_outage(error):
                raise
            self.failures += 1
            backoff = backoff_seconds(self.failures - 1)  # 1 s after the first failure
            cause = getattr(error, "orig", None) or error
            log(self.event, error=type(cause).__name__, retry_in_s=backoff)
            self.stop_requested.wait(backoff)
            return False, None
        self.failures = 0
        return True, result


def kafka_outage(stop_requested: threading.Event) -> Outage:
    return Outage("kafka_unavailable", lambda error: isinstance(error, KafkaError), stop_requested)


def is_postgres_outage(error: Exception) -> bool:
    """Postgres could not be reached, or the connection was lost."""
    return isinstance(error, OperationalError) or (
        isinstance(error, DBAPIError) and error.connection_invalidated)


def postgres_outage(stop_requested: threading.Event) -> Outage:
    return Outage("postgres_unavailable", is_postgres_outage, stop_requested)


def kafka_client(make: Callable[..., T], **configs: Any) -> T:
    """`make(**configs)`: a kafka-python consumer or admin client that leaves
    nothing behind when it cannot be made. kafka-python 3.0 starts a client's
    IO thread and its sockets before it first reaches a broker, and keeps
    them when it gives up: each try in an outage left a thread and five file
    descriptors, for good."""
    made: list[KafkaNetClient] = []

    def network(**client_configs: Any) -> KafkaNetClient:
        made.append(KafkaNetClient(**client_configs))
        return made[-1]

    try:
        return make(kafka_client=network, **configs)
    except BaseException:
        for client in made:
            client.close()
        raise
