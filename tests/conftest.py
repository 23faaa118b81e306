"""Fixtures on the real local stack. Each mode's stack (plaintext, or
Heroku-like: TLS with client certificates and prefix ACLs) starts once per
test session, when a test first asks for it. Each test gets its own topic
prefix, so tests never share data."""

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import create_engine, text

from devstack.certificates import CertificateAuthority
from devstack.local_stack import ROOT, LocalStack
from devstack.network_cut import NetworkCut
from devstack.postgres import postgres_url
from devstack.processes import WorkerProcesses

# Their asserts explain themselves as a test's own do.
pytest.register_assert_rewrite("tests.pipeline", "tests.checks")

# The tests' Spark drivers compile with C1 alone: they live for minutes over
# small inputs, where C2's compiling costs more than it gains. Measured on
# one pipeline test (three drivers): 151 CPU seconds of the 2 cores with C2,
# 110 without. What Spark computes is the same; the benchmarks run C2, as a
# dyno does. `SPARK_SUBMIT_OPTS=` runs the tests with C2 too.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

# The pyramid, by folder: tests/unit start nothing and run in milliseconds
# (`make test-fast`); tests/integration start a broker, Postgres or an
# in-process Spark; tests/e2e run the workers as processes. Both of the
# latter are marked `services`.
SERVICE_FIXTURES = {"stacks", "spark"}
UNIT = Path(__file__).parent / "unit"


def pytest_collection_modifyitems(items):
    for item in items:
        if UNIT in Path(item.path).parents:
            asked = SERVICE_FIXTURES & set(item.fixturenames)
            if asked:
                raise pytest.UsageError(f"{item.nodeid} is a unit test but asks for {asked}: move it")
        else:
            item.add_marker(pytest.mark.services)
    # Tests that start workers take minutes, the others seconds: handed out
    # first, the long ones do not leave one test process running alone at
    # the end (with `--dist worksteal`, the idle ones take the short ones).
    items.sort(key=lambda item: "workers" not in getattr(item, "fixturenames", ()))


LOG_TAIL_LINES = 40
GROUP_TAIL_LINES = 20
# The tests' own Kafka clients: their warnings and errors (a slow IO-loop task, a
# broker still starting) would crowd a failed test's report ahead of the workers' lines.
logging.getLogger("kafka").setLevel(logging.CRITICAL)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that started workers reports, most telling first (CI
    keeps the head of a long report): the broker's lines on the test's
    groups, then for each worker kafka-python's group lines, the end of its
    log and, if it still runs, its main thread's stack and the others'."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    processes = funcargs.get("workers")
    if report.failed and isinstance(processes, WorkerProcesses):
        if isinstance(funcargs.get("stack"), LocalStack) and "prefix" in funcargs:
            events = funcargs["stack"].broker.group_events(funcargs["prefix"])[-GROUP_TAIL_LINES:]
            report.sections.append(("the broker on the test's groups", "\n".join(events)))
        for worker in processes.started:
            name = Path(worker.log_path).name
            if group_lines := worker.group_log().splitlines()[-GROUP_TAIL_LINES:]:
                report.sections.append((f"kafka-python's group lines of {name}", "\n".join(group_lines)))
            tail = worker.output().splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"log of {name}", "\n".join(tail)))
            if stacks := worker.thread_stacks():  # one still running: where it waits
                report.sections.append((f"threads of {name}", main_thread_first(stacks)))


def main_thread_first(stacks: str) -> str:
    """faulthandler's dump lists the main thread last; it is the one to read."""
    threads = stacks.strip().split("\n\n")
    return "\n\n".join(sorted(threads, key=lambda thread: "in <module>" not in thread))


@pytest.fixture(scope="session")
def stacks():
    started = {}

    def stack_in(mode):
        if mode not in started:
            started[mode] = LocalStack(database_url=os.environ.get("DATABASE_URL"),
                                       heroku_like=(mode == "heroku")).start()
        return started[mode]

    yield stack_in
    for local_stack in started.values():
        local_stack.stop()


@pytest.fixture
def stack(request, stacks):
    """The plaintext stack, or the mode a test names with
    `@tests.checks.heroku_like`."""
    return stacks(getattr(request, "param", "plaintext"))


@pytest.fixture
def prefix(stack):
    """A fresh KAFKA_PREFIX with the contract's topics (and, Heroku-like, its ACLs)."""
    name = f"t{uuid.uuid4().hex[:8]}."
    stack.broker.create_topics(name, partitions=2)
    return name


@pytest.fixture
def database_url(stack):
    """A fresh, empty database on the stack's Postgres, for one test."""
    name = f"t{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url(stack.database_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return stack.database_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def postgres_cut(database_url):
    """A cut a test puts between the processes it starts and their Postgres,
    wherever that Postgres runs (this stack's, or Heroku CI's in-dyno one):
    `through(database_url)` is their DATABASE_URL, `cut()` an outage for
    them alone, `restore()` its end."""
    cut = NetworkCut(urlsplit(database_url).hostname or "127.0.0.1", urlsplit(database_url).port or 5432)
    yield cut
    cut.close()


@pytest.fixture
def workers(stack, prefix, database_url, tmp_path):
    """Starts worker processes in the stack's environment; kills leftovers."""
    # Tests' event times are hours old (tests/clock.py): nothing is deleted for age unless a test says.
    processes = WorkerProcesses({**stack.environment(prefix), "DATABASE_URL": database_url,
                                 "RETENTION_HOURS": "0"}, tmp_path)
    yield processes
    processes.kill_all()


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession, as the workers build it, for topology tests."""
    from shared.spark import session

    spark_session = session("tests")
    yield spark_session
    spark_session.stop()


@pytest.fixture
def release(database_url):
    """The Procfile's release command, run as Heroku runs it before the workers."""
    done = subprocess.run([sys.executable, "-m", "services.release"], cwd=ROOT, text=True,
                          capture_output=True, env={**os.environ, "DATABASE_URL": database_url})
    assert done.returncode == 0, done.stderr
    assert "event=migrated" in done.stdout


@pytest.fixture
def trusted_ca(tmp_path, monkeypatch):
    """A CA the test makes, trusted as the system's CAs would be (the alert
    channels' HTTPS and SMTP servers take their certificates from it)."""
    ca = CertificateAuthority("channels-test-ca")
    path = tmp_path / "ca.pem"
    path.write_text(ca.cert_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    return ca
