"""Real local servers of the alert channels' protocols: PagerDuty's Events
API v2 (HTTP) and SMTP (aiosmtpd)."""

import email
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller

from shared.local_stack import free_port


class EventsApiServer:
    """Accepts Events API v2 triggers on /v2/enqueue; fails the first
    `failures` requests with 500, as an outage would."""

    def __init__(self, failures=0):
        self.events, self.refused = [], 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v2/enqueue" or server.refused < failures:
                    server.refused += 1
                    self.send_response(500)
                else:
                    server.events.append(body)
                    self.send_response(202)
                self.end_headers()
                self.wfile.write(b'{"status":"success"}')

            def log_message(self, *args):
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v2/enqueue"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def stop(self):
        self._http.shutdown()


class SmtpServer:
    def __init__(self):
        self.messages = []
        server = self

        class Handler:
            async def handle_DATA(self, _server, _session, envelope):
                server.messages.append((envelope.rcpt_tos, email.message_from_bytes(envelope.content)))
                return "250 OK"

        self.port = free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self):
        self._controller.stop()
