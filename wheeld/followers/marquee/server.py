"""The marquee's web server: static page, ``/state`` and ``/events`` (server-sent events).

Served on the marquee's event loop by ``wheeld.shell.http_server``, which keeps the
board's browsers served whatever else connects: a request head must arrive
whole within ``REQUEST_TIMEOUT_S``, one request per connection (every answer
but an event stream closes its connection), and past ``MAX_CONNECTIONS`` an
idle, dripping or non-reading connection makes room for the newcomer rather
than the newcomer being turned away. An event stream that does not read what
it is sent (its unsent bytes pass ``STREAM_HIGH_WATER_BYTES``, or stay unsent
``WRITE_TIMEOUT_S``) is dropped; the page's EventSource reconnects by itself
after a dropped stream or a restart of this server. Only the shipped files are
served, and a browser that goes away is no error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http import HTTPStatus
from importlib import resources
from typing import Any

from wheeld.shell.http_server import Answer, HttpServer, Limits, Request, Stream

#: A comment on every event stream this often: a browser gone is found by the write,
#: and a board that stopped reading fills up and is dropped.
KEEPALIVE_S = 15.0
#: The request line and headers must all arrive within this.
REQUEST_TIMEOUT_S = 10.0
#: ... and within this many bytes (a browser sends one or two KiB).
MAX_REQUEST_BYTES = 16 * 1024
#: What is sent must be taken within this (a browser that stopped reading).
WRITE_TIMEOUT_S = 30.0
#: Connections held at once. A table has a few screens, each an event stream and a
#: page load now and then; past this the idlest connection makes room.
MAX_CONNECTIONS = 512
#: Connections the kernel queues before the server accepts them: a crowd at once.
LISTEN_BACKLOG = 1024
#: A board snapshot is a few KiB: a stream with more than this still unsent when
#: the next comes has stopped reading.
STREAM_HIGH_WATER_BYTES = 64 * 1024
LIMITS = Limits(
    head_timeout_s=REQUEST_TIMEOUT_S,
    max_head_bytes=MAX_REQUEST_BYTES,
    max_connections=MAX_CONNECTIONS,
    backlog=LISTEN_BACKLOG,
    write_timeout_s=WRITE_TIMEOUT_S,
    stream_high_water_bytes=STREAM_HIGH_WATER_BYTES,
)
#: Every answer is the board now: never from a cache.
_NO_STORE = (("Cache-Control", "no-store"),)
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/marquee.css": ("marquee.css", "text/css; charset=utf-8"),
    "/marquee.js": ("marquee.js", "text/javascript; charset=utf-8"),
}


class Hub:
    """The latest board snapshot, sent to every event stream as it changes."""

    def __init__(self) -> None:
        self._body = b"{}"
        self._listeners: list[Callable[[bytes], None]] = []

    def publish(self, snapshot: dict[str, Any]) -> None:
        self._body = json.dumps(snapshot, ensure_ascii=False, separators=(",", ":")).encode()
        for listener in self._listeners:
            listener(self._body)

    def current(self) -> bytes:
        return self._body

    def listen(self, listener: Callable[[bytes], None]) -> None:
        """``listener`` gets every snapshot published from now on."""
        self._listeners.append(listener)


def _static_files() -> dict[str, tuple[bytes, str]]:
    # Read once, served from memory: only these paths exist, so no request
    # path can reach any other file.
    static = resources.files("wheeld.followers.marquee") / "static"
    return {path: ((static / name).read_bytes(), kind) for path, (name, kind) in _STATIC.items()}


class MarqueeServer:
    """Serves the board on ``host:port`` (port 0: any free one) from ``start`` to ``stop``."""

    def __init__(
        self, hub: Hub, host: str, port: int, *, log: Any = None, limits: Limits = LIMITS
    ) -> None:
        if log is None:
            from wheeld import logs

            log = logs.get("wheeld.followers.marquee")
        self.hub = hub
        self.host = host
        self._port = port
        self._files = _static_files()
        self.http = HttpServer("marquee", self._route, limits, log=log)
        self._keepalive: asyncio.TimerHandle | None = None
        hub.listen(lambda body: self.http.broadcast(b"data: " + body + b"\n\n"))

    @property
    def port(self) -> int:
        """The port served (the one picked for port 0); 0 before ``start``."""
        return self.http.port

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host  # IPv6, as a URL writes it
        return f"http://{shown}:{self.port}/"

    async def start(self) -> None:
        """Listen; OSError (the system's words, e.g. "Address already in use") if refused."""
        await self.http.start(self.host, self._port)
        self._keep_alive()

    async def stop(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        await self.http.close()

    def _keep_alive(self) -> None:
        self.http.broadcast(b": keepalive\n\n")
        loop = asyncio.get_running_loop()
        self._keepalive = loop.call_later(KEEPALIVE_S, self._keep_alive)

    def _route(self, request: Request) -> Answer | Stream:
        path = request.path
        if path in self._files:
            body, content_type = self._files[path]
            return Answer(HTTPStatus.OK, body, content_type, _NO_STORE)
        if path == "/state":
            return Answer(HTTPStatus.OK, self.hub.current(), "application/json", _NO_STORE)
        if path == "/events":
            # The whole board first, so the page needs no fetch of its own (which could
            # land after a newer event); then each new one as it is published.
            opening = b"retry: 1000\ndata: " + self.hub.current() + b"\n\n"
            return Stream("text/event-stream", opening, _NO_STORE)
        return Answer(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", _NO_STORE)
