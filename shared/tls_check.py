"""A TLS check of the brokers before the workers' clients talk to them.

Kafka clients answer a wrong CA or a refused client certificate with retries
and stack traces; this says what is wrong in one line and stops the process.

Only a verdict is fatal: this client refusing the broker's certificate, or
the broker refusing this client's with a TLS alert. A broker that cannot be
reached, resets the connection or does not answer in time is an outage: the
check tries the next broker, and when none gave a verdict it waits with
backoff (`event=kafka_unavailable`) and tries again, until one answers or a
stop is asked for. One verdict is enough: every broker of a cluster has the
same CA and trusts the same clients.
"""

import socket
import ssl
import struct
import threading

from shared.config import ConfigError, KafkaConfig, ssl_context
from shared.outages import Outage

# ApiVersions v0, the first request every Kafka client sends.
API_VERSIONS_REQUEST = struct.pack(">ihhih", 16, 18, 0, 1, 6) + b"tls-ok"
# The TLS alerts (OpenSSL's reasons) with which a server refuses a client's
# certificate, or the lack of one: a refusal, not an outage.
REFUSED_CERTIFICATE_ALERTS = frozenset({
    "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_EXPIRED", "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "TLSV1_ALERT_UNKNOWN_CA", "TLSV1_ALERT_ACCESS_DENIED", "SSLV3_ALERT_HANDSHAKE_FAILURE",
})


class NoAnswer(OSError):
    """A broker closed the connection without a verdict."""


def check_tls(kafka: KafkaConfig | None, stop_requested: threading.Event, timeout: float = 10) -> None:
    """Return once a broker accepted this client over TLS; ConfigError if a
    verdict went against it; StopRequested if a stop came while every
    broker was away."""
    if kafka is None or not kafka.use_tls:
        return
    context = ssl_context(kafka)
    outage = Outage("kafka_unavailable", lambda error: isinstance(error, OSError), stop_requested)
    outage.retry(lambda: _first_verdict(context, kafka, stop_requested, timeout))


def _first_verdict(context: ssl.SSLContext, kafka: KafkaConfig, stop_requested: threading.Event,
                   timeout: float) -> None:
    """The first broker's verdict; the last broker's OSError if none gave one."""
    away: OSError | None = None
    for broker in kafka.brokers:
        if stop_requested.is_set():
            break
        try:
            return _verdict(context, broker, kafka, timeout)
        except OSError as error:  # away: the next broker may answer
            away = error
    raise away or NoAnswer()


def _verdict(context: ssl.SSLContext, broker: str, kafka: KafkaConfig, timeout: float) -> None:
    host, port = broker.rsplit(":", 1)
    variable = f"{kafka.stem}_CLIENT_CERT"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw, \
                context.wrap_socket(raw) as tls:
            # With TLS 1.3 the broker judges the client's certificate after
            # the handshake: its verdict comes with the first answer.
            tls.sendall(API_VERSIONS_REQUEST)
            if len(tls.recv(4)) < 4:
                raise NoAnswer()
    except ssl.SSLCertVerificationError as error:
        raise ConfigError(f"{kafka.stem}_TRUSTED_CERT",
                          f"did not verify the certificate of broker {broker} "
                          f"({error.verify_message})") from None
    except ssl.SSLError as error:
        if error.reason not in REFUSED_CERTIFICATE_ALERTS:
            raise
        if kafka.client_cert:
            raise ConfigError(variable, f"was refused by broker {broker} "
                                        f"(check it and {variable}_KEY)") from None
        raise ConfigError(variable, f"is required by broker {broker} (set it and {variable}_KEY)") from None
