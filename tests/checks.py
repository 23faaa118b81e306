"""What tests check about the workers they start, and a broker that is away to start them against."""

from urllib.parse import urlsplit

import pytest

from devstack.local_stack import free_port
from shared.config import load

# For a test that runs on the Heroku-like broker (TLS, client certificates,
# prefix ACLs) instead of the plaintext one; see conftest's `stack`.
heroku_like = pytest.mark.parametrize("stack", ["heroku"], indirect=True)
# What every Spark 4 JVM says on stderr as it starts; a worker starts its JVM
# while it checks its brokers' TLS and before it reaches Postgres.
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def lines_said(output):
    """The output's lines but the JVM's notice."""
    return [line for line in output.strip().splitlines() if line != JVM_NOTICE]


# Secrets a process may be given whole, as a value of its own.
SECRET_VARIABLES = ("PAGERDUTY_ROUTING_KEY", "SMTP_PASSWORD", "MAILGUN_SMTP_PASSWORD", "DASHBOARD_PASSWORD")


def assert_no_secret_in(output, environment):
    """No secret of `environment` appears in `output`: no line of the Kafka
    key (as given, or as the PKCS#8 Java reads) or of the certificates,
    not DATABASE_URL's password, and no value of SECRET_VARIABLES."""
    pems = {variable: environment.get(variable, "")
            for variable in ("KAFKA_CLIENT_CERT_KEY", "KAFKA_CLIENT_CERT", "KAFKA_TRUSTED_CERT")}
    if pems["KAFKA_CLIENT_CERT_KEY"]:
        pems["the key as PKCS#8"] = load(environment).kafka.client_key_pkcs8
    for name, pem in pems.items():
        for line in pem.splitlines()[1:-1]:
            assert line not in output, f"a line of {name} was printed"
    values = {name: environment.get(name) for name in SECRET_VARIABLES}
    values["DATABASE_URL's password"] = urlsplit(environment.get("DATABASE_URL", "")).password
    for name, value in values.items():
        assert not value or value not in output, f"{name} was printed"


def assert_no_stack_trace(output):
    """An expected fault is logged in lines of its own: no Python traceback,
    and no Java stack frame from Spark's loggers (shared/log4j2.properties)."""
    assert "Traceback" not in output
    assert "\tat " not in output and "Caused by:" not in output, "a Java stack trace was printed"


def broker_away() -> str:
    """host:port of a broker that is away: a port nothing listens on."""
    return f"127.0.0.1:{free_port()}"
