"""The Procfile runs what ../shared/CONTRACT.md names, and every command starts."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT_PROCESSES = {"text_processor_worker", "aggregator_worker", "anomaly_detector_worker", "release"}


def procfile(name):
    entries = {}
    for line in (ROOT / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            process, command = line.split(":", 1)
            entries[process.strip()] = command.split()
    return entries


def test_procfile_process_types_are_the_contracts():
    assert set(procfile("Procfile")) <= CONTRACT_PROCESSES
    assert "text_processor_worker" in procfile("Procfile")


def test_every_command_runs_an_existing_module_from_the_repository_root():
    for name in ("Procfile", "Procfile.local"):
        for process, command in procfile(name).items():
            assert command[:2] == ["python", "-m"], process
            assert importlib.util.find_spec(command[2]) is not None, (name, process)
