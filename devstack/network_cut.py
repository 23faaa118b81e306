"""A TCP forwarder a test can cut: the network between one process and a
server going away (every open connection dropped, every new one closed as
it comes) and coming back, while the server itself runs on for everyone else."""

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class NetworkCut:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="network-cut", daemon=True).start()

    def through(self, url: str) -> str:
        """`url` (a server's, at this forwarder's target) with its port this forwarder's."""
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
        return urlunsplit(parts._replace(netloc=f"{netloc}:{self.port}"))

    def cut(self) -> None:
        self._up.clear()
        with self._lock:
            connections, self._open = self._open, set()
        for connection in connections:
            _close(connection)

    def restore(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            if not self._up.is_set():
                _close(client)
                continue
            try:
                server = socket.create_connection(self._target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), name="network-cut", daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.difference_update((source, sink))
            _close(source)
            _close(sink)


def _close(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()
