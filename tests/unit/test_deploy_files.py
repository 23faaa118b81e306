"""The deployment files agree with ../shared/CONTRACT.md and with each other:
Procfile, app.json, system.properties, the Python version, docker-compose.yml."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import yaml

from devstack.local_stack import ROOT
from services.workers import GROUPS, TOPICS
from services.workers import WORKERS as REGISTRY

WORKERS = {"text_processor_worker", "aggregator_worker", "anomaly_detector_worker"}

CONTRACT = (ROOT / "docs" / "contract.md").read_text()
# The contract's Environment table: | `KAFKA_URL` | comma-separated broker URLs ...
CONTRACT_VARIABLES = set(re.findall(r"^\| `([A-Z][A-Z_]+)` \|", CONTRACT.split("## Environment")[1].split("\n## ")[0],
                                    re.MULTILINE))
# The contract's topic table: | `textlines` | any | a line of text, UTF-8 | ...
CONTRACT_TOPICS = re.findall(r"^\| `([a-z]+)` \|", CONTRACT.split("| topic | key | value |")[1].split("\n\n")[0],
                             re.MULTILINE)


def test_the_workers_declare_the_contracts_topics_and_consumer_groups():
    # Besides the contract's, the Kafka sink's dead letters' (shared.dead_letters).
    assert set(TOPICS) == {*CONTRACT_TOPICS, "dead-letters"}
    assert set(CONTRACT_TOPICS) == {"textlines", "words", "loglines", "alerts"}
    groups = re.search(r"Consumer group ids: (.*?)\.\n", CONTRACT, re.DOTALL)[1]
    assert sorted(f"<prefix>{group}" for group in GROUPS) == sorted(re.findall(r"`([^`]+)`", groups))


def procfile(name="Procfile"):
    entries = {}
    for line in (ROOT / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            process, command = line.split(":", 1)
            entries[process.strip()] = command.split()
    return entries


def test_procfile_runs_the_contracts_processes():
    assert set(procfile()) == WORKERS | {"release", "web"}
    assert procfile()["release"] == ["python", "-m", "services.release"]
    assert procfile()["web"] == ["python", "-m", "services.web"]
    # The registry declares the same workers, and each runs its own module.
    assert {worker.process_type: ["python", "-m", worker.module] for worker in REGISTRY.values()} == {
        process: command for process, command in procfile().items() if process in WORKERS}
    assert list(procfile("Procfile.local"))[0] == "web"  # honcho's PORT=5000, which `make run` prints


def test_every_procfile_command_runs_an_existing_module():
    for name in ("Procfile", "Procfile.local"):
        for process, command in procfile(name).items():
            assert command[:2] == ["python", "-m"], process
            assert importlib.util.find_spec(command[2]) is not None, (name, process)


def test_app_json_builds_with_java_then_python_and_describes_every_variable():
    app = json.loads((ROOT / "app.json").read_text())
    assert [b["url"] for b in app["buildpacks"]] == ["heroku/jvm", "heroku/python"]
    plans = {addon["plan"].split(":")[0] for addon in app["addons"]}
    assert plans == {"heroku-kafka", "heroku-postgresql"}
    assert set(app["formation"]) == WORKERS | {"web"}
    # Heroku mixes no dyno tiers in one app: the smallest of the workers' tier, 512 MB.
    assert app["formation"]["web"]["size"] == "standard-1x"
    assert app["env"]["DASHBOARD_PASSWORD"]["generator"] == "secret"
    assert {"KAFKA_URL", "DATABASE_URL", "DASHBOARD_PASSWORD"} <= CONTRACT_VARIABLES <= set(app["env"])
    assert all(entry["description"] for entry in app["env"].values())
    defaults = {name: entry.get("value") for name, entry in app["env"].items()}
    assert (defaults["WINDOW_SECONDS"], defaults["ANOMALY_URGENT_THRESHOLD"],
            defaults["ANOMALY_EMAIL_THRESHOLD"]) == ("10", "100", "50")
    batch_sizes = app["env"]["MAX_OFFSETS_PER_TRIGGER"]["description"]
    for worker in REGISTRY.values():
        assert f"{worker.name.replace('-', ' ')} {worker.batch_records:,}" in batch_sizes


def test_heroku_ci_runs_the_readmes_test_command():
    test = json.loads((ROOT / "app.json").read_text())["environments"]["test"]
    assert test["scripts"]["test"] == "make test"


def test_java_and_python_versions_are_pinned_and_agree():
    assert (ROOT / "system.properties").read_text().strip() == "java.runtime.version=17"
    runtime = (ROOT / "runtime.txt").read_text().strip()
    assert runtime == "python-" + (ROOT / ".python-version").read_text().strip()


def test_compose_runs_the_tests_kafka_39_postgres_the_topics_and_the_procfiles_workers():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    broker = re.search(r"<artifactId>kafka_2.13</artifactId>\s*<version>([\d.]+)</version>",
                       (ROOT / "jvm" / "kafka-broker" / "pom.xml").read_text())[1]
    assert broker.startswith("3.9.")  # the version Apache Kafka on Heroku offers
    assert services["kafka"]["image"] == f"apache/kafka:{broker}"
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["postgres"]["image"].startswith("postgres:")
    # The workers' own topics (services.workers.TOPICS: tests/integration/test_local_stack.py runs it).
    assert services["topics"]["build"] == "."
    assert services["topics"]["command"] == ["python", "-m", "devstack.create_topics", "kafka:9092", "4"]
    for worker in WORKERS:
        service = services[worker]
        assert service["command"] == procfile()[worker]
        environment = service["environment"]
        assert environment["KAFKA_URL"] == "kafka://kafka:9092"
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert set(service["depends_on"]) == {"topics", "release"}
    assert services["release"]["command"] == procfile()["release"]
    web = services["web"]
    assert web["command"] == procfile()["web"] and web["ports"] == ["127.0.0.1:5000:5000"]
    assert web["environment"]["PORT"] == "5000" and "DASHBOARD_PASSWORD" in web["environment"]
    for generator in ("textlines_generator", "loglines_generator"):
        assert services[generator]["profiles"] == ["generators"]
        assert importlib.util.find_spec(services[generator]["command"][2]) is not None


FAKE_HEROKU = """#!/usr/bin/env bash
# Stands in for the Heroku CLI: records each call, answers like a new app
# that has been pushed; `heroku run -- python -m services.workers` runs here.
echo "$*" >> "$HEROKU_CALLS"
case "$1" in
  config:get) [ "$2" = KAFKA_PREFIX ] && echo "$FAKE_KAFKA_PREFIX" ;;
  releases) echo "v5  Deploy 1a2b3c4  someone@example.com" ;;
  run) [ "${*: -1}" = services.workers ] && cd "$FAKE_ROOT" && "$FAKE_PYTHON" -m services.workers ;;
