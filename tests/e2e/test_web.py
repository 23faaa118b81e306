"""The `web` process: its JSON API against real Postgres and a real broker,
its page in a real headless browser, and its auth."""

import base64
import datetime
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.exc import InternalError

from devstack.kafka_io import produce
from devstack.local_stack import ROOT, free_port, wait_until
from devstack.postgres import postgres_url, stored_offsets
from services.web.__main__ import read_only_engine
from shared import commit_note, dead_letters
from shared.config import load
from shared.dead_letters import DeadLetter
from tests.checks import heroku_like
from tests.clock import T0

PASSWORD = "pw-" + secrets.token_hex(8)


@dataclass
class Web:
    base: str
    process: object

    def get(self, path, password=PASSWORD, method="GET"):
        """(status, headers, parsed JSON or text)."""
        request = urllib.request.Request(self.base + path, method=method)
        if password is not None:
            token = base64.b64encode(f"admin:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, headers, body = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, body = error.code, error.headers, error.read()
        is_json = headers.get("content-type", "").startswith("application/json")
        return status, headers, json.loads(body) if is_json else body.decode()

    def json(self, path):
        status, _, body = self.get(path)
        assert status == 200, (path, status, body)
        return body


@pytest.fixture
def web(workers, release, database_url, postgres_cut):
    port = free_port()
    process = workers.start("services.web", PORT=str(port), DASHBOARD_PASSWORD=PASSWORD,
                            DATABASE_URL=postgres_cut.through(database_url))
    served = Web(f"http://127.0.0.1:{port}", process)

    def answers():
        assert process.process.poll() is None, process.output()
        try:
            return served.get("/api/alerts")[0] == 200
        except OSError:
            return False

    wait_until(answers, 60, "the web process to answer")
    return served


def iso(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def store_counts(database_url, counts, consumer="aggregator-app", next_offset=1):
    """{(window_start epoch s, word): count} into windowed_counts, and the
    aggregator's stored offsets moved, as one of its batches does."""
    engine = create_engine(postgres_url(database_url))
    with engine.begin() as connection:
        for (start, word), count in counts.items():
            connection.execute(text(
                "INSERT INTO windowed_counts VALUES (to_timestamp(:s), to_timestamp(:s + 10), :w, :c)"
                " ON CONFLICT (window_start, word) DO UPDATE SET count = windowed_counts.count + EXCLUDED.count"),
                {"s": start, "w": word, "c": count})
            connection.execute(text(
                "INSERT INTO window_totals VALUES (to_timestamp(:s), :c)"
                " ON CONFLICT (window_start) DO UPDATE SET words = window_totals.words + EXCLUDED.words"),
                {"s": start, "c": count})
        connection.execute(text(
            "INSERT INTO kafka_offsets VALUES (:consumer, 'words', 0, :offset) ON CONFLICT"
            " (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"),
            {"consumer": consumer, "offset": next_offset})
    engine.dispose()


def store_alert(database_url, user, window_start, count, severity, threshold, delivered=False):
    payload = json.dumps({"user": user, "window_start": iso(window_start), "window_end": iso(window_start + 10),
                          "count": count, "severity": severity, "threshold": threshold})
    engine = create_engine(postgres_url(database_url))
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO alert_outbox (user_id, window_start, severity, payload, delivered_at)"
            " VALUES (:user, to_timestamp(:start), :severity, :payload, CASE WHEN :delivered THEN now() END)"),
            {"user": user, "start": window_start, "severity": severity, "payload": payload, "delivered": delivered})
    engine.dispose()


COUNTS = {(T0, "alpha"): 5, (T0, "beta"): 9, (T0, "gamma"): 1,
          (T0 + 10, "alpha"): 7, (T0 + 10, "beta"): 2, (T0 + 10, "zeta"): 30,
          (T0 - 3600, "alpha"): 100, (T0 - 3600, "a/b"): 4}  # an hour before: outside the default range


