"""The docs follow the code: every variable the code reads, every event it
logs, every path and make target the docs name; the README stays short,
and docs/contract.md is the contract."""

import json
import re
from pathlib import Path

import pytest

from devstack.local_stack import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE = [*sorted((ROOT / "shared").rglob("*.py")), *sorted((ROOT / "services").rglob("*.py"))]
# Set by the platform or the system, never by an operator in app.json.
NOT_IN_APP_JSON = {"DYNO", "PORT", "SPARK_HOME", "JAVA_HOME", "SPARK_SUBMIT_OPTS", "SSL_CERT_FILE"}


def code() -> str:
    return "\n".join(path.read_text() for path in CODE)


def variables_read() -> set[str]:
    """Every environment variable the running processes read."""
    text = code()
    found = set(re.findall(r'environ(?:\.get\(|\[)"([A-Z][A-Z0-9_]+)"', text))
    found |= set(re.findall(r'_(?:positive_int|memory_size)\(environ, (?:port_variable|"([A-Z_]+)")', text)) - {""}
    smtp = re.findall(r'smtp\("([A-Z]+)"\)', text)
    found |= {prefix + name for name in smtp for prefix in ("SMTP_", "MAILGUN_SMTP_")}
    found |= {"MAILGUN_SMTP_PORT", "SMTP_PORT"}  # port_variable: one or the other
    kafka_parts = re.search(r'for part in\s+\(([^)]*)\)', text)
    assert kafka_parts, "shared/config.py's KAFKA_ variables moved: update this test"
    found |= {"KAFKA_" + part for part in re.findall(r'"([A-Z_]+)"', kafka_parts[1])}
    return found


def test_every_variable_the_code_reads_is_in_the_operators_guide_and_in_app_json():
    read = variables_read()
    assert {"KAFKA_URL", "DATABASE_URL", "DASHBOARD_PASSWORD", "SPARK_MASTER", "MAILGUN_SMTP_LOGIN"} <= read
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert sorted(name for name in read if f"`{name}`" not in guide) == []
    app = json.loads((ROOT / "app.json").read_text())["env"]
    described = set(app) | {name for name in read if name.startswith("MAILGUN_")}  # the add-on sets them
    assert sorted(read - described - NOT_IN_APP_JSON) == []


def events_logged() -> set[str]:
    text = code()
    return (set(re.findall(r'\blog\("([a-z_]+)"', text)) | set(re.findall(r'Outage\("([a-z_]+)"', text))
            | set(re.findall(r'failure_event="([a-z_]+)"', text)))


def test_every_event_the_code_logs_is_in_the_runbook():
    events = events_logged()
    assert {"batch", "query_failed", "skipped_record", "data_lost", "kafka_unavailable", "retention_failed"} <= events
    guide = (ROOT / "docs" / "operations.md").read_text()
    runbook = guide[guide.index("## Runbook"):]
    listed = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)?", runbook, re.M))
    assert sorted(events - {name for pair in listed for name in pair}) == []


# The repository's own folders: a path a doc names under one of them must exist.
TRACKED = ("services/", "shared/", "tests/", "devstack/", "bin/", "jvm/", "benchmarks/", "docs/", ".ci/")


def named_paths(text: str) -> set[str]:
    """Paths of the repository a doc names: in backticks under one of its
    folders, or as a relative link."""
    quoted = {c for c in re.findall(r"`([\w./-]+)`", text) if c.startswith(TRACKED)}
    linked = {c for c in re.findall(r"\]\(([^)#\s]+)", text) if not c.startswith(("http", "/"))}
    return quoted | linked


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_path_and_make_target_a_doc_names_exists(doc: Path):
    text = doc.read_text()
    missing = []
    for name in sorted(named_paths(text)):
        if not ((ROOT / name).exists() or (doc.parent / name).exists()):
            missing.append(name)
    assert missing == []
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    # `make X` in code: backticks, or a command line of an indented block.
    named = set(re.findall(r"`make ([a-z][\w-]*)", text)) | set(re.findall(r"^ {4}make ([a-z][\w-]*)", text, re.M))
    assert {"test", "bench"} & named or doc.name != "README.md"
    assert sorted(named - targets) == []


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_the_contract_in_the_repository_is_the_binding_one():
    binding = ROOT.parent / "shared" / "CONTRACT.md"
    if not binding.exists():
        pytest.skip("../shared is not beside this checkout")
    assert (ROOT / "docs" / "contract.md").read_text() == binding.read_text()


RECORDS = sorted((ROOT / "docs" / "decisions").glob("*.md"))
RECORD_SECTIONS = ["Context", "Decision", "Consequences", "Evidence"]
NOT_ADOPTED = "Tried, not adopted"


def sections(text: str) -> dict[str, str]:
    """A record's `## ` sections by heading, each its text to the next."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("record", RECORDS, ids=lambda path: path.name)
def test_each_decision_record_is_one_page_in_the_records_shape(record: Path):
    """Nygard's shape: a title, a status with its date, context, decision,
    consequences, and the evidence that decided it (a table and the command
    that reproduces it); what was measured and left, one table of its own."""
    text = record.read_text()
    lines = text.splitlines()
    assert len(lines) <= 80, f"{len(lines)} lines: a record is one page"
    assert lines[0].startswith("# ") and not re.search(r"\d{4}-\d\d-\d\d", lines[0]), "its date is in its status"
    assert re.match(r"Status: (adopted|not adopted|superseded by \S+), \d{4}-\d\d-\d\d", lines[2]), lines[2]
    found = sections(text)
    assert list(found) in (RECORD_SECTIONS, [*RECORD_SECTIONS, NOT_ADOPTED]), list(found)
    assert "\n### " not in text, "no subsections: a dated log belongs to git"
    evidence = found["Evidence"]
    assert re.search(r"^\|.+\|$", evidence, re.M), "the evidence is a table"
    assert re.search(r"^Reproduce: .*`[^`]+`", evidence, re.M), "with the command that reproduces it"
    if NOT_ADOPTED in found:
        assert re.search(r"^\| tried \| effect[^|]* \| why not \|$", found[NOT_ADOPTED], re.M), "tried, effect, why not"
