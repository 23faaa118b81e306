"""The last hour of each worker's lag and batch durations, for the
dashboard's small charts.

Kept in the web process's memory, sampled from Kafka every EVERY_S by a
thread of its own: nothing is written anywhere, and it is bounded (an hour
of samples a worker). A restarted web process begins an empty hour. Why
here and not in Kafka or a table: docs/operations.md, "The dashboard".

Threads: the sampling thread calls `add`; the API's threads call `read`.
Both hold the lock for a copy, never for I/O.
"""

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

SPAN_S = 3600
EVERY_S = 10


@dataclass
class _Worker:
    lag: deque[tuple[float, int | None]]  # (sampled at, lag); None: Kafka did not answer
    batches: deque[tuple[float, int]]  # (committed at, batch ms): at most one a sample


class History:
    def __init__(self, span_s: float = SPAN_S, every_s: float = EVERY_S) -> None:
        self.span_s = span_s
        self.every_s = every_s
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}

    def add(self, now: float, workers: list[dict[str, Any]] | None) -> None:
        """One sample: each worker's health (services.web.health), or None
        when Kafka did not answer (a gap in every line). A batch is added
        once, when a worker's newest commit is one not seen before."""
        with self._lock:
            for worker in workers if workers is not None else []:
                kept = self._kept(worker["worker"])
                kept.lag.append((now, worker["lag"]))
                at, batch_ms = worker["last_commit_at"], worker["last_batch_ms"]
                if at is not None and batch_ms is not None and (not kept.batches or at > kept.batches[-1][0]):
                    kept.batches.append((at, batch_ms))
            if workers is None:
                for kept in self._workers.values():
                    kept.lag.append((now, None))
            for kept in self._workers.values():
                for points in (kept.lag, kept.batches):
                    while points and points[0][0] < now - self.span_s:
                        points.popleft()

    def read(self) -> list[dict[str, Any]]:
        """Per worker, its lag samples and its batches, oldest first."""
        with self._lock:
            return [{"worker": name, "lag": list(kept.lag), "batches": list(kept.batches)}
                    for name, kept in self._workers.items()]

    def _kept(self, name: str) -> _Worker:
        if name not in self._workers:
            # A sample every every_s over the span, and a few more: late rounds never push one out early.
            most = int(self.span_s / self.every_s) + 10
            self._workers[name] = _Worker(deque(maxlen=most), deque(maxlen=most))
        return self._workers[name]
