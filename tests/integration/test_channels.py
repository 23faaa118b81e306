"""Alert channels against real local servers of their protocols: email only
over verified TLS, events within PagerDuty's limits whatever the user id, and
an alert a channel refuses for good set aside after one try."""

import json
import ssl
import threading

import pytest
from sqlalchemy import text

from devstack.certificates import CertificateAuthority
from devstack.postgres import postgres_url, query
from services.anomaly_detector.alerts import payload
from services.anomaly_detector.channels import ChannelDelivery, Email, PagerDuty
from services.anomaly_detector.tables import MIGRATIONS
from shared.migrations import migrate
from shared.worker.progress import engine_for
from tests.channel_servers import EventsApiServer, SmtpServer
from tests.clock import T0

ALERT = json.loads(payload("alice", T0, 10, 60, "email", 50))
HOSTILE_USERS = ["eve\r\nBcc: everyone@example.test", "line\u2028separator", "tab\tand\u200bzero-width",
                 "x" * 300, "ünïcødé 東京"]


@pytest.fixture
def smtp_servers():
    started = []

    def start(certificate=None):
        started.append(SmtpServer(certificate))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def email_to(server):
    return Email("localhost", server.port, "alerts", "smtp-password", "alerts@example.test", ["ops@example.test"])


def test_email_goes_over_starttls_to_a_trusted_certificate(trusted_ca, smtp_servers):
    server = smtp_servers(trusted_ca.issue("localhost", dns_names=["localhost"], server=True))
    email_to(server).send(ALERT)
    assert server.logins == ["alerts"]
    ((recipients, message),) = server.messages
    assert recipients == ["ops@example.test"]
    assert json.loads(message.get_payload(decode=True)) == ALERT


def test_a_server_without_starttls_gets_no_login_and_no_mail(trusted_ca, smtp_servers):
    server = smtp_servers()
    with pytest.raises(ConnectionError, match="offers no STARTTLS"):
        email_to(server).send(ALERT)
    assert server.logins == [] and server.messages == []


@pytest.mark.parametrize("issuer, host", [("impostor-ca", "localhost"), ("trusted", "mail.example.test")])
def test_a_certificate_from_an_unknown_ca_or_for_another_host_gets_no_login(trusted_ca, smtp_servers, issuer, host):
    ca = trusted_ca if issuer == "trusted" else CertificateAuthority(issuer)
    server = smtp_servers(ca.issue(host, dns_names=[host], server=True))
    with pytest.raises(ssl.SSLCertVerificationError):
        email_to(server).send(ALERT)
    assert server.logins == [] and server.messages == []


def test_hostile_user_ids_are_delivered_and_a_refused_alert_is_set_aside(
        database_url, trusted_ca, smtp_servers, capsys):
    engine = engine_for(postgres_url(database_url))
    migrate(engine, MIGRATIONS)
    users = [*HOSTILE_USERS, "refused"]
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO alert_outbox (user_id, window_start, severity, payload)"
            " VALUES (:user, to_timestamp(:window), :severity, :payload)"),
            [{"user": user, "window": T0, "severity": severity,
              "payload": payload(user, T0, 10, count, severity, threshold)}
             for user in users for severity, count, threshold in (("email", 60, 50), ("urgent", 101, 100))])
    pager = EventsApiServer(trusted_ca, refused_users={"refused"})
    smtp = smtp_servers(trusted_ca.issue("localhost", dns_names=["localhost"], server=True))
    delivery = ChannelDelivery(engine, [PagerDuty("routing-key", pager.url), email_to(smtp)], 0,
                               threading.Event())
    try:
        for _ in range(3):
            delivery.deliver_due()
    finally:
        pager.stop()
        engine.dispose()

    assert sorted(e["payload"]["custom_details"]["user"] for e in pager.events) == sorted(HOSTILE_USERS)
    assert len({e["dedup_key"] for e in pager.events}) == len(HOSTILE_USERS)
    assert all(len(e["dedup_key"]) == 64 and len(e["payload"]["summary"]) <= 1024 for e in pager.events)
    assert sorted(json.loads(m.get_payload(decode=True))["user"] for _, m in smtp.messages) == sorted(users)
    for recipients, message in smtp.messages:
        assert recipients == ["ops@example.test"] and message["Bcc"] is None
        assert not any(c in str(message["Subject"]) for c in "\r\n\u2028")
    assert len(pager.invalid) == 1, "a refused alert was tried again"
    assert query(database_url, "SELECT user_id, severity FROM alert_outbox WHERE refused_at IS NOT NULL") == [
        ("refused", "urgent")]
    refusals = [line for line in capsys.readouterr().out.splitlines() if "event=alert_refused" in line]
    assert len(refusals) == 1 and "channel=PagerDuty" in refusals[0]