def test_the_api_answers_what_postgres_holds(web, database_url):
    store_counts(database_url, COUNTS)
    store_alert(database_url, "mallory", T0, 51, "email", 50, delivered=True)
    store_alert(database_url, "mallory", T0, 101, "urgent", 100)

    latest = web.json("/api/top-words")
    assert (latest["from"], latest["to"]) == (iso(T0 + 10), iso(T0 + 20))
    assert latest["words"] == [{"word": "zeta", "count": 30}, {"word": "alpha", "count": 7},
                               {"word": "beta", "count": 2}]
    both = web.json(f"/api/top-words?from={iso(T0)}&to={iso(T0 + 20)}&limit=2")
    assert both["words"] == [{"word": "zeta", "count": 30}, {"word": "alpha", "count": 12}]
    minute = web.json("/api/top-words?minutes=1&limit=3")  # the minute up to the latest window's end
    assert (minute["from"], minute["to"]) == (iso(T0 + 20 - 60), iso(T0 + 20))
    assert minute["words"] == [{"word": "zeta", "count": 30}, {"word": "alpha", "count": 12},
                               {"word": "beta", "count": 11}]

    series = web.json("/api/words/alpha/series")
    assert (series["from"], series["to"]) == (iso(T0 + 20 - 3600), iso(T0 + 20))
    assert series["points"] == [{"window_start": iso(T0), "count": 5}, {"window_start": iso(T0 + 10), "count": 7}]
    week = web.json(f"/api/words/alpha/series?from={iso(T0 - 7200)}&to={iso(T0 + 20)}")
    assert [p["count"] for p in week["points"]] == [100, 5, 7]
    assert web.json("/api/words/%C3%A9t%C3%A9/series")["points"] == []
    slashed = web.json(f"/api/words/a%2Fb/series?from={iso(T0 - 7200)}&to={iso(T0 + 20)}")
    assert slashed["word"] == "a/b" and slashed["points"] == [{"window_start": iso(T0 - 3600), "count": 4}]

    volume = web.json("/api/words-per-window")
    assert volume["points"] == [{"window_start": iso(T0), "words": 15}, {"window_start": iso(T0 + 10), "words": 39}]

    alerts = web.json("/api/alerts")["alerts"]
    assert [(a["severity"], a["count"], a["threshold"], a["channel"], a["delivery"]) for a in alerts] == [
        ("urgent", 101, 100, "pagerduty", "pending"), ("email", 51, 50, "email", "delivered")]
    assert alerts[0]["user"] == "mallory" and alerts[0]["window_start"] == iso(T0)
    assert web.json(f"/api/alerts?since_id={alerts[1]['id']}")["alerts"] == alerts[:1]
    assert web.json("/api/alerts?since=2999-01-01T00:00:00Z")["alerts"] == []


@heroku_like
def an_aggregator_42_s_behind(stack, prefix):
    """7 words on partition 0 of `words` and 3 on partition 1, and a member
    of the aggregator's group that committed offset 5 of partition 0 42 s ago."""
    produce(stack, prefix + "words", [b"w"] * 7, partition=0)
    produce(stack, prefix + "words", [b"w"] * 3, partition=1)
    kafka = load(stack.environment(prefix)).kafka
    member = KafkaConsumer(group_id=prefix + "aggregator-app", enable_auto_commit=False,
                           **kafka.kafka_python_kwargs())
    # Joined before its metadata named the topic's partitions, a member was
    # once assigned none (the range assignor found no partitions to give).
    wait_until(lambda: len(member.partitions_for_topic(prefix + "words")) == 2, 60, "the topic's metadata")
    member.subscribe([prefix + "words"])
    wait_until(lambda: member.poll(200) is not None and member.assignment(), 60, "the group's assignment")
    committed_at = time.time() - 42
    note = commit_note.write(int(committed_at * 1000), batch_ms=1250)  # as a worker's batch commits
    member.commit({TopicPartition(prefix + "words", 0): OffsetAndMetadata(5, note, -1)})
    return member


def test_the_health_is_what_the_groups_hold_in_kafka(web, stack, prefix):
    member = an_aggregator_42_s_behind(stack, prefix)

    def aggregator():
        return next(w for w in web.json("/api/health")["workers"] if w["worker"] == "aggregator")

    health = wait_until(lambda: (a := aggregator())["partitions"][0]["committed"] == 5 and a, 10, "the commit")
    assert health["group"] == prefix + "aggregator-app" and health["copies"] == 1
    assert health["partitions"] == [{"partition": 0, "committed": 5, "end": 7, "lag": 2},
                                    {"partition": 1, "committed": None, "end": 3, "lag": 3}]
    assert health["lag"] == 5 and 42 <= health["last_commit_age_s"] < 60 and health["last_batch_ms"] == 1250
    member.close()
    others = {w["worker"]: w for w in web.json("/api/health")["workers"]}
    assert others["text-processor"]["copies"] == 0 and others["text-processor"]["last_commit_age_s"] is None


