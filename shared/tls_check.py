"""A TLS check of the brokers before anything else talks to them.

Kafka clients answer a wrong CA or a refused client certificate with retries
and stack traces; this says what is wrong in one line and stops the process.
A broker that cannot be reached is not an error here: clients retry.
"""

import socket
import ssl
import struct

from shared.config import ConfigError, KafkaConfig, ssl_context

# ApiVersions v0, the first request every Kafka client sends.
API_VERSIONS_REQUEST = struct.pack(">ihhih", 16, 18, 0, 1, 6) + b"tls-ok"


def check_tls(kafka: KafkaConfig | None, timeout: float = 10) -> None:
    if kafka is None or not kafka.use_tls:
        return
    context = ssl_context(kafka)
    for broker in kafka.brokers:
        host, port = broker.rsplit(":", 1)
        try:
            raw = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError:
            continue
        with raw:
            _handshake(context, raw, broker, kafka)


def _handshake(context: ssl.SSLContext, raw: socket.socket, broker: str, kafka: KafkaConfig) -> None:
    try:
        with context.wrap_socket(raw) as tls:
            # With TLS 1.3 the broker judges the client's certificate after
            # the handshake: its verdict comes with the first answer.
            tls.sendall(API_VERSIONS_REQUEST)
            answered = len(tls.recv(4)) == 4
    except ssl.SSLCertVerificationError as error:
        raise ConfigError(f"{kafka.stem}_TRUSTED_CERT",
                          f"did not verify the certificate of broker {broker} "
                          f"({error.verify_message})") from None
    except (ssl.SSLError, ConnectionError, socket.timeout):
        answered = False
    if not answered:
        variable = f"{kafka.stem}_CLIENT_CERT"
        if kafka.client_cert:
            raise ConfigError(variable, f"was refused by broker {broker} "
                                        f"(check it and {variable}_KEY)")
        raise ConfigError(variable, f"is required by broker {broker} (set it and {variable}_KEY)")
