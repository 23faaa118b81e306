"""Rows older than RETENTION_HOURS (by their window's start) deleted by a
thread, a few thousand per short transaction, so a full table never costs
Postgres its INSERT rights and a batch's transaction never waits long."""

import threading

from sqlalchemy import Engine, text

from shared import background
from shared.logs import log

ROWS_PER_DELETE = 5000
EVERY_SECONDS = 60

class Retention:
    def __init__(self, engine: Engine, tables: dict[str, str], hours: int, stop_requested: threading.Event) -> None:
        """`tables`: {table name: its delete statement, which deletes at most
        :rows rows older than :hours hours (each service's own, beside its
        worker)}. `hours` 0 keeps everything."""
        self.engine = engine
        self.tables = tables
        self.hours = hours
        self.stop_requested = stop_requested

    def start(self) -> None:
        if self.hours:
            background.every(EVERY_SECONDS, self.delete_old_rows, name="retention",
                             failure_event="retention_failed", stop_requested=self.stop_requested)

    def delete_old_rows(self) -> dict[str, int]:
        """Deletes what is past the retention; {table: rows deleted}."""
        deleted = {}
        for table, statement in self.tables.items():
            deleted[table] = 0
            while not self.stop_requested.is_set():
                with self.engine.begin() as connection:
                    count = connection.execute(text(statement), {"hours": self.hours,
                                                                 "rows": ROWS_PER_DELETE}).rowcount
                deleted[table] += count
                if count < ROWS_PER_DELETE:
                    break
            if deleted[table]:
                log("retention", table=table, deleted=deleted[table], hours=self.hours)
        return deleted
