"""The marquee's web server: static page, ``/state`` and ``/events`` (server-sent events).

The standard library's threading HTTP server: one thread per browser, each
blocking on the hub until the board changes. The page's EventSource
reconnects by itself after a restart of this server.

Built to face anything on the network: a request must arrive whole within
``REQUEST_TIMEOUT_S`` (a client dripping bytes is cut off, so half-sent
requests cannot pile up threads and sockets), one request per connection
(every answer but an event stream says ``Connection: close`` and closes, so no
second request ever arrives unwatched on a kept connection), the listen backlog
takes a crowd at once, event streams are bounded (past ``MAX_EVENT_CLIENTS`` a
browser gets 503 and tries again later), only the shipped files are served,
and a browser that goes away is no error.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

KEEPALIVE_S = 15.0
#: The request line and headers must all arrive within this.
REQUEST_TIMEOUT_S = 10.0
#: Any one read or write may block this long (a browser that stopped reading).
IO_TIMEOUT_S = 30.0
#: Connections the kernel queues before the server accepts them.
LISTEN_BACKLOG = 1024
MAX_EVENT_CLIENTS = 200
#: What a refused event stream is told: try again in this many seconds.
RETRY_AFTER_S = 5
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/marquee.css": ("marquee.css", "text/css; charset=utf-8"),
    "/marquee.js": ("marquee.js", "text/javascript; charset=utf-8"),
}
#: A browser gone, or one that stopped reading: the end of its request, not an error.
_GONE = (ConnectionError, TimeoutError)


class Hub:
    """The latest board snapshot, and a way to wait for the next one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._version = 0
        self._body = b"{}"
        self.closing = False

    def publish(self, snapshot: dict[str, Any]) -> None:
        body = json.dumps(snapshot, ensure_ascii=False, separators=(",", ":")).encode()
        with self._changed:
            self._version += 1
            self._body = body
            self._changed.notify_all()

    def current(self) -> tuple[int, bytes]:
        with self._changed:
            return self._version, self._body

    def wait(self, seen: int, timeout: float) -> tuple[int, bytes]:
        """The snapshot after version ``seen``, or the same one after ``timeout``."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self.closing, timeout)
            return self._version, self._body

    def close(self) -> None:
        with self._changed:
            self.closing = True
            self._changed.notify_all()


class RequestDeadlines:
    """Cuts off connections whose request has not arrived whole in time.

    A per-read timeout alone does not stop a client sending one byte just
    inside it, forever; one thread watches every pending request's deadline
    and shuts its socket down, which ends the handler's blocked read.
    """

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._pending: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="request-deadlines", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def expect(self, connection: socket.socket) -> None:
        with self._lock:
            self._pending[connection] = time.monotonic() + self.limit_s

    def arrived(self, connection: socket.socket) -> None:
        with self._lock:
            self._pending.pop(connection, None)

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        period = min(0.25, self.limit_s / 4)
        while not self._stopped.wait(period):
            now = time.monotonic()
            with self._lock:
                late = [c for c, deadline in self._pending.items() if deadline < now]
                for connection in late:
                    del self._pending[connection]
            for connection in late:
                with contextlib.suppress(OSError):  # already closed by its handler
                    connection.shutdown(socket.SHUT_RDWR)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        hub: Hub,
        log: Any,
        *,
        request_timeout_s: float,
        max_event_clients: int,
    ) -> None:
        self.hub = hub
        self.log = log
        self.deadlines = RequestDeadlines(request_timeout_s)
        self.event_slots = threading.BoundedSemaphore(max_event_clients)
        self.files = _static_files()
        if ":" in address[0]:  # an IPv6 address ([::1]:8080 in marquee.listen)
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, never a traceback; a browser that went away is not worth one."""
        error = sys.exception()
        if not isinstance(error, _GONE):
            self.log.warning(
                "marquee request failed",
                client=str(client_address[0]),
                error=f"{type(error).__name__}: {error}",
            )


def _static_files() -> dict[str, tuple[bytes, str]]:
    # Read once, served from memory: only these paths exist, so no request
    # path can reach any other file.
    static = resources.files("wheeld.marquee") / "static"
    return {path: ((static / name).read_bytes(), kind) for path, (name, kind) in _STATIC.items()}


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    server_version = "wheeld-marquee"
    timeout = IO_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not worth a log line each."""

    def handle_one_request(self) -> None:
        # Every request has its deadline, should a connection ever carry a second.
        self.server.deadlines.expect(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        # Called once the request line is in; it reads the headers.
        complete = super().parse_request()
        self.server.deadlines.arrived(self.connection)
        return complete

    def finish(self) -> None:
        self.server.deadlines.arrived(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._route(with_body=True)

    def do_HEAD(self) -> None:
        self._route(with_body=False)

    def _route(self, *, with_body: bool) -> None:
        path = urlsplit(self.path).path
        if path in self.server.files:
            body, content_type = self.server.files[path]
            self._send(HTTPStatus.OK, content_type, body, with_body)
        elif path == "/state":
            self._send(HTTPStatus.OK, "application/json", self.server.hub.current()[1], with_body)
        elif path == "/events":
            self._events(with_body)
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n", with_body)

    def _send(
        self,
        status: HTTPStatus,
        content_type: str,
        body: bytes,
        with_body: bool,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")  # and sets close_connection
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def _events(self, with_body: bool) -> None:
        if not with_body:
            self._event_headers(stream=False)
            return
        slots = self.server.event_slots
        if not slots.acquire(blocking=False):
            self._send(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "text/plain",
                b"too many boards connected\n",
                with_body,
                (("Retry-After", str(RETRY_AFTER_S)),),
            )
            return
        try:
            self._event_headers(stream=True)
            self._stream()
        except _GONE:
            return  # the browser went away, or stopped reading
        finally:
            slots.release()

    def _event_headers(self, *, stream: bool) -> None:
        """The stream's headers; only a stream itself keeps its connection, while it lasts."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "keep-alive" if stream else "close")
        self.end_headers()
        # "keep-alive" told the server to read another request after this one:
        # the stream ends only with the connection, and nothing is read after it.
        self.close_connection = True

    def _stream(self) -> None:
        hub = self.server.hub
        version, body = hub.current()
        self.wfile.write(b"retry: 1000\ndata: " + body + b"\n\n")
        self.wfile.flush()
        while not hub.closing:
            newer, body = hub.wait(version, KEEPALIVE_S)
            if newer == version:
                self.wfile.write(b": keepalive\n\n")
            else:
                version = newer
                self.wfile.write(b"data: " + body + b"\n\n")
            self.wfile.flush()


class MarqueeServer:
    """Serves the board on ``host:port`` from a background thread."""

    def __init__(
        self,
        hub: Hub,
        host: str,
        port: int,
        *,
        log: Any = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_event_clients: int = MAX_EVENT_CLIENTS,
    ) -> None:
        if log is None:
            from wheeld import logs

            log = logs.get("wheeld.marquee")
        self.hub = hub
        self.httpd = _HttpServer(
            (host, port),
            hub,
            log,
            request_timeout_s=request_timeout_s,
            max_event_clients=max_event_clients,
        )
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self.httpd.deadlines.start()
        self._thread.start()

    def stop(self) -> None:
        self.hub.close()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.deadlines.stop()
