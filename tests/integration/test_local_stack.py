"""The local stack is a Heroku-like Kafka and a real Postgres."""

import os
import signal
import socket
import subprocess
import sys

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from sqlalchemy import create_engine, text

from devstack.kafka_io import produce, read_all
from devstack.local_stack import ROOT, wait_until
from services.workers import TOPICS
from shared.config import load


def test_contract_topics_exist_under_the_prefix(stack, prefix):
    with stack.broker.admin() as admin:
        topics = set(admin.list_topics())
    assert {prefix + name for name in TOPICS} <= topics
    produce(stack, prefix + "textlines", ["hello"])
    assert [r.value for r in read_all(stack, prefix + "textlines", 1)] == [b"hello"]


def test_compose_creates_the_workers_topics_once(stack):
    done = [subprocess.run([sys.executable, "-m", "devstack.create_topics", stack.broker.bootstrap, "1"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)]
    with stack.broker.admin() as admin:
        assert set(TOPICS) <= set(admin.list_topics())
    assert done[1] == "created topics: none\n"  # the second run finds them all


def test_topics_are_not_created_automatically(stack, prefix):
    producer = KafkaProducer(bootstrap_servers=stack.broker.bootstrap, max_block_ms=3000)
    with pytest.raises(KafkaTimeoutError):
        producer.send(prefix + "no-such-topic", b"x").get(timeout=5)
    producer.close()
    with stack.broker.admin() as admin:
        assert prefix + "no-such-topic" not in admin.list_topics()


def test_postgres_answers_through_the_configs_url(stack):
    config = load({**stack.environment(), "KAFKA_URL": stack.broker.url}, needs_database=True)
    engine = create_engine(config.database_url)
    with engine.connect() as connection:
        assert connection.execute(text("select 40 + 2")).scalar() == 42
    engine.dispose()


def port_open(url):
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) == 0


@pytest.mark.services  # starts its own broker
def test_the_command_line_runs_a_command_in_the_stacks_environment_then_stops_it():
    check = ("import os; from kafka.admin import KafkaAdminClient; "
             "a = KafkaAdminClient(bootstrap_servers=os.environ['KAFKA_URL'][len('kafka://'):]); "
             "print('topics', sorted(a.list_topics())); print('db', os.environ['DATABASE_URL'])")
    done = subprocess.run([sys.executable, "-m", "devstack.local_stack", "--prefix", "cli.", "--",
                           sys.executable, "-c", check],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    exports = dict(line[len("export "):].split("=", 1) for line in done.stdout.splitlines()
                   if line.startswith("export "))
    assert exports["KAFKA_PREFIX"] == "cli."
    assert exports["KAFKA_URL"].startswith("kafka://127.0.0.1:")
    assert exports["DATABASE_URL"].startswith("postgres://postgres@127.0.0.1:")
    assert "topics ['cli.alerts', 'cli.dead-letters', 'cli.loglines', 'cli.textlines', 'cli.words']" in done.stdout
    assert not port_open(exports["KAFKA_URL"]) and not port_open(exports["DATABASE_URL"].split("@")[1].split("/")[0])


@pytest.mark.services  # starts its own broker
def test_ctrl_c_stops_the_command_first_and_the_stack_after_it(tmp_path):
    """`make run`'s Ctrl-C reaches every process of the terminal's group at
    once: the command's processes must still find the broker as they stop."""
    stopping = ("import os, signal, socket, sys, time\n"
                "def stop(*_):\n"
                "    time.sleep(3)  # a worker finishing its batch\n"
                "    kafka = os.environ['KAFKA_URL'][len('kafka://'):]\n"
                "    postgres = os.environ['DATABASE_URL'].split('@')[1].split('/')[0]\n"
                "    up = [socket.socket().connect_ex((h, int(p))) == 0 for h, p in\n"
                "          (kafka.split(':'), postgres.split(':'))]\n"
                "    print('broker and postgres up as it stopped:', up, flush=True)\n"
                "    sys.exit(0)\n"
                "signal.signal(signal.SIGINT, stop)\n"
                "print('running', flush=True)\n"
                "time.sleep(600)\n")
    output = tmp_path / "output"
    with open(output, "w") as out:
        stack = subprocess.Popen([sys.executable, "-m", "devstack.local_stack", "--prefix", "ctrlc.", "--",
                                  sys.executable, "-c", stopping], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # its own group, as a terminal's foreground job
        try:
            try:
                wait_until(lambda: "running" in output.read_text(), 180, "the command running")
            except TimeoutError:
                pytest.fail(f"the command not running within 180 s; the stack printed:\n{output.read_text()[-3000:]}")
            os.killpg(stack.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            assert stack.wait(60) == 0
        finally:
            if stack.poll() is None:
                os.killpg(stack.pid, signal.SIGKILL)
    assert "broker and postgres up as it stopped: [True, True]" in output.read_text()


@pytest.mark.services  # starts its own broker
def test_a_cluster_id_that_looks_like_an_option_still_formats(tmp_path, monkeypatch):
    from devstack import local_stack

    encode = local_stack.base64.urlsafe_b64encode
    monkeypatch.setattr(local_stack.base64, "urlsafe_b64encode", lambda raw: b"-" + encode(raw)[1:])
    broker = local_stack.KafkaBroker(tmp_path / "kafka")
    try:
        broker.start()
        assert broker._ready()
    finally:
        broker.stop()


def test_the_environment_it_prints_masks_the_password_of_a_database_url_given_to_it(capsys):
    from devstack.local_stack import print_environment

    print_environment({"KAFKA_URL": "kafka://127.0.0.1:9092",
                       "DATABASE_URL": "postgres://app:s3cret%2Fpw@db.example:5432/app"})
    printed = capsys.readouterr().out
    assert "s3cret" not in printed
    assert "postgres://app:***@db.example:5432/app" in printed
    assert "export KAFKA_URL=kafka://127.0.0.1:9092" in printed
