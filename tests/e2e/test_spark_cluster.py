"""The workers as drivers of a real Spark standalone cluster (a master and two
workers from the installed pyspark, RPC authenticated and encrypted), on the
real broker in both modes and real Postgres: every line's words counted once,
through a lost executor and a restarted driver, and no TLS material printed
or on a command line. Each driver takes one core of each Spark worker at most."""

import fcntl
import signal
import sys

import psutil
import pytest

from devstack.local_stack import ROOT, wait_until
from devstack.postgres import table_locked, waiting_on_a_lock
from devstack.spark_cluster import SparkCluster, spark_home
from shared.spark import CONNECTOR_JARS
from tests.checks import assert_no_secret_in, assert_no_stack_trace, heroku_like
from tests.pipeline import (
    BATCH_LINES,
    assert_repeats_were_dropped,
    committed_lines,
    make_lines,
    send,
    wait_for_exact_counts,
    wait_inside_a_batch,
    words_counted,
    words_written,
)


@pytest.fixture
def cluster(tmp_path, tmp_path_factory):
    """A cluster of this test's own, and one at a time on the host across
    the test processes: two at once (some fifteen JVMs on 2 cores) took
    minutes to compile a first batch, past the tests' deadlines."""
    with open(tmp_path_factory.getbasetemp().parent / "spark-cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = SparkCluster(tmp_path / "spark-cluster").start()
        yield started
        started.stop()


def command_lines() -> str:
    """What every process of this host was started with, as `ps` shows it."""
    return "\n".join(" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


@heroku_like
def test_drivers_on_a_cluster_count_every_word_once_through_a_lost_executor_and_a_driver_restart(
        stack, prefix, database_url, workers, cluster):
    lines = make_lines(3 * BATCH_LINES, seed=6)
    send(stack, prefix, lines)
    text_processor = workers.start("services.text_processor", **cluster.driver_environment(executors=2),
                                   MAX_OFFSETS_PER_TRIGGER=str(BATCH_LINES))
    on_cluster = cluster.driver_environment(executors=1)  # 2 cores here: fewer JVMs
    aggregator = workers.start("services.aggregator", **on_cluster)

    wait_inside_a_batch(stack, prefix)
    # Each of the text processor's two executors runs one partition's task
    # of the batch being written: one SIGKILLed inside its task fails that batch.
    assert len(cluster.executors("text-processor")) == 2
    busy = wait_until(lambda: cluster.executors_running_a_task("text-processor"), 60, "an executor inside a task")
    busy[0].kill()
    wait_until(lambda: text_processor.log_lines("query_failed"), 120, "the batch failing with its executor")
    assert sum(committed_lines(stack, prefix).values()) < len(lines), "the killed batch was the last"

    wait_until(lambda: aggregator.log_lines("batch"), 240, "the aggregator's first batch")
    aggregator.signal(signal.SIGTERM)
    assert aggregator.wait(30) == 0
    restarted = workers.start("services.aggregator", **on_cluster)
    batch_lines = wait_for_exact_counts(stack, prefix, database_url, restarted, lines, stopped=[aggregator])
    assert_repeats_were_dropped(batch_lines)

    # The master replaced the lost executor; the drivers lived through it.
    assert len(cluster.executors("text-processor")) == 2
    assert text_processor.process.poll() is None
    outputs = "".join(worker.output() for worker in workers.started)
    assert "Traceback" not in outputs
    assert_no_stack_trace(text_processor.output())
    seen = outputs + cluster.logs() + command_lines()
    assert cluster.secret not in seen
    assert_no_secret_in(seen, stack.environment(prefix))


def test_drivers_on_a_cluster_one_under_spark_submit_as_the_readme_says_count_every_word_once(
        stack, prefix, database_url, workers, cluster):
    lines = make_lines(4000, seed=7)
    send(stack, prefix, lines)
    jars = ",".join(sorted(str(jar) for jar in CONNECTOR_JARS.glob("*.jar")))
    text_processor = workers.start(
        "services.text_processor",
        [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url, "--jars", jars,
         "--driver-memory", "512m", "services/text_processor/__main__.py"],
        **cluster.driver_environment(executors=1), PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    aggregator = workers.start("services.aggregator", **cluster.driver_environment(executors=1))
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    assert sorted(app["name"] for app in cluster.running_apps()) == ["aggregator", "text-processor"]
    assert "Traceback" not in text_processor.output()


def test_a_driver_outlives_its_clusters_outage_and_counts_every_word_once(stack, prefix, database_url, workers,
                                                                           cluster):
    lines = make_lines(4 * BATCH_LINES, seed=8)
    send(stack, prefix, lines[:BATCH_LINES])
    workers.start("services.text_processor")  # on a local master: one driver on the cluster, fewer JVMs
    aggregator = workers.start("services.aggregator", **cluster.driver_environment(executors=1))
    wait_until(lambda: aggregator.log_lines("batch"), 240, "the aggregator's first batch")
    send(stack, prefix, lines[BATCH_LINES:])
    # Words waiting behind the aggregator's running batch: the next one begins as this one ends.
    wait_until(lambda: words_written(stack, prefix) > words_counted(database_url, prefix) + 100_000, 120,
               "a backlog of words behind the aggregator")
    backlog_end = words_written(stack, prefix)

    # The workers (and their executors) die under the running batch; the
    # master restarts knowing no application; the workers come back.
    cluster.kill_workers()
    assert words_counted(database_url, prefix) < backlog_end, "the fault came after the backlog was stored"
    cluster.restart_master()
    cluster.start_workers()

    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines)
    lost = aggregator.log_lines("spark_lost")
    assert len(lost) == 1, lost  # one line for the outage, however long the driver waited
    assert "no executor" in lost[0]["error"]

    # The master removes the application: Spark stops the driver's context
    # under it, after a batch's Spark work and before its transaction commits.
    more = make_lines(BATCH_LINES, seed=9)
    with table_locked(database_url, "window_totals"):
        send(stack, prefix, more)
        wait_until(lambda: waiting_on_a_lock(database_url, "INSERT INTO window_totals"), 120,
                   "a batch's transaction waiting to add its totals")
        cluster.kill_application("aggregator")
        wait_until(lambda: len(aggregator.log_lines("spark_lost")) == 2, 60, "the driver's Spark lost")
    # That batch is stored with Spark gone: it still has its log line (wait_for_exact_counts).
    wait_for_exact_counts(stack, prefix, database_url, aggregator, lines + more)
    lost = aggregator.log_lines("spark_lost")
    assert len(lost) == 2 and "stopped the context" in lost[1]["error"], lost
    # That batch's words were counted by the old session: the new one registers after the back-off.
    # Its executors must reach it before the cluster goes: a driver that never
    # had one waits for its first as long as the cluster makes it.
    wait_until(lambda: [app["name"] for app in cluster.running_apps()] == ["aggregator"]
               and cluster.registered_executors("aggregator") > 0, 60,
               "the new session's application on the master, with an executor")

    # The cluster gone for good: a SIGTERM while the new session tries to register stops the driver in time.
    cluster.kill_workers()
    cluster.stop_master()
    wait_until(lambda: len(aggregator.log_lines("spark_lost")) == 3, 120, "the driver's Spark lost again")
    registering = aggregator.output().count("Failed to connect to master")
    wait_until(lambda: aggregator.output().count("Failed to connect to master") > registering, 60,
               "a new session trying to register")
    aggregator.signal(signal.SIGTERM)
    assert aggregator.wait(30) == 0
    assert_no_stack_trace(aggregator.output())
