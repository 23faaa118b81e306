"""The deployment files agree with ../shared/CONTRACT.md and with each other:
Procfile, app.json, system.properties, the Python version, docker-compose.yml."""

import importlib.util
import json
from pathlib import Path

import yaml

from shared.config import TOPICS

ROOT = Path(__file__).resolve().parent.parent
WORKERS = {"text_processor_worker", "aggregator_worker", "anomaly_detector_worker"}
CONTRACT_VARIABLES = {
    "KAFKA_URL", "KAFKA_TRUSTED_CERT", "KAFKA_CLIENT_CERT", "KAFKA_CLIENT_CERT_KEY", "KAFKA_PREFIX",
    "KAFKA_ADDON", "DATABASE_URL", "WINDOW_SECONDS", "ANOMALY_URGENT_THRESHOLD", "ANOMALY_EMAIL_THRESHOLD",
}


def procfile(name="Procfile"):
    entries = {}
    for line in (ROOT / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            process, command = line.split(":", 1)
            entries[process.strip()] = command.split()
    return entries


def test_procfile_runs_the_contracts_processes():
    assert set(procfile()) == WORKERS | {"release"}
    assert procfile()["release"] == ["python", "-m", "shared.migrations"]


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
    assert set(app["formation"]) == WORKERS
    assert CONTRACT_VARIABLES <= set(app["env"])
    assert all(entry["description"] for entry in app["env"].values())
    defaults = {name: entry.get("value") for name, entry in app["env"].items()}
    assert (defaults["WINDOW_SECONDS"], defaults["ANOMALY_URGENT_THRESHOLD"],
            defaults["ANOMALY_EMAIL_THRESHOLD"]) == ("10", "100", "50")


def test_java_and_python_versions_are_pinned_and_agree():
    assert (ROOT / "system.properties").read_text().strip() == "java.runtime.version=17"
    runtime = (ROOT / "runtime.txt").read_text().strip()
    assert runtime == "python-" + (ROOT / ".python-version").read_text().strip()


def test_compose_runs_kafka_37_postgres_the_topics_and_the_procfiles_workers():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:3.7.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["postgres"]["image"].startswith("postgres:")
    creates = " ".join(services["topics"]["command"])
    assert all(topic in creates for topic in TOPICS)
    for worker in WORKERS:
        service = services[worker]
        assert service["command"] == procfile()[worker]
        environment = service["environment"]
        assert environment["KAFKA_URL"] == "kafka://kafka:9092"
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert set(service["depends_on"]) == {"topics", "release"}
    assert services["release"]["command"] == procfile()["release"]
    for generator in ("textlines_generator", "loglines_generator"):
        assert services[generator]["profiles"] == ["generators"]
        assert importlib.util.find_spec(services[generator]["command"][2]) is not None
