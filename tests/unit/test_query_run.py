"""What each thread may do to a query run (shared.worker.query_run), and
what every exit path of a worker releases (shared.worker.runner): in-process,
with stand-ins for Spark's query and progress reports and for the member."""

import json
import threading
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql.streaming.listener import QueryProgressEvent

from shared.config import load
from shared.levers.json_listener import JsonReports
from shared.worker import KafkaSink, Worker, query_run, runner
from shared.worker.batch_size import BatchSize
from shared.worker.launch import Launched
from shared.worker.lifecycle import Ended
from shared.worker.query_run import BatchListener, QueryRun, Runs, stop_now
from shared.worker.stop_budget import StopBudget

TOPIC = "t.textlines"
RUN_A, RUN_B = "a7a0b3c4-2f4e-4c55-9a07-1d2e3f405a01", "b7a0b3c4-2f4e-4c55-9a07-1d2e3f405a02"  # Spark's run ids


class Member:
    """Records what the listener and the runs hand the group member."""

    def __init__(self):
        self.reports, self.durations, self.unread, self.begun, self.closed = [], [], [], [], False
        self.revoked_meanwhile = False  # a rebalance took the partitions while a run's query started

    def begin_run(self, run_id):
        if self.revoked_meanwhile:
            return False
        self.begun.append(run_id)
        return True

    def report(self, run_id, offsets, batch_ms):
        self.reports.append((run_id, offsets))
        self.durations.append(batch_ms)

    def report_unread(self, ranges):
        self.unread.append(ranges)

    def close(self):
        self.closed = True


def query(run_id):
    def stop():
        started.isActive = False
    started = SimpleNamespace(id=f"id-{run_id}", runId=run_id, lastProgress=None, isActive=True, stop=stop)
    return started