esac
exit 0
"""


def heroku_setup(tmp_path, prefix, plan=None):
    """Runs bin/heroku-setup against a stand-in CLI; the calls it made."""
    cli = tmp_path / "heroku"
    cli.write_text(FAKE_HEROKU)
    cli.chmod(0o755)
    calls = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "HEROKU": str(cli), "HEROKU_CALLS": str(calls),
           "FAKE_KAFKA_PREFIX": prefix, "FAKE_ROOT": str(ROOT), "FAKE_PYTHON": sys.executable}
    subprocess.run([ROOT / "bin" / "heroku-setup", "my-app", *([plan] if plan else [])],
                   env=env, check=True, capture_output=True)
    return calls.read_text().splitlines()


def test_heroku_setup_on_a_basic_plan_creates_topics_and_consumer_groups(tmp_path):
    calls = heroku_setup(tmp_path, prefix="wabash-58799.")
    assert "addons:create heroku-kafka:basic-0 --as KAFKA --app my-app" in calls
    assert "addons:create heroku-postgresql:essential-0 --as DATABASE --app my-app" in calls
    assert calls.index("kafka:wait --app my-app") < calls.index(
        "kafka:topics:create textlines --partitions 8 --app my-app")
    created = [call for call in calls if call.startswith("kafka:topics:create")]
    assert created == [f"kafka:topics:create {topic} --partitions 8 --app my-app" for topic in TOPICS]
    assert calls.index("run --no-tty --exit-code --app my-app -- python -m services.workers") < calls.index(
        created[0])
    groups = [call.split()[1] for call in calls if call.startswith("kafka:consumer-groups:create")]
    assert groups == [process.replace("_worker", "").replace("_", "-") + "-app"
                      for process in ("text_processor_worker", "aggregator_worker",
                                      "anomaly_detector_worker")]
    assert "run --exit-code --app my-app -- " + " ".join(procfile()["release"]) in calls
    (scale,) = [call for call in calls if call.startswith("ps:scale")]
    formation = json.loads((ROOT / "app.json").read_text())["formation"]
    assert set(scale.split()[1:-2]) == {f"{process}=1:{formation[process]['size']}"
                                        for process in WORKERS | {"web"}}
    (password,) = [call for call in calls if call.startswith("config:set")]
    assert re.fullmatch(r"config:set DASHBOARD_PASSWORD=[0-9a-f]{32} --app my-app", password)


def test_heroku_setup_on_a_dedicated_plan_leaves_consumer_groups_to_kafka(tmp_path):
    calls = heroku_setup(tmp_path, prefix="", plan="standard-0")
    assert "addons:create heroku-kafka:standard-0 --as KAFKA --app my-app" in calls
    assert not [call for call in calls if call.startswith("kafka:consumer-groups:create")]
    assert sum(call.startswith("kafka:topics:create") for call in calls) == len(TOPICS)


def imports(path, packages):
    return re.findall(rf"^\s*(?:from|import) ((?:{packages})\b[\w.]*)", path.read_text(), re.MULTILINE)


def test_the_runtime_needs_no_dev_tool_and_no_test_module_imports_another():
    for path in [*ROOT.glob("shared/**/*.py"), *ROOT.glob("services/**/*.py")]:
        assert imports(path, "devstack|tests|benchmarks") == [], path  # .slugignore leaves those out
    test_modules = [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("examples/**/test_*.py")]
    assert len(test_modules) > 40  # the tests live in subfolders: a glob of tests/ alone matched none
    for path in test_modules:
        assert imports(path, r"(?:tests|examples)\.(?:\w+\.)*test_\w+") == [], path


def test_a_service_uses_only_the_workers_public_api():
    """shared.worker's own modules are the framework's: a service imports
    shared.worker alone, and the framework builds its queries."""
    for path in ROOT.glob("services/**/*.py"):
        assert imports(path, r"shared\.worker\.\w+") == [], path
        assert "writeStream" not in path.read_text(), path
