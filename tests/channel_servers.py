"""Real local servers of the alert channels' protocols: PagerDuty's Events
API v2 (HTTPS) and SMTP (aiosmtpd)."""

import email
import email.policy
import json
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from devstack.local_stack import free_port


class EventsApiServer:
    """Accepts Events API v2 triggers on /v2/enqueue, over HTTPS with a
    certificate for `localhost` from `ca` (devstack.certificates); fails the
    first `failures` requests with 500, as an outage would; answers 400 to an
    event beyond PagerDuty's limits (dedup_key 255 characters, summary 1,024)
    or for a user in `refused_users`, as PagerDuty refuses an invalid event."""

    def __init__(self, ca, failures=0, refused_users=()):
        self.events, self.refused, self.invalid = [], 0, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v2/enqueue" or server.refused < failures:
                    server.refused += 1
                    self.send_response(500)
                elif (len(body["dedup_key"]) > 255 or len(body["payload"]["summary"]) > 1024
                      or body["payload"]["custom_details"]["user"] in refused_users):
                    server.invalid.append(body)
                    self.send_response(400)
                else:
                    server.events.append(body)
                    self.send_response(202)
                self.end_headers()
                self.wfile.write(b'{"status":"success"}')

            def log_message(self, *args):
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.socket = server_context(ca.issue("localhost", dns_names=["localhost"], server=True)).wrap_socket(
            self._http.socket, server_side=True)
        self.url = f"https://localhost:{self._http.server_address[1]}/v2/enqueue"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def stop(self):
        self._http.shutdown()


class SmtpServer:
    """Accepts mail, and any login, which it records. With `certificate`
    (devstack.certificates.Issued) it offers STARTTLS; without, it offers none
    and still lets a client log in, so that a client that would log in
    without TLS is caught."""

    def __init__(self, certificate=None):
        self.messages, self.logins = [], []
        server = self

        class Handler:
            async def handle_DATA(self, _server, _session, envelope):
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                server.messages.append((envelope.rcpt_tos, message))
                return "250 OK"

        def authenticator(_server, _session, _envelope, _mechanism, auth_data):
            server.logins.append(auth_data.login.decode())
            return AuthResult(success=True)

        tls = {"tls_context": server_context(certificate)} if certificate else {}
        self.port = free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, **tls,
                                      authenticator=authenticator, auth_require_tls=False)
        self._controller.start()

    def stop(self):
        self._controller.stop()


def server_context(certificate):
    """A server's TLS context with `certificate` (devstack.certificates.Issued)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder, "cert.pem"), Path(folder, "key.pem")
        cert.write_text(certificate.cert_pem)
        key.write_text(certificate.key_pem)
        context.load_cert_chain(cert, key)
    return context
