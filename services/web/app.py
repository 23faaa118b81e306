"""The dashboard's HTTP API and pages: read-only, behind basic auth.

Every route answers GET only and needs user `admin` with DASHBOARD_PASSWORD.
The JSON API is what the page itself uses (static/dashboard.js); its OpenAPI
description is at /api/openapi.json. `/api/events` is a Server-Sent Events
stream that says `update` within a second of a batch stored in Postgres, so
the page reloads its numbers without reloading itself.
"""

import asyncio
import base64
import binascii
import datetime
import json
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParameter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from psycopg2.errors import UndefinedTable
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.web import queries
from services.web.health import KafkaUnavailable, WorkerHealth
from services.web.history import History
from services.web.metrics import CONTENT_TYPE_LATEST as OPENMETRICS
from services.web.metrics import exposition
from shared.logs import log
from shared.outages import is_postgres_outage

STATIC = Path(__file__).parent / "static"
USER = "admin"
# The longest range each query takes, by what it reads: top words sum every
# row of the range (15 minutes of 165 words a window: 15,000 rows); words
# per window read one row a window; a word's series one row a window, by the
# (word, window_start) index.
TOP_WORDS_RANGE = datetime.timedelta(minutes=15)
WORDS_PER_WINDOW_RANGE = datetime.timedelta(days=1)
SERIES_RANGE = datetime.timedelta(days=7)
DEFAULT_SPAN = datetime.timedelta(hours=1)  # of the charts over time, up to the latest complete window
EVENTS_EVERY_S = 1.0
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
                                 b" connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
HSTS = [(b"strict-transport-security", b"max-age=31536000")]  # a year, as browsers' preload lists ask


def moment(name: str) -> Any:
    """An optional time parameter."""
    return Query(None, alias=name, description="ISO 8601 with a time zone, e.g. 2026-11-20T10:00:00Z")


From, To, Since = moment("from"), moment("to"), moment("since")


T = TypeVar("T")
Window = tuple[datetime.datetime, datetime.datetime] | tuple[None, None]


class BadRequest(Exception):
    """A parameter FastAPI's types let through but the query cannot take."""


