"""Alert channels beyond the topic: urgent alerts to PagerDuty, email alerts
over SMTP, each only when configured. A thread delivers what the outbox holds,
retrying a failing channel with backoff; the stream never waits for it.

    PAGERDUTY_ROUTING_KEY   Events API v2 integration key (urgent alerts)
    PAGERDUTY_EVENTS_URL    default https://events.pagerduty.com/v2/enqueue
    SMTP_SERVER, SMTP_PORT, SMTP_LOGIN, SMTP_PASSWORD
                            (or the Mailgun add-on's MAILGUN_SMTP_*)
    ALERT_EMAIL_FROM, ALERT_EMAIL_TO   (email alerts; TO may list several, comma-separated)
"""

import json
import smtplib
import threading
import urllib.request
from email.message import EmailMessage

from sqlalchemy import text

from shared.logs import log

MAX_BACKOFF_SECONDS = 300


class PagerDuty:
    severity = "urgent"

    def __init__(self, routing_key, url):
        self.routing_key = routing_key
        self.url = url

    def send(self, alert):
        event = {
            "routing_key": self.routing_key,
            "event_action": "trigger",
            "dedup_key": f"{alert['user']}/{alert['window_start']}/{alert['severity']}",
            "payload": {
                "summary": f"{alert['count']} failed logins for {alert['user']} "
                           f"in {alert['window_start']}..{alert['window_end']}",
                "source": "anomaly-detector",
                "severity": "critical",
                "custom_details": alert,
            },
        }
        request = urllib.request.Request(self.url, data=json.dumps(event).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 202:
                raise RuntimeError(f"PagerDuty answered {response.status}")


class Email:
    severity = "email"

    def __init__(self, server, port, login, password, sender, recipients):
        self.server, self.port = server, port
        self.login, self.password = login, password
        self.sender, self.recipients = sender, recipients

    def send(self, alert):
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message["Subject"] = f"{alert['count']} failed logins for {alert['user']}"
        message.set_content(json.dumps(alert, indent=2, ensure_ascii=False))
        with smtplib.SMTP(self.server, self.port, timeout=10) as smtp:
            smtp.ehlo()
            if smtp.has_extn("starttls"):
                smtp.starttls()
                smtp.ehlo()
            if self.login:
                smtp.login(self.login, self.password)
            smtp.send_message(message)


def configured_channels(environ):
    channels = []
    if environ.get("PAGERDUTY_ROUTING_KEY"):
        channels.append(PagerDuty(environ["PAGERDUTY_ROUTING_KEY"],
                                  environ.get("PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue")))
    smtp = lambda name: environ.get(f"SMTP_{name}") or environ.get(f"MAILGUN_SMTP_{name}", "")
    if smtp("SERVER") and environ.get("ALERT_EMAIL_TO"):
        channels.append(Email(smtp("SERVER"), int(smtp("PORT") or 587), smtp("LOGIN"), smtp("PASSWORD"),
                              environ.get("ALERT_EMAIL_FROM", "alerts@localhost"),
                              [address.strip() for address in environ["ALERT_EMAIL_TO"].split(",")]))
    return channels


class ChannelDelivery:
    def __init__(self, engine, channels, stop_requested):
        self.engine = engine
        self.channels = {channel.severity: channel for channel in channels}
        self.stop_requested = stop_requested
        self._thread = threading.Thread(target=self._run, name="alert-channels", daemon=True)

    def start(self):
        if self.channels:
            self._thread.start()

    def _run(self):
        while not self.stop_requested.is_set():
            try:
                self.deliver_due()
            except Exception as error:  # noqa: BLE001 - the outbox keeps the alert
                log("alert_delivery_failed", error=type(error).__name__)
            self.stop_requested.wait(1.0)

    def deliver_due(self, limit=50):
        with self.engine.begin() as connection:
            rows = connection.execute(text(
                "SELECT id, severity, payload, delivery_attempts FROM alert_outbox"
                " WHERE delivered_at IS NULL AND severity = ANY(:severities) AND next_delivery_at <= now()"
                " ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED"),
                {"severities": list(self.channels), "limit": limit}).all()
            for row in rows:
                self._deliver(connection, row)

    def _deliver(self, connection, row):
        channel = self.channels[row.severity]
        try:
            channel.send(json.loads(row.payload))
        except Exception as error:  # noqa: BLE001 - retried with backoff
            backoff = min(MAX_BACKOFF_SECONDS, 2 ** row.delivery_attempts)
            connection.execute(text(
                "UPDATE alert_outbox SET delivery_attempts = delivery_attempts + 1,"
                " next_delivery_at = now() + make_interval(secs => :backoff) WHERE id = :id"),
                {"id": row.id, "backoff": backoff})
            log("alert_delivery_failed", channel=type(channel).__name__, alert_id=row.id,
                error=type(error).__name__, retry_in_s=backoff)
            return
        connection.execute(text("UPDATE alert_outbox SET delivered_at = now() WHERE id = :id"),
                           {"id": row.id})
        log("alert_delivered", channel=type(channel).__name__, alert_id=row.id)
