"""Alert channels beyond the topic: urgent alerts to PagerDuty, email alerts
over SMTP, each only when configured. A thread delivers what the outbox holds,
retrying a failing channel with backoff; the stream never waits for it.

    PAGERDUTY_ROUTING_KEY, PAGERDUTY_EVENTS_URL                  urgent alerts
    SMTP_SERVER, SMTP_PORT, SMTP_LOGIN, SMTP_PASSWORD (or the Mailgun add-on's
    MAILGUN_SMTP_*), ALERT_EMAIL_FROM, ALERT_EMAIL_TO (comma-separated)  email alerts

(parsed by shared.config into a ChannelsConfig)

Email goes over TLS only: implicit TLS on port 465, STARTTLS elsewhere, with
the certificate chain and host name verified against the system's CAs (or
SSL_CERT_FILE's); a server that offers no STARTTLS gets no login and no mail.

A channel that refuses one alert for good (PagerDuty's 4xx, SMTP's 5xx) has
it set aside with one log line; any other failure is retried with backoff.
"""

import hashlib
import json
import smtplib
import ssl
import threading
import unicodedata
import urllib.error
import urllib.request
from email.message import EmailMessage
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, text

from shared import background
from shared.config import ChannelsConfig
from shared.logs import log
from shared.outages import backoff_seconds

MAX_BACKOFF_SECONDS = 300
# PagerDuty's limits: summary 1,024 characters, dedup_key 255.
MAX_SUMMARY_CHARS = 1024
MAX_SHOWN_USER_CHARS = 100


class Refused(Exception):
    """The channel refused this alert and would refuse it again."""


def printable(text: str, limit: int) -> str:
    """`text` fit for a header or a summary line: control, format and
    line-separator characters replaced, at most `limit` characters."""
    cleaned = "".join("\ufffd" if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")
                      else c for c in text)
    return cleaned if len(cleaned) <= limit else cleaned[:limit - 1] + "\u2026"


def dedup_key(alert: dict) -> str:
    """One key per (user, window, severity), of fixed length whatever the user id."""
    identity = json.dumps([alert["user"], alert["window_start"], alert["severity"]], ensure_ascii=False)
    return hashlib.sha256(identity.encode()).hexdigest()


class Channel(Protocol):
    severity: str  # the alerts it takes

    def send(self, alert: dict[str, Any]) -> None:
        """Deliver one alert; Refused if the channel will never take it."""


class PagerDuty:
    severity = "urgent"

    def __init__(self, routing_key: str, url: str) -> None:
        self.routing_key = routing_key
        self.url = url  # https:// (shared.config refuses any other scheme)
        # The system's CAs, or SSL_CERT_FILE's as it is now: urllib's own
        # default would keep the first one the process used.
        self.tls = ssl.create_default_context()

    def send(self, alert: dict[str, Any]) -> None:
        summary = (f"{alert['count']} failed logins for {printable(alert['user'], MAX_SHOWN_USER_CHARS)}"
                   f" in {alert['window_start']}..{alert['window_end']}")
        event = {
            "routing_key": self.routing_key,
            "event_action": "trigger",
            "dedup_key": dedup_key(alert),
            "payload": {
                "summary": summary[:MAX_SUMMARY_CHARS],
                "source": "anomaly-detector",
                "severity": "critical",
                "custom_details": alert,
            },
        }
        request = urllib.request.Request(self.url, data=json.dumps(event).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.tls) as response:
                if response.status != 202:
                    raise RuntimeError(f"PagerDuty answered {response.status}")
        except urllib.error.HTTPError as error:
            if 400 <= error.code < 500 and error.code not in (408, 429):  # the event itself is refused
                raise Refused(f"PagerDuty answered {error.code}") from None
            raise RuntimeError(f"PagerDuty answered {error.code}") from None