def test_metrics_are_what_kafka_and_postgres_hold_in_openmetrics_behind_the_password(
        web, stack, prefix, database_url):
    member = an_aggregator_42_s_behind(stack, prefix)
    store_alert(database_url, "alice", T0, 51, "email", 50, delivered=True)
    store_alert(database_url, "alice", T0, 101, "urgent", 100)
    assert web.get("/metrics", password=None)[0] == 401

    def scraped():
        status, headers, body = web.get("/metrics")
        assert status == 200 and headers["content-type"].startswith("application/openmetrics-text"), body
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(body) for sample in family.samples}

    aggregator = (("worker", "aggregator"),)
    read = wait_until(lambda: (m := scraped()).get(("streams_copies", aggregator)) == 1 and m, 10, "the member")
    assert read["streams_committed_offset", (("partition", "0"), *aggregator)] == 5
    assert read["streams_consumer_lag_records", (("partition", "0"), *aggregator)] == 2
    assert read["streams_consumer_lag_records", (("partition", "1"), *aggregator)] == 3
    assert 42 <= read["streams_last_commit_age_seconds", aggregator] < 60
    assert read["streams_last_batch_seconds", aggregator] == 1.25
    assert read["streams_alerts_raised_total", (("severity", "email"),)] == 1
    assert read["streams_alerts_raised_total", (("severity", "urgent"),)] == 1
    assert read["streams_alerts_delivered_total", (("channel", "email"), ("severity", "email"))] == 1
    assert read["streams_alerts_delivered_total", (("channel", "pagerduty"), ("severity", "urgent"))] == 0
    assert (read["streams_kafka_up", ()], read["streams_postgres_up", ()]) == (1, 1)
    member.close()


def store_dead_letters(web_env_kafka, database_url, prefix):
    """One dead letter in Postgres (an aggregator's, as its batch stores it)
    and one on the topic, sent twice (a text processor's re-sent batch),
    for the web's keeper to store once."""
    now = datetime.datetime.now(datetime.timezone.utc)
    word = DeadLetter("aggregator", prefix + "words", 1, 5, T0 * 1000, "bad_key", now, None, b"nul\x00\xffword",
                      None, 10)
    line = DeadLetter("text-processor", prefix + "textlines", 0, 9, T0 * 1000, "too_long", now, b"k",
                      b"x" * 5000, 1, 5000)
    engine = create_engine(postgres_url(database_url))
    with engine.begin() as connection:
        dead_letters.store(connection, [word])
    engine.dispose()
    dead_letters.send(web_env_kafka, [line], threading.Event())
    dead_letters.send(web_env_kafka, [line], threading.Event())


@heroku_like  # the keeper reads the prefixed topic over TLS, under the prefix's ACLs
def test_dead_letters_from_postgres_and_from_the_topic_are_shown_once_counted_and_escaped(
        web, stack, prefix, database_url):
    store_dead_letters(load(stack.environment(prefix)).kafka, database_url, prefix)

    def shown():
        body = web.json("/api/dead-letters?hours=1")
        return len(body["latest"]) == 2 and body
    body = wait_until(shown, 30, "both dead letters, the topic's kept by the web process")
    assert body["counts"] == [{"worker": "aggregator", "reason": "bad_key", "letters": 1},
                              {"worker": "text-processor", "reason": "too_long", "letters": 1}]
    by_worker = {letter["worker"]: letter for letter in body["latest"]}
    assert by_worker["aggregator"]["value_start"] == "nul\\x00\\xffword"
    assert (by_worker["aggregator"]["topic"], by_worker["aggregator"]["offset"]) == (prefix + "words", 5)
    assert by_worker["text-processor"]["value_start"] == "x" * 120
    assert by_worker["text-processor"]["value_bytes"] == 5000
    _, _, metrics = web.get("/metrics")
    read = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(metrics) for sample in family.samples}
    assert read["streams_dead_letters_total", (("reason", "too_long"), ("worker", "text-processor"))] == 1


