"""The marquee's web server: static page, ``/state`` and ``/events`` (server-sent events).

The standard library's threading HTTP server: one thread per browser, each
blocking on the hub until the board changes. The page's EventSource
reconnects by itself after a restart of this server.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

KEEPALIVE_S = 15.0
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/marquee.css": ("marquee.css", "text/css; charset=utf-8"),
    "/marquee.js": ("marquee.js", "text/javascript; charset=utf-8"),
}


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


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    static = resources.files("wheeld.marquee") / "static"

    class Handler(BaseHTTPRequestHandler):
        server_version = "wheeld-marquee"

        def log_message(self, format: str, *args: Any) -> None:
            """Requests are not worth a log line each."""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in _STATIC:
                name, content_type = _STATIC[path]
                self._send(HTTPStatus.OK, content_type, (static / name).read_bytes())
            elif path == "/state":
                self._send(HTTPStatus.OK, "application/json", hub.current()[1])
            elif path == "/events":
                self._events()
            else:
                self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

        def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _events(self) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "keep-alive")
            self.end_headers()
            version, body = hub.current()
            try:
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
            except (BrokenPipeError, ConnectionResetError):
                return  # the browser went away

    return Handler


class MarqueeServer:
    """Serves the board on ``host:port`` from a background thread."""

    def __init__(self, hub: Hub, host: str, port: int) -> None:
        self.hub = hub
        self.httpd = ThreadingHTTPServer((host, port), _handler(hub))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.hub.close()
        self.httpd.shutdown()
        self.httpd.server_close()