class Email:
    severity = "email"

    def __init__(self, server: str, port: int, login: str, password: str, sender: str,
                 recipients: list[str]) -> None:
        self.server, self.port = server, port
        self.login, self.password = login, password
        self.sender, self.recipients = sender, recipients

    def send(self, alert: dict[str, Any]) -> None:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message["Subject"] = f"{alert['count']} failed logins for {printable(alert['user'], MAX_SHOWN_USER_CHARS)}"
        message.set_content(json.dumps(alert, indent=2, ensure_ascii=False))
        try:
            with self._connect() as smtp:
                if self.login:
                    smtp.login(self.login, self.password)
                smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as error:
            if all(code >= 500 for code, _ in error.recipients.values()):
                raise Refused("SMTP server refused every recipient") from None
            raise
        except smtplib.SMTPResponseException as error:
            if error.smtp_code >= 500 and not isinstance(error, smtplib.SMTPAuthenticationError):
                raise Refused(f"SMTP server answered {error.smtp_code}") from None
            raise

    def _connect(self) -> smtplib.SMTP:
        """An SMTP session over verified TLS, or an error before any login."""
        context = ssl.create_default_context()
        if self.port == 465:
            return smtplib.SMTP_SSL(self.server, self.port, timeout=10, context=context)
        smtp = smtplib.SMTP(self.server, self.port, timeout=10)
        try:
            smtp.ehlo()
            if not smtp.has_extn("starttls"):
                raise ConnectionError("SMTP server offers no STARTTLS: nothing sent without TLS")
            smtp.starttls(context=context)
            smtp.ehlo()
        except BaseException:
            smtp.close()
            raise
        return smtp


def configured_channels(config: ChannelsConfig) -> list[Channel]:
    channels: list[Channel] = []
    if config.pagerduty_routing_key:
        channels.append(PagerDuty(config.pagerduty_routing_key, config.pagerduty_events_url))
    if config.smtp_server and config.email_to:
        channels.append(Email(config.smtp_server, config.smtp_port, config.smtp_login, config.smtp_password,
                              config.email_from, list(config.email_to)))
    return channels


class ChannelDelivery:
    """Delivers the outbox's alerts to the channels, skipping those older
    than `retention_hours` (0: none), so a channel turned on later does not
    send every alert ever raised."""

    def __init__(self, engine: Engine, channels: list[Channel], retention_hours: int,
                 stop_requested: threading.Event) -> None:
        self.engine = engine
        self.channels = {channel.severity: channel for channel in channels}
        self.retention_hours = retention_hours
        self.stop_requested = stop_requested

    def start(self) -> None:
        if self.channels:  # the outbox keeps an alert whose delivery round failed
            background.every(1.0, self.deliver_due, name="alert-channels",
                             failure_event="alert_delivery_failed", stop_requested=self.stop_requested)

    def deliver_due(self, limit: int = 50) -> None:
        with self.engine.begin() as connection:
            rows = connection.execute(text(
                "SELECT id, severity, payload, delivery_attempts FROM alert_outbox"
                " WHERE delivered_at IS NULL AND refused_at IS NULL AND severity = ANY(:severities)"
                " AND next_delivery_at <= now()"
                " AND (:hours = 0 OR window_start >= now() - make_interval(hours => :hours))"
                " ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED"),
                {"severities": list(self.channels), "limit": limit, "hours": self.retention_hours}).all()
            for row in rows:
                self._deliver(connection, row)

    def _deliver(self, connection: Connection, row: Any) -> None:
        channel = self.channels[row.severity]
        name = type(channel).__name__
        try:
            channel.send(json.loads(row.payload))
        except Refused as refusal:
            connection.execute(text("UPDATE alert_outbox SET refused_at = now() WHERE id = :id"), {"id": row.id})
            log("alert_refused", channel=name, alert_id=row.id, error=str(refusal))
            return
        except Exception as error:  # noqa: BLE001 - retried with backoff
            backoff = backoff_seconds(row.delivery_attempts, MAX_BACKOFF_SECONDS)
            connection.execute(text(
                "UPDATE alert_outbox SET delivery_attempts = delivery_attempts + 1,"
                " next_delivery_at = now() + make_interval(secs => :backoff) WHERE id = :id"),
                {"id": row.id, "backoff": backoff})
            log("alert_delivery_failed", channel=name, alert_id=row.id,
                error=f"{type(error).__name__}: {error}"[:200], retry_in_s=backoff)
            return
        connection.execute(text("UPDATE alert_outbox SET delivered_at = now() WHERE id = :id"),
                           {"id": row.id})
        log("alert_delivered", channel=name, alert_id=row.id)