def create_app(engine: Engine, health: WorkerHealth, history: History, password: str, window_seconds: int,
               stopping: threading.Event) -> "BasicAuth":
    """The ASGI app over a read-only `engine`, the workers' `health` and its
    `history`; its event streams end once `stopping` is set. Endpoints answer JSONResponse
    themselves: FastAPI's encoder walks every value of a day of windows."""
    app = FastAPI(title="Dashboard API", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json",
                  description="Read-only: windowed word counts, alerts and worker health.")
    window = datetime.timedelta(seconds=window_seconds)

    def read(query: Callable[[Connection], T]) -> Awaitable[T]:
        """query(connection) on a read-only session, in the thread pool."""
        def run() -> T:
            with engine.connect() as connection:
                return query(connection)
        return run_in_threadpool(run)

    async def latest_window() -> Window:
        """(start, end) of the latest complete window, or (None, None)."""
        latest = await read(lambda c: queries.latest_complete_window(c, window_seconds))
        return (None, None) if latest is None else (latest, latest + window)

    async def hour_to_latest_window() -> Window:
        _, end = await latest_window()
        return (None, None) if end is None else (end - DEFAULT_SPAN, end)

    @app.get("/api/top-words", summary="The words counted most in a window or a range of windows")
    async def top_words(start: datetime.datetime | None = From, end: datetime.datetime | None = To,
                        minutes: int | None = Query(None, ge=1, le=15),
                        limit: int = Query(10, ge=1, le=100)) -> JSONResponse:
        """The windows that start in [from, to), at most 15 minutes; or those
        of the last `minutes` up to the end of the latest complete window;
        with neither, the latest complete window."""
        if minutes is not None and (start or end):
            raise BadRequest("give from and to, or minutes")
        start, end = _checked_range(start, end, TOP_WORDS_RANGE) or await latest_window()
        if minutes is not None and end is not None:
            start = end - datetime.timedelta(minutes=minutes)
        words = [] if start is None or end is None else await read(lambda c: queries.top_words(c, start, end, limit))
        return JSONResponse({"from": queries.iso(start), "to": queries.iso(end), "words": words})

    @app.get("/api/words/{word:path}/series", summary="One word's count per window")
    async def word_series(word: str = PathParameter(min_length=1, max_length=2000),
                          start: datetime.datetime | None = From,
                          end: datetime.datetime | None = To) -> JSONResponse:
        """Windows that start in [from, to), at most 7 days; by default the
        hour up to the latest complete window. Windows without the word are
        left out."""
        start, end = _checked_range(start, end, SERIES_RANGE) or await hour_to_latest_window()
        points = [] if start is None or end is None else await read(lambda c: queries.word_series(c, word, start, end))
        return JSONResponse({"word": word, "from": queries.iso(start), "to": queries.iso(end), "points": points})

    @app.get("/api/words-per-window", summary="All words counted per window")
    async def words_per_window(start: datetime.datetime | None = From,
                               end: datetime.datetime | None = To) -> JSONResponse:
        """Windows that start in [from, to), at most a day; by default the
        hour up to the latest complete window."""
        start, end = _checked_range(start, end, WORDS_PER_WINDOW_RANGE) or await hour_to_latest_window()
        points = [] if start is None or end is None else await read(lambda c: queries.words_per_window(c, start, end))
        return JSONResponse({"from": queries.iso(start), "to": queries.iso(end), "points": points})

    @app.get("/api/alerts", summary="Alerts raised, newest first")
    async def alerts(since_id: int = Query(0, ge=0), since: datetime.datetime | None = Since,
                     limit: int = Query(50, ge=1, le=500)) -> JSONResponse:
        """Alerts with an id above `since_id`, raised at or after `since`."""
        _require_zone(since=since)
        after = since or datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return JSONResponse({"alerts": await read(lambda c: queries.alerts(c, since_id, after, limit))})

    @app.get("/api/dead-letters", summary="Records the workers skipped: counts by reason, the newest first")
    async def dead_letters(hours: int = Query(24, ge=1, le=24 * 366),
                           limit: int = Query(20, ge=1, le=500)) -> JSONResponse:
        """The dead letters skipped in the last `hours`: how many per worker
        and reason, and the newest `limit` of them (a value's first bytes, escaped)."""
        since = _now() - datetime.timedelta(hours=hours)
        counts, latest = await read(lambda c: (queries.dead_letter_counts(c, since),
                                               queries.dead_letters(c, since, limit)))
        return JSONResponse({"since": queries.iso(since), "counts": counts, "latest": latest})

    @app.get("/api/health", summary="Each worker's consumer group: lag, copies, last commit")
    async def worker_health() -> JSONResponse:
        return JSONResponse({"workers": await run_in_threadpool(health.read)})

    @app.get("/api/history", summary="Each worker's lag and batch durations over the last hour")
    async def worker_history() -> JSONResponse:
        """Sampled from Kafka by this web process every `every_s`: a restarted
        one begins an empty hour. A lag of null: Kafka did not answer."""
        return JSONResponse({"every_s": history.every_s, "span_s": history.span_s, "workers": [
            {"worker": worker["worker"],
             "lag": [{"at": _iso(at), "lag": lag} for at, lag in worker["lag"]],
             "batches": [{"at": _iso(at), "batch_ms": batch_ms} for at, batch_ms in worker["batches"]]}
            for worker in history.read()]})

    @app.get("/api/events", summary="Server-Sent Events: `update` when new results are stored")
    async def events(request: Request) -> StreamingResponse:
        return StreamingResponse(_updates(request, read, stopping), media_type="text/event-stream")

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """The OpenMetrics text: what failed to answer is left out, and said so."""
        try:
            workers = await run_in_threadpool(health.read)
        except KafkaUnavailable:
            workers = None
        alerts: list[Any] | None
        letters: list[dict] | None
        try:
            alerts, letters = await read(lambda c: (queries.alert_totals(c), queries.dead_letter_counts(c)))
        except DBAPIError as error:
            if not _not_ready(error):
                raise
            alerts = letters = None
        return Response(exposition(workers, alerts, letters), media_type=OPENMETRICS)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in error.errors())
        return JSONResponse({"error": problems}, status_code=400)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, error: BadRequest) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=400)

    @app.exception_handler(DBAPIError)
    async def postgres_not_ready(request: Request, error: DBAPIError) -> JSONResponse:
        if not _not_ready(error):
            raise error
        if is_postgres_outage(error):
            log("postgres_unavailable", path=request.url.path, error=type(error.orig).__name__)
            return JSONResponse({"error": "postgres unavailable"}, status_code=503)
        return JSONResponse({"error": "the schema is not migrated yet"}, status_code=503)

    @app.exception_handler(KafkaUnavailable)
    async def kafka_away(request: Request, error: KafkaUnavailable) -> JSONResponse:
        log("kafka_unavailable", path=request.url.path, error=str(error))
        return JSONResponse({"error": "kafka unavailable"}, status_code=503)

    return BasicAuth(app, password)


