"""The brokers' TLS check at a worker's start, against real TLS listeners:
only a verdict stops the process; a broker that resets or is away is waited for."""

import socket
import ssl
import struct
import tempfile
import threading
from pathlib import Path

import pytest

from devstack.certificates import CertificateAuthority
from shared.config import ConfigError, load
from shared.outages import StopRequested
from shared.tls_check import check_tls


class FlakyBroker:
    """A TCP listener on loopback that resets the first `resets` connections
    (RST, as a broker's load balancer does while the broker restarts), then
    serves TLS as a Kafka broker with client authentication: it answers the
    first request with four bytes once the client's certificate verified."""

    def __init__(self, ca, resets):
        self.resets, self.accepted = resets, 0
        self.reset_one = threading.Event()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca.cert_pem)
        self.context.verify_mode = ssl.CERT_REQUIRED
        issued = ca.issue("broker", dns_names=["broker.example"], server=True)
        with tempfile.TemporaryDirectory() as folder:
            cert, key = Path(folder, "cert.pem"), Path(folder, "key.pem")
            cert.write_text(issued.cert_pem)
            key.write_text(issued.key_pem)
            self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            if self.accepted <= self.resets:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.close()
                self.reset_one.set()
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection):
        try:
            with self.context.wrap_socket(connection, server_side=True) as tls:
                if tls.recv(4):
                    tls.sendall(b"\0\0\0\0")
        except (ssl.SSLError, OSError):
            pass  # a client it refused

    def close(self):
        self.listener.close()


@pytest.fixture(scope="module")
def ca():
    return CertificateAuthority("tls-check-ca")


def kafka(ca, port, client=True):
    client_certificate = ca.issue("app") if client else None
    environment = {"KAFKA_URL": f"kafka+ssl://127.0.0.1:{port}", "KAFKA_TRUSTED_CERT": ca.cert_pem}
    if client_certificate:
        environment.update(KAFKA_CLIENT_CERT=client_certificate.cert_pem,
                           KAFKA_CLIENT_CERT_KEY=client_certificate.key_pem)
    return load(environment).kafka


def test_a_broker_that_resets_connections_for_a_while_is_waited_for_then_checked(ca, capsys):
    broker = FlakyBroker(ca, resets=2)
    try:
        check_tls(kafka(ca, broker.port), threading.Event())
    finally:
        broker.close()
    assert broker.accepted == 3  # two resets, then the verdict
    away = [line for line in capsys.readouterr().out.splitlines() if line.startswith("event=kafka_unavailable")]
    assert len(away) == 2 and all("error=ConnectionResetError" in line for line in away), away


def test_the_first_broker_that_answers_gives_the_verdict(ca):
    broker = FlakyBroker(ca, resets=0)
    away = socket.create_server(("127.0.0.1", 0))  # listens, never answers: cut by the timeout
    environment = kafka(ca, broker.port)
    both = load({"KAFKA_URL": f"kafka+ssl://127.0.0.1:{away.getsockname()[1]},kafka+ssl://127.0.0.1:{broker.port}",
                 "KAFKA_TRUSTED_CERT": ca.cert_pem, "KAFKA_CLIENT_CERT": environment.client_cert,
                 "KAFKA_CLIENT_CERT_KEY": environment.client_key_pkcs8}).kafka
    try:
        check_tls(both, threading.Event(), timeout=0.5)
    finally:
        broker.close()
        away.close()
    assert broker.accepted == 1


def test_a_broker_that_refuses_the_client_is_one_line_naming_the_variable(ca):
    broker = FlakyBroker(ca, resets=0)
    try:
        with pytest.raises(ConfigError) as refused:
            check_tls(kafka(ca, broker.port, client=False), threading.Event())
        with pytest.raises(ConfigError) as unknown:
            check_tls(kafka(CertificateAuthority("another-ca"), broker.port), threading.Event())
    finally:
        broker.close()
    assert str(refused.value) == (f"config error: KAFKA_CLIENT_CERT is required by broker 127.0.0.1:{broker.port} "
                                  "(set it and KAFKA_CLIENT_CERT_KEY)")
    assert str(unknown.value).startswith("config error: KAFKA_TRUSTED_CERT did not verify the certificate of broker")


def test_a_stop_while_every_broker_resets_ends_the_check(ca):
    broker = FlakyBroker(ca, resets=1_000_000)
    stop = threading.Event()
    # The stop comes in the back-off after the first reset: the wait is cut short.
    threading.Thread(target=lambda: broker.reset_one.wait(10) and stop.set(), daemon=True).start()
    try:
        with pytest.raises(StopRequested):
            check_tls(kafka(ca, broker.port), stop)
    finally:
        broker.close()
    assert broker.accepted == 1