def report(run_id, batch_id, start, end, rows, took_ms=5):
    """A micro-batch's progress report as Spark gives it as JSON (a Kafka
    source; a first batch has no start)."""
    offsets = lambda offsets: {TOPIC: {str(p): o for p, o in offsets.items()}} if offsets else None
    return json.dumps({"progress": {
        "id": "c7a0b3c4-2f4e-4c55-9a07-1d2e3f405a03", "runId": run_id, "name": None,
        "timestamp": "2026-11-27T18:09:37.103Z", "batchId": batch_id, "batchDuration": 5, "numInputRows": rows,
        "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0, "durationMs": {"triggerExecution": took_ms},
        "stateOperators": [], "sink": {"description": "ForeachBatchSink", "numOutputRows": -1}, "observedMetrics": {},
        "sources": [{"description": f"KafkaV2[Assign[{TOPIC}-0]]", "startOffset": offsets(start),
                     "endOffset": offsets(end), "latestOffset": offsets(end), "numInputRows": rows,
                     "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0}]}})


def progress(run_id, batch_id, start, end, rows, took_ms=5):
    """That report as the listener gets it (shared.levers.json_listener.JsonReports)."""
    return QueryProgressEvent.fromJson(json.loads(report(run_id, batch_id, start, end, rows, took_ms))).progress


class JavaEvent:
    """A listener event as Py4J hands it over: a Java object with `json()`."""

    def __init__(self, text):
        self.text = text

    def json(self):
        return self.text


def started(runs, member, run_id, starting):
    run = QueryRun("echo", starting)
    runs.start(run, member, lambda: query(run_id))
    return run


def test_a_late_report_belongs_to_its_own_run_and_does_no_io_on_the_listener_thread(capsys):
    """A first batch is checked for lost records against where its own run
    began, even once the next run began elsewhere; the lookup itself is
    handed to the main thread (the listener must not block)."""
    runs, member = Runs(), Member()
    reports = JsonReports(BatchListener("echo", runs, member))
    started(runs, member, RUN_A, {0: 100})
    started(runs, member, RUN_B, {0: 180})  # a rebalance: the next run begins where run a ended
    # Run a's first batch, reported late: 80 records of 0..180, of which it read 60.
    reports.onQueryProgress(JavaEvent(report(RUN_A, 0, None, {0: 180}, rows=60)))
    assert member.unread == [{0: (100, 180)}]  # against run b's offsets it would look complete
    assert member.reports == [(RUN_A, {0: 180})]  # the member accepts only the current run's
    assert member.durations == [5]  # the batch's duration goes with its commit
    assert "event=batch" in capsys.readouterr().out


def test_a_run_whose_partitions_a_rebalance_took_as_it_started_is_stopped_unaccepted(capsys):
    """The revoke came while the query was starting, with no run yet to
    stop: the run must not go on reading partitions now another copy's."""
    runs, member = Runs(), Member()
    member.revoked_meanwhile = True
    run = started(runs, member, RUN_A, {0: 0})
    assert (run.ending, run.query.isActive, member.begun) == (Ended.REVOKED, False, [])
    assert runs.revoke() is None  # nothing left for a later revoke to stop


def test_an_abandoned_batch_writes_no_line_and_hands_no_offsets_over(capsys):
    runs, member = Runs(), Member()
    run = started(runs, member, RUN_A, {0: 0})
    run.abandon(0)
    run.end(Ended.FAILED, RuntimeError("fenced"))
    run.end(Ended.RESIZED)  # the first reason wins
    BatchListener("echo", runs, member).batch_done(progress(RUN_A, 0, None, {0: 10}, rows=10))
    assert (member.reports, capsys.readouterr().out) == ([], "")
    assert (run.ending, str(run.error)) == (Ended.FAILED, "fenced")


def test_a_cold_run_whose_stop_cut_its_next_batch_short_is_followed_by_full_batches():
    """A process's first run reads a 200th of a batch of its busiest
    partition and ends after its first stored batch; the batch that began
    as it stopped stores nothing. The next run reads full batches of every
    partition: the process is warm."""
    partitions = iter([(0, 1), (0, 1), None])
    member = SimpleNamespace(topic=TOPIC, wait_for_partitions=lambda: next(partitions),
                             offset_ranges=lambda starting: {0: (0, 10_000), 1: (0, 10_000_000)})
    context = SimpleNamespace(kafka=None, batch_size=BatchSize(200_000, None), stop_requested=threading.Event())
    worker = Worker(name="echo", topic="textlines", sink=KafkaSink("words"), batch_records=200_000)
    supervisor = runner.Supervisor(worker, SimpleNamespace(lost=lambda: None), member, context, Runs(), None)
    read = []

    def run_query(starting, records, one_batch=False):
        read.append((starting, records))
        run = QueryRun("echo", starting)
        partition = min(starting)  # the batches' progress on one of the partitions read
        batches = [progress(RUN_A, 0, None, {partition: records}, rows=records),
                   progress(RUN_A, 1, {partition: records}, {partition: 2 * records}, rows=records)]
        run.query = SimpleNamespace(lastProgress=batches[-1], recentProgress=batches)
        run.abandon(1)
        run.end(Ended.FIRST_BATCH if one_batch else Ended.STOPPED)
        return run, None
    supervisor.resume_from, supervisor.run_query = lambda partitions: {0: 0, 1: 0}, run_query
    supervisor.run()
    assert read == [({1: 0}, 1_000), ({0: 0, 1: 0}, 200_000)]


def test_a_batch_that_read_nothing_writes_no_line_but_hands_its_offsets_over(capsys):
    """Spark runs a new query's first trigger even with nothing to read (a
    cold first run that read the whole backlog, then the next run)."""
    runs, member = Runs(), Member()
    started(runs, member, RUN_A, {0: 10})
    BatchListener("echo", runs, member).batch_done(progress(RUN_A, 0, None, {0: 10}, rows=0))
    assert (member.reports, capsys.readouterr().out) == ([(RUN_A, {0: 10})], "")


def test_a_services_fields_win_on_the_batch_line(capsys):
    runs, member = Runs(), Member()
    run = started(runs, member, RUN_A, {0: 0})
    run.report(0, rows_in=7, counted=6)
    BatchListener("echo", runs, member).batch_done(progress(RUN_A, 0, None, {0: 10}, rows=10))
    line = dict(pair.split("=", 1) for pair in capsys.readouterr().out.split())
    assert (line["rows_in"], line["counted"]) == ("7", "6")


def test_a_batch_line_carries_its_figures_in_l2mets_form_too(capsys):
    runs, member = Runs(), Member()
    run = started(runs, member, RUN_A, {0: 0})
    run.report(0, rows_out=40, skipped_bad_time=2, skipped_too_long=1)
    BatchListener("echo", runs, member).batch_done(progress(RUN_A, 0, None, {0: 10}, rows=10))
    line = dict(pair.split("=", 1) for pair in capsys.readouterr().out.split())
    assert {key: line[key] for key in line if "#" in key} == {
        "count#echo.rows_in": "10", "count#echo.rows_out": "40", "count#echo.skipped": "3",
        "measure#echo.batch_ms": "5ms", "sample#echo.lag": "0"}
    assert (line["rows_in"], line["duration_ms"], line["lag"]) == ("10", "5", "0")  # the contract's fields stay


def test_a_paced_batchs_wait_is_on_its_line_apart_from_its_duration(monkeypatch, capsys):
    """A monitor charts a batch's work: the wait for its phase is idle."""
    monkeypatch.setattr(query_run, "wait_for_phase", lambda began, now, phase_s, interval_s: 0.02)
    runs, member = Runs(), Member()
    run = started(runs, member, RUN_A, {0: 0})
    run.pace(0, began=0.0, phase_s=0.5)
    BatchListener("echo", runs, member).batch_done(progress(RUN_A, 0, None, {0: 10}, rows=10, took_ms=900))
    line = dict(pair.split("=", 1) for pair in capsys.readouterr().out.split())
    waited = int(line["waited_ms"])
    assert waited >= 10  # it waited its 20 ms (however the clock rounds)
    assert (int(line["duration_ms"]), member.durations) == (900 - waited, [900 - waited])
    assert line["measure#echo.batch_ms"] == f"{900 - waited}ms"


@pytest.mark.parametrize("stop", ["stop_gracefully", "end"])
def test_a_paced_batch_stops_waiting_as_its_run_is_stopped(monkeypatch, stop):
    """A rebalance or SIGTERM waits for the running batch: not for its phase."""
    monkeypatch.setattr(query_run, "wait_for_phase", lambda began, now, phase_s, interval_s: 60.0)
    run = QueryRun("echo", {0: 0})
    run.query = SimpleNamespace(lastProgress=None, status={"isTriggerActive": False, "message": ""},
                                stop=lambda: None, id="q")
    pacing = threading.Thread(target=run.pace, args=(0, 0.0, 0.5))
    pacing.start()
    if stop == "end":
        run.end(Ended.REVOKED)
    else:
        query_run.stop_gracefully(run, StopBudget())
    pacing.join(timeout=10)
    assert not pacing.is_alive()


def lines(out):
    return [dict(pair.split("=", 1) for pair in line.split()) for line in out.splitlines()]


def test_a_batch_stored_as_spark_stopped_under_it_gets_one_line_from_the_services_figures(capsys):
    """A cluster's outage stops the context between a batch's commit and
    Spark's report of it (batch 1), or while a batch is still storing
    (batch 2): each still gets its line, once."""
    runs, member = Runs(), Member()
    listener = BatchListener("echo", runs, member)
    run = started(runs, member, RUN_A, {0: 0})
    run.report(0, rows_in=10, rows_out=4)
    listener.batch_done(progress(RUN_A, 0, None, {0: 10}, rows=10))
    run.report(1, rows_in=20, rows_out=5)
    run.reports_ended()  # the main thread: the driver's Spark is lost
    run.report(2, rows_in=30, rows_out=6)
    listener.batch_done(progress(RUN_A, 1, {0: 10}, {0: 30}, rows=20))  # drained late: no second line
    listener.onQueryTerminated(SimpleNamespace(runId=RUN_A))
    assert [(line["batch"], line["rows_in"], line["count#echo.rows_in"]) for line in lines(capsys.readouterr().out)
            ] == [("0", "10", "10"), ("1", "20", "20"), ("2", "30", "30")]
    assert member.reports == [(RUN_A, {0: 10})]


def test_a_terminated_querys_stored_batch_that_spark_did_not_report_gets_its_line(capsys):
    runs, member = Runs(), Member()
    run = started(runs, member, RUN_A, {0: 0})
    run.report(0, rows_in=10, rows_out=4)  # stored; the query stopped before reporting it
    JsonReports(BatchListener("echo", runs, member)).onQueryTerminated(JavaEvent(json.dumps(
        {"id": "c7a0b3c4-2f4e-4c55-9a07-1d2e3f405a03", "runId": RUN_A, "exception": None,
         "errorClassOnException": None})))
    (line,) = lines(capsys.readouterr().out)
    assert (line["event"], line["batch"], line["rows_out"], "duration_ms" in line) == ("batch", "0", "4", False)


def test_an_unexpected_error_still_stops_spark_and_leaves_the_group_at_once(monkeypatch):
    """A bug raised anywhere in a worker's life must not leave the group
    waiting out the session timeout before another copy takes over."""
    member, stopped = Member(), threading.Event()

    def add_listener(listener):
        raise RuntimeError("a bug")

    driver = SimpleNamespace(session=None, add_listener=add_listener, stop=stopped.set)
    monkeypatch.setattr(runner, "Driver", lambda *args: driver)
    monkeypatch.setattr(runner, "join_group", lambda *args: (member, None))
    worker = Worker(name="echo", topic="textlines", sink=KafkaSink("words"), batch_records=10)
    with pytest.raises(RuntimeError, match="a bug"):
        launched = Launched(worker, load({"KAFKA_URL": "kafka://127.0.0.1:1"}), Future(),
                            threading.Event())
        runner.run(worker, launched)
    assert stopped.is_set() and member.closed


class StopTimedOut(CapturedException):
    """What query.stop() raises past spark.sql.streaming.stopTimeout."""

    def __init__(self):
        Exception.__init__(self)

    def __str__(self):
        return "org.apache.spark.SparkException: The stream thread was last executing:"


def test_a_query_whose_stop_timed_out_is_not_waited_for_again(capsys):
    """Its thread is stuck in a call to a broker that is away: the stop of
    the session after it would wait as long again, past Heroku's 30 s."""
    class StuckQuery:
        id, stops = "query-1", 0

        def stop(self):
            self.stops += 1
            raise StopTimedOut()

    query = StuckQuery()
    stop_now(query)
    stop_now(query)
    assert query.stops == 1
    assert capsys.readouterr().out.count("event=query_stop_timed_out") == 1