# A fixed instant, not tests.clock: these calls store nothing, and every xdist
# worker must collect the same test ids.
AT = int(datetime.datetime(2026, 11, 20, 10, tzinfo=datetime.timezone.utc).timestamp())


@pytest.mark.parametrize("path, problem", [
    ("/api/top-words?limit=0", "limit"),
    ("/api/top-words?limit=ten", "limit"),
    ("/api/top-words?minutes=16", "minutes"),
    (f"/api/top-words?minutes=5&from={iso(AT)}&to={iso(AT + 10)}", "or minutes"),
    (f"/api/top-words?from={iso(AT)}", "both"),
    (f"/api/top-words?from={iso(AT)}&to={iso(AT + 901)}", "at most 15 minutes"),
    (f"/api/words-per-window?from={iso(AT)}&to={iso(AT + 86401)}", "at most 24 hours"),
    (f"/api/top-words?from={iso(AT + 10)}&to={iso(AT)}", "after"),
    ("/api/top-words?from=2026-11-20T10:00:00&to=2026-11-20T10:00:10", "time zone"),
    ("/api/words-per-window?from=yesterday&to=today", "from"),
    (f"/api/words/x/series?from={iso(AT)}&to={iso(AT + 8 * 86400)}", "at most"),
    ("/api/alerts?since_id=-1", "since_id"),
    ("/api/alerts?limit=501", "limit"),
    ("/api/words/" + "x" * 2001 + "/series", "word"),
])
def test_a_bad_parameter_is_a_clear_400(web, path, problem):
    status, _, body = web.get(path)
    assert status == 400 and problem in body["error"], body


def test_every_route_wants_the_password_and_sends_security_headers(web):
    for path in ("/", "/static/dashboard.js", "/api/top-words", "/api/health", "/api/history", "/api/events",
                 "/api/dead-letters", "/api/openapi.json"):
        for password in (None, "wrong", PASSWORD + "x"):
            status, headers, _ = web.get(path, password=password)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), (path, password)
    status, headers, page = web.get("/")
    assert status == 200 and "dashboard.js" in page
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"] and "<script>" not in page
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    assert web.get("/api/alerts", method="POST")[0] == 405
    paths = web.json("/api/openapi.json")["paths"]
    assert sorted(paths) == ["/api/alerts", "/api/dead-letters", "/api/events", "/api/health", "/api/history",
                             "/api/top-words", "/api/words-per-window", "/api/words/{word}/series"]
    assert all(list(operations) == ["get"] for operations in paths.values())
    for _, _, body in (web.get("/api/health"), web.get("/api/openapi.json"), web.get("/")):
        assert PASSWORD not in json.dumps(body)


def test_behind_herokus_router_plain_http_is_sent_to_https_and_https_pins_itself(web):
    """Heroku's router ends TLS and says which scheme the browser used in
    X-Forwarded-Proto, its value last; the dashboard never asks for the
    password over plain HTTP."""
    def answer(path, forwarded=None, password=None):
        connection = http.client.HTTPConnection(web.base.removeprefix("http://"), timeout=10)
        headers = {"Host": "dash.example.test"}
        if forwarded:
            headers["X-Forwarded-Proto"] = forwarded
        if password:
            headers["Authorization"] = "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        connection.close()
        return response.status, response.headers

    for forwarded in ("http", "https, http"):
        status, headers = answer("/api/top-words?limit=3", forwarded)
        assert (status, headers["Location"]) == (301, "https://dash.example.test/api/top-words?limit=3")
        assert "WWW-Authenticate" not in headers and "Strict-Transport-Security" not in headers
    for password, expected in ((None, 401), (PASSWORD, 200)):
        status, headers = answer("/", "http, https", password)
        assert status == expected and headers["Strict-Transport-Security"] == "max-age=31536000"
    status, headers = answer("/", password=PASSWORD)  # loopback, no router: as it is
    assert status == 200 and "Strict-Transport-Security" not in headers


def test_its_postgres_sessions_cannot_write(database_url, release):
    engine = read_only_engine(postgres_url(database_url))
    with pytest.raises(InternalError, match="read-only transaction"):
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM windowed_counts"))
    engine.dispose()


