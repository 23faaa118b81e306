"""The levers' switches: LEVERS_OFF read, and each lever documented with its record."""

import re
from pathlib import Path

import pytest

from shared import levers
from shared.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_every_lever_is_on_unless_levers_off_names_it():
    assert levers.from_environment({}) == levers.Levers()
    assert all(getattr(levers.from_environment({}), name) for name in levers.NAMES)
    some = levers.from_environment({"LEVERS_OFF": "warm_up, jit"})
    assert [name for name in levers.NAMES if not getattr(some, name)] == ["warm_up", "jit"]
    assert not any(getattr(levers.from_environment({"LEVERS_OFF": "all"}), name) for name in levers.NAMES)


def test_a_lever_there_is_not_is_a_config_error_that_lists_those_there_are():
    with pytest.raises(ConfigError, match="LEVERS_OFF names a lever there is not") as raised:
        levers.from_environment({"LEVERS_OFF": "warm_up,turbo"})
    assert "turbo" not in str(raised.value) and "small_first_batch" in str(raised.value)


def test_each_lever_has_one_line_above_its_switch_linking_a_record_that_exists():
    source = (ROOT / "shared" / "levers" / "__init__.py").read_text()
    rows = re.findall(r"^    # .+: (docs/decisions/[\w.-]+)\n    (\w+): bool = True$", source, re.MULTILINE)
    assert [name for _, name in rows] == list(levers.NAMES)
    for record, _ in rows:
        assert (ROOT / record).is_file(), record


def test_each_lever_is_the_module_of_its_name_and_its_switch_is_read_outside_it():
    """A lever's code is shared/levers/<name>.py, and the lifecycle reads its
    switch where it calls it: a lever no code asks about would be always on."""
    assert {path.stem for path in (ROOT / "shared" / "levers").glob("*.py")} - {"__init__"} == set(levers.NAMES)
    core = "".join(path.read_text() for path in [*ROOT.glob("shared/*.py"), *ROOT.glob("shared/worker/*.py")])
    assert [name for name in levers.NAMES if f"LEVERS.{name}" not in core] == []
