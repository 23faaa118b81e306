"""The `web` process over a full week: 10,000,000 rows in windowed_counts
(7 days of 10 s windows, 165 words each from a 50,000-word vocabulary) and
100,000 alerts. Each API endpoint is called 200 times, one call at a time,
each with other parameters (a random window, range, word); reported: p50 and
p99 of the response time as the client sees it, and the process's peak RSS
(target, issue 17: p99 under 100 ms; under 512 MB)."""

import base64
import datetime
import random
import socket
import tempfile
import time
import urllib.request

from sqlalchemy import text

from benchmarks.harness import local_stack, migrated_engine, percentile, report
from devstack.local_stack import wait_until
from devstack.processes import MeasuredWorker
from services.aggregator.tables import FILL_WINDOW_TOTALS

WINDOWS, WORDS_PER_WINDOW, VOCABULARY, ALERTS = 60_480, 165, 50_000, 100_000
CALLS = 200
PASSWORD = "bench"
END = 1_795_000_000  # the newest window ends here (2026-11-18)
START = END - WINDOWS * 10

FILL_COUNTS = """
    INSERT INTO windowed_counts (window_start, window_end, word, count)
    SELECT to_timestamp(:start + w * 10), to_timestamp(:start + w * 10 + 10),
           'word' || ((w * 7 + k * 307) % :vocabulary), 1 + 1000 / (k + 1)
    FROM generate_series(0, :windows - 1) AS w, generate_series(0, :per_window - 1) AS k"""
FILL_ALERTS = """
    INSERT INTO alert_outbox (user_id, window_start, severity, payload, created_at, published_at)
    SELECT 'user' || (i % 5000), to_timestamp(:start + (i % :windows) * 10),
           CASE WHEN i % 2 = 0 THEN 'email' ELSE 'urgent' END,
           json_build_object('user', 'user' || (i % 5000), 'window_start', '2026-11-18T00:00:00Z',
                             'window_end', '2026-11-18T00:00:10Z', 'count', 101,
                             'severity', CASE WHEN i % 2 = 0 THEN 'email' ELSE 'urgent' END,
                             'threshold', 100)::text,
           to_timestamp(:start + i * 6), to_timestamp(:start + i * 6)
    FROM generate_series(0, :alerts - 1) AS i"""


def iso(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def paths(rng):
    """Per endpoint, a function giving one call's path."""
    def window():
        return START + rng.randrange(WINDOWS - 360) * 10

    def word():
        return f"word{rng.randrange(VOCABULARY)}"

    return {
        "top_words_latest": lambda: "/api/top-words",
        "top_words_15min": lambda: (lambda s: f"/api/top-words?from={iso(s)}&to={iso(s + 900)}")(window()),
        "word_series_week": lambda: f"/api/words/{word()}/series?from={iso(START)}&to={iso(END)}",
        "words_per_window_day": lambda: (lambda s: f"/api/words-per-window?from={iso(s)}&to={iso(s + 86400)}")(
            window()),
        "alerts_latest": lambda: "/api/alerts?limit=50",
        "alerts_since": lambda: f"/api/alerts?since={iso(START + rng.randrange(ALERTS) * 6)}&limit=50",
        "health": lambda: "/api/health",
        "metrics": lambda: "/metrics",
    }


def main():
    with local_stack() as stack, tempfile.TemporaryDirectory() as folder:
        stack.broker.create_topics("", partitions=4)
        engine = migrated_engine(stack)
        began = time.monotonic()
        with engine.begin() as connection:
            connection.execute(text(FILL_COUNTS), {"start": START, "vocabulary": VOCABULARY,
                                                   "windows": WINDOWS, "per_window": WORDS_PER_WINDOW})
            connection.execute(text(FILL_ALERTS), {"start": START, "windows": WINDOWS, "alerts": ALERTS})
            connection.execute(text(FILL_WINDOW_TOTALS))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM ANALYZE windowed_counts"))
            connection.execute(text("VACUUM ANALYZE alert_outbox"))
            rows = connection.execute(text("SELECT count(*) FROM windowed_counts")).scalar()
        fill_s = time.monotonic() - began
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        web = MeasuredWorker("services.web", {**stack.environment(), "PORT": str(port),
                                              "DASHBOARD_PASSWORD": PASSWORD}, f"{folder}/web.log")
        auth = "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()

        def call(path):
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": auth})
            began = time.perf_counter()
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                assert response.status == 200, path
            return time.perf_counter() - began

        def answers(path):
            try:
                return call(path) > 0
            except OSError:  # not listening yet, or a 503
                return False

        wait_until(lambda: answers("/api/alerts?limit=1"), 60, "the web process")
        # A new broker makes its group coordinator on the first group request: 503 until then.
        wait_until(lambda: answers("/api/health"), 60, "the workers' health")
        rng = random.Random(7)
        for endpoint, path in paths(rng).items():
            for _ in range(5):  # warm: the first calls build the pool's connections
                call(path())
            times = [call(path()) for _ in range(CALLS)]
            report("web", endpoint=endpoint, calls=CALLS, p50_ms=1000 * percentile(times, 0.5),
                   p99_ms=1000 * percentile(times, 0.99), rows=rows, fill_s=fill_s)
        report("web", peak_rss_mb=web.peak_rss // 2**20)
        web.stop()
