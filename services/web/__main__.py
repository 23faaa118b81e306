"""web: the dashboard and its read-only JSON API on $PORT. See app.py."""

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType

import uvicorn
from sqlalchemy import Engine, create_engine

from services.web.app import create_app
from services.web.dead_letter_keeper import DeadLetterKeeper
from services.web.health import KafkaUnavailable, WorkerHealth
from services.web.history import History
from services.web.tables import MIGRATIONS
from shared import background
from shared import config as config_module
from shared.config import ConfigError
from shared.logs import log
from shared.migrations import migrate
from shared.outages import StopRequested, postgres_outage

# Heroku sends SIGKILL 30 s after SIGTERM; event streams end within a second
# of a stop, other responses get this long.
GRACEFUL_STOP_S = 5
# Every session of the dashboard reads only, and no query of it runs long.
READ_ONLY = "-c default_transaction_read_only=on -c statement_timeout=5000"


class Server(uvicorn.Server):
    """uvicorn's server, which tells the app's event streams to end when a
    stop begins: uvicorn waits for open responses before it exits."""

    def __init__(self, stopping: threading.Event, config: uvicorn.Config):
        super().__init__(config)
        self.stopping = stopping
        self.refusal: ConfigError | None = None  # Postgres refused TLS: the process ends with it

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopping.set()
        super().handle_exit(sig, frame)


def migrate_in_background(engine: Engine, server: Server, then: Callable[[], object]) -> None:
    """The schema the dashboard reads, made as the workers make it: in a
    thread, so that $PORT is bound at once (Heroku allows 60 s) even while
    Postgres is away; until then the API answers 503; `then()` once it is
    made. A Postgres that refuses TLS ends the server, and the process with
    that one line."""
    def run() -> None:
        try:
            postgres_outage(server.stopping).retry(lambda: migrate(engine, MIGRATIONS))
        except StopRequested:
            return
        except ConfigError as refusal:
            server.refusal = refusal
            server.should_exit = True  # uvicorn's own flag: the server stops as on a signal
            return
        then()
    background.thread(run, name="migrate")


def read_only_engine(database_url: str) -> Engine:
    return create_engine(database_url, pool_pre_ping=True, pool_size=4, max_overflow=4,
                         connect_args={"options": READ_ONLY})


def password_and_port(environ: Mapping[str, str]) -> tuple[str, int]:
    password = environ.get("DASHBOARD_PASSWORD", "")
    if not password.strip():
        raise ConfigError("DASHBOARD_PASSWORD", "is not set")
    port = environ.get("PORT", "5000").strip()
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError("PORT", "must be a TCP port number")
    return password, int(port)


def sample(health: WorkerHealth, history: History) -> None:
    """One sample of each worker's health for the charts; a gap while Kafka is away."""
    try:
        workers = health.read()
    except KafkaUnavailable:
        workers = None
    history.add(time.time(), workers)


def main() -> None:
    password, port = password_and_port(os.environ)
    config = config_module.load(needs_database=True)
    stopping = threading.Event()
    # uvicorn stops on SIGTERM and SIGINT, then raises the signal again for
    # the handler it found: this one, so the process ends below and exits 0.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    engine = read_only_engine(config.database_url)
    assert config.kafka is not None  # load() parsed it (needs_kafka)
    health = WorkerHealth(config.kafka)
    history = History()
    background.every(history.every_s, lambda: sample(health, history), name="history",
                     failure_event="history_failed", stop_requested=stopping)
    app = create_app(engine, health, history, password, config.window_seconds, stopping)
    server = Server(stopping, uvicorn.Config(
        app, host="0.0.0.0", port=port, access_log=False, log_level="warning",  # noqa: S104 - Heroku's router
        timeout_graceful_shutdown=GRACEFUL_STOP_S, proxy_headers=True, server_header=False))
    # The one engine that writes: the migrations, then the dead-letter keeper.
    writer = create_engine(config.database_url, pool_pre_ping=True, pool_size=1, max_overflow=1)
    keeper = DeadLetterKeeper(writer, config.kafka, config.retention_hours, stopping)
    migrate_in_background(writer, server, then=keeper.start)
    log("start", app="web", port=port)
    server.run()
    stopping.set()
    health.close()
    engine.dispose()
    writer.dispose()
    if server.refusal:
        raise server.refusal
    log("stopped", app="web")


if __name__ == "__main__":
    main()