def _not_ready(error: DBAPIError) -> bool:
    """Postgres is away, or its schema is not migrated yet: a 503, not a bug."""
    return is_postgres_outage(error) or isinstance(error.orig, UndefinedTable)


def _require_zone(**moments: datetime.datetime | None) -> None:
    """A time without a zone would be read in the server's zone: refused."""
    naive = [name for name, moment in moments.items() if moment is not None and moment.tzinfo is None]
    if naive:
        raise BadRequest(f"{' and '.join(naive)} need{'s' if len(naive) == 1 else ''} a time zone (e.g. Z)")


def _checked_range(start: datetime.datetime | None, end: datetime.datetime | None,
                   most: datetime.timedelta) -> Window | None:
    """(start, end) as asked for, or None when neither was given."""
    if start is None and end is None:
        return None
    if start is None or end is None:
        raise BadRequest("give both from and to, or neither")
    _require_zone(**{"from": start, "to": end})
    if not start < end <= start + most:
        minutes = most / datetime.timedelta(minutes=1)
        spoken = f"{minutes / 60:g} hours" if minutes >= 60 else f"{minutes:g} minutes"
        raise BadRequest(f"to must be after from, by at most {spoken}")
    return start, end


async def _updates(request: Request, read: Callable[[Callable[[Connection], Any]], Awaitable[Any]],
                   stopping: threading.Event) -> AsyncIterator[str]:
    """`update` at once, then whenever the stored progress changes; a
    comment every 15 s keeps proxies (Heroku's router closes a connection
    idle for 55 s) from closing the stream. EventSource reconnects by itself
    after a stop."""
    marker, quiet_s = None, 0.0
    while not stopping.is_set() and not await request.is_disconnected():
        try:
            current = await read(queries.progress_marker)
        except DBAPIError as error:
            if not is_postgres_outage(error):
                raise
            current = marker  # Postgres is away: nothing new to tell
        if current != marker:
            marker, quiet_s = current, 0.0
            yield f"event: update\ndata: {json.dumps({'at': queries.iso(_now())})}\n\n"
        elif quiet_s >= 15:
            quiet_s = 0.0
            yield ": still here\n\n"
        await asyncio.sleep(EVENTS_EVERY_S)
        quiet_s += EVENTS_EVERY_S


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _iso(epoch_s: float) -> str | None:
    return queries.iso(datetime.datetime.fromtimestamp(epoch_s, datetime.timezone.utc))


class BasicAuth:
    """ASGI middleware: HTTPS where Heroku's router serves it, HTTP basic
    auth on every route, security headers on every response, GET and HEAD only.

    Behind the router (`X-Forwarded-Proto`), a request that came over plain
    HTTP is redirected to HTTPS before any credential is read, and every
    HTTPS answer tells the browser to use HTTPS only (HSTS), so that the
    password never travels in clear. A request without the header (`make
    run` on loopback) is served as it came."""

    def __init__(self, app: ASGIApp, password: str) -> None:
        self.app = app
        self.password = password.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        # The router's value is the last: a client's own comes before it.
        forwarded = headers.get(b"x-forwarded-proto", b"").split(b",")[-1].strip().lower()
        answer_headers = SECURITY_HEADERS + (HSTS if (forwarded or scope["scheme"].encode()) == b"https" else [])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + answer_headers
            await send(message)

        if forwarded == b"http":
            query = b"?" + scope["query_string"] if scope["query_string"] else b""
            location = b"https://" + headers.get(b"host", b"") + scope.get("raw_path", scope["path"].encode()) + query
            response: Response = Response(status_code=301, headers={"Location": location.decode("latin-1")})
        elif not self._authorized(headers.get(b"authorization", b"")):
            response = JSONResponse({"error": "authentication required"}, status_code=401,
                                    headers={"WWW-Authenticate": 'Basic realm="dashboard", charset="UTF-8"'})
        elif scope["method"] not in ("GET", "HEAD"):
            response = JSONResponse({"error": "read-only"}, status_code=405, headers={"Allow": "GET, HEAD"})
        else:
            return await self.app(scope, receive, send_with_headers)
        await response(scope, receive, send_with_headers)

    def _authorized(self, header: bytes) -> bool:
        scheme, _, encoded = header.partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        # Both compared in constant time, and both always: no timing tells which was wrong.
        return secrets.compare_digest(user, USER.encode()) & secrets.compare_digest(password, self.password)