def test_it_refuses_to_start_without_a_password():
    done = subprocess.run([sys.executable, "-m", "services.web"], cwd=ROOT, capture_output=True, text=True,
                          env={"DATABASE_URL": "postgres://u:secret@localhost:1/db", "KAFKA_URL": "kafka://x:1"},
                          timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == ["config error: DASHBOARD_PASSWORD is not set"]


def test_it_stops_within_30_s_of_sigterm_with_an_event_stream_open(web):
    request = urllib.request.Request(web.base + "/api/events")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as stream:
        assert stream.readline().startswith(b"event: update")
        began = time.monotonic()
        web.process.signal(signal.SIGTERM)
        assert web.process.wait(30) == 0
    assert time.monotonic() - began < 30
    assert "event=stopped" in web.process.output() and "Traceback" not in web.process.output()


def test_an_outage_answers_503_and_the_process_rides_it_out(web, stack, postgres_cut):
    postgres_cut.cut()
    try:
        wait_until(lambda: web.get("/api/alerts")[0] == 503, 30, "a 503 while Postgres is down")
        assert web.get("/api/top-words")[2] == {"error": "postgres unavailable"}
    finally:
        postgres_cut.restore()
    wait_until(lambda: web.get("/api/alerts")[0] == 200, 60, "answers once Postgres is back")

    # On a new broker the first call creates the offsets topic (503 meanwhile).
    wait_until(lambda: web.get("/api/health")[0] == 200, 60, "the health before the outage")
    stack.broker.kill()
    try:
        wait_until(lambda: web.get("/api/health")[0] == 503, 60, "a 503 while the broker is down")
        assert web.get("/api/health")[2] == {"error": "kafka unavailable"}
        assert web.get("/api/alerts")[0] == 200, "what Postgres holds is still served"
    finally:
        stack.broker.start()
    wait_until(lambda: web.get("/api/health")[0] == 200, 90, "health once the broker is back")

    output = web.process.output()
    assert web.process.process.poll() is None, output
    assert "event=postgres_unavailable" in output and "event=kafka_unavailable" in output
    assert "Traceback" not in output


# A Chromium on PATH (Debian's, which .ci/run installs), CHROMIUM if set, or
# else the one Playwright downloads (`python -m playwright install chromium`,
# as app.json's Heroku CI test-setup runs it).
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def bar_labels(page):
    """The top-words chart's bars as the page shows them: [word, count]."""
    return page.eval_on_selector_all(
        "#top-chart g", "bars => bars.map(bar => [...bar.querySelectorAll('text')].map(t => t.textContent))")


SCREENSHOTS = ROOT / "build" / "screenshots"  # kept after the run, to look at


def overflowing(page):
    """[heading, scrollWidth, clientWidth] of each card, and of the page, wider than it shows."""
    return page.evaluate("""() => [...document.querySelectorAll("section"), document.documentElement]
        .filter((node) => node.scrollWidth > node.clientWidth)
        .map((node) => [(node.querySelector("h2") || node).tagName, node.scrollWidth, node.clientWidth])""")


DRAWN_AT_THEIR_WIDTH = """() => [...document.querySelectorAll("svg.chart")]
    .every((svg) => svg.viewBox.baseVal.width === Math.max(200, Math.round(svg.getBoundingClientRect().width)))"""


def tip_at(page, chart, x):
    """The hover label of a line chart, with the pointer `x` px from the left of its plot."""
    page.locator(f"{chart} .hit").hover(position={"x": x, "y": 20})
    return page.text_content(f"{chart} .tip text")


def test_the_page_shows_the_stored_numbers_and_each_new_batch_without_a_reload(
        web, workers, stack, prefix, database_url, tmp_path):
    from playwright.sync_api import sync_playwright

    aggregator = workers.start("services.aggregator")
    first = ["zeta"] * 30 + ["alpha"] * 7 + ["beta"] * 2
    produce(stack, prefix + "words", [w.encode() for w in first], [T0 * 1000 + i for i in range(len(first))])
    wait_until(lambda: stored_offsets(database_url) == len(first), 120, "the aggregator's first batch")
    # Ids that would stretch a table: one long, one in Japanese.
    store_alert(database_url, "user-" + "0123456789" * 6, T0, 60, "email", 50, delivered=True)
    store_alert(database_url, "東京のユーザー", T0, 75, "email", 50)
    store_alert(database_url, "mallory", T0, 101, "urgent", 100)
    window = "–".join(time.strftime("%H:%M:%S", time.gmtime(t)) for t in (T0, T0 + 10))  # in UTC
    store_dead_letters(load(stack.environment(prefix)).kafka, database_url, prefix)  # a long value too

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(http_credentials={"username": "admin", "password": PASSWORD},
                                      viewport={"width": 375, "height": 812})  # a phone
        page = context.new_page()
        problems = []
        page.on("console", lambda message: message.type == "error" and problems.append(message.text))
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.goto(web.base + "/")

        page.wait_for_selector('#top-chart g[data-word="zeta"]')
        assert bar_labels(page) == [["zeta", "30"], ["alpha", "7"], ["beta", "2"]]
        page.wait_for_selector("#alerts tr")
        assert page.inner_text("#alerts tr").split("\t") == ["mallory", window, "101", "urgent", "pending (pagerduty)"]
        # Locators, not wait_for_function: the page's CSP forbids the eval that one polls with.
        page.locator("#health tr", has_text="aggregator").wait_for()
        aggregator_row = page.inner_text("#health tr:nth-child(2)").split("\t")
        assert aggregator_row[:3] == ["aggregator", "1", "0"]

        page.locator("#dead-letters tr").nth(1).wait_for()
        rows = sorted(page.inner_text(f"#dead-letters tr:nth-child({n})").split("\t")[1:4] for n in (1, 2))
        assert rows == [["aggregator", "bad_key", f"{prefix}words 1:5"],
                        ["text-processor", "too_long", f"{prefix}textlines 0:9"]]

        page.fill("#word", "alpha")
        page.click("button")
        page.wait_for_selector("#series-chart circle")
        assert page.eval_on_selector_all("#series-chart circle", "cs => cs.map(c => +c.dataset.value)") == [7]

        page.evaluate("window.notReloaded = true")
        second = ["omega"] * 3 + ["alpha"] * 4
        produce(stack, prefix + "words", [w.encode() for w in second],
                [(T0 + 10) * 1000 + i for i in range(len(second))])
        # The seven words may land in two of the aggregator's batches: the page shows each.
        page.wait_for_selector('#top-chart g[data-word="alpha"][data-count="4"]', timeout=120_000)
        assert bar_labels(page) == [["alpha", "4"], ["omega", "3"]]
        page.locator("#series-chart circle").nth(1).wait_for()
        page.wait_for_selector('#volume-chart circle[data-value="7"]')
        assert page.evaluate("window.notReloaded") is True
        volume = page.eval_on_selector_all("#volume-chart circle", "cs => cs.map(c => +c.dataset.value)")
        assert volume == [39, 7]

        # A value read by pointing at it (or tapping): the nearest window's time and words.
        assert tip_at(page, "#volume-chart", 1) == f"{window[:8]}  39"
        plot_width = page.locator("#volume-chart .hit").bounding_box()["width"]
        assert tip_at(page, "#volume-chart", plot_width - 1) == f"{window[9:]}  7"

        # Top words over the last minute: both windows summed.
        page.select_option("#top-range", "1")
        page.wait_for_selector('#top-chart g[data-word="alpha"][data-count="11"]')
        assert bar_labels(page) == [["zeta", "30"], ["alpha", "11"], ["omega", "3"], ["beta", "2"]]

        # The aggregator's lag and batch durations, as this web process sampled them from Kafka.
        # Attached, not visible: a lag of 0 at every sample draws a flat line,
        # which has no height, and Playwright counts that as hidden.
        page.wait_for_selector("#lag-aggregator polyline", state="attached", timeout=60_000)
        page.wait_for_selector("#batch-aggregator circle", timeout=60_000)
        durations = page.eval_on_selector_all("#batch-aggregator circle", "cs => cs.map(c => +c.dataset.value)")
        assert all(ms > 0 for ms in durations)

        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for width, height in ((375, 812), (1280, 1100)):
            page.set_viewport_size({"width": width, "height": height})
            wait_until(lambda: page.evaluate(DRAWN_AT_THEIR_WIDTH), 10, f"the charts drawn again at {width} px")
            assert overflowing(page) == [], f"at {width} px"
            page.screenshot(path=SCREENSHOTS / f"dashboard-{width}.png", full_page=True)
        browser.close()
    assert problems == []
    assert aggregator.process.poll() is None
