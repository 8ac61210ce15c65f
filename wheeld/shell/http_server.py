"""HTTP on the event loop, facing a hostile network: the metrics endpoint and the marquee.

A server has a fixed number of connection slots (``Limits.max_connections``)
and keeps them for clients that ask for something and read the answer:

- **The request head** (request line and headers) must arrive whole within
  ``head_timeout_s`` and ``max_head_bytes``: a client dripping bytes
  (slowloris) or sending too many is cut off, however it spaces them.
- **One request per connection.** An answer says ``Connection: close`` and the
  connection closes once the client has taken it, so no second request ever
  arrives without that deadline. Bytes sent after the head are ignored, up to
  ``max_head_bytes``; past that the client is cut off.
- **What a client does not take is not kept.** An answer or a stream whose
  bytes stay unsent for ``write_timeout_s``, or a stream whose earlier bytes
  are still unsent past ``stream_high_water_bytes`` when the next come, is
  dropped: a browser that stopped reading. A stream's kernel send buffer is
  kept small, so what it has not taken waits where it is seen.
- **A full server makes room rather than refusing.** When every slot is held,
  a newcomer takes the slot of, in this order: the connection that has waited
  longest for its request head (idle or dripping); else one that is not taking
  what it was sent (unsent longest); else a stream, the oldest of its peer's.
  Each time from the peer holding the most slots (an IPv4 address, or an IPv6
  /64), so a flood from one place gives way to itself. Only when every slot is
  busy answering (a few milliseconds each) is the newcomer closed.

So a real client, whose request arrives in milliseconds and which reads what
it asked for, is served however many idle, dripping or non-reading
connections there are: they make room for it. A real stream (the board's) is
given up only to a newcomer from its own peer while no idle or non-reading
connection is left to drop.

The process must be able to hold every slot and a whole backlog at once
(asyncio accepts a burst of connections before the first is seen):
``Limits.descriptors``. ``start`` raises the open-file limit to that when it
may, and says so when it may not (the units set ``LimitNOFILE=``), since a
process out of descriptors stops accepting anyone for a second at a time.

Everything is asyncio protocol callbacks on the caller's loop, and each
connection's deadlines (head, write) are timers on a ``Scheduler`` (the
daemon's, or one of the server's own for a follower): no thread, and no task
or polling per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import resource
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from wheeld.shell.clock import HostClock
from wheeld.shell.scheduler import Scheduler, Timer

#: Descriptors a process needs besides its servers' (files, the broker, the wheel, ...).
DESCRIPTOR_RESERVE = 256
#: At most one "connections at the limit" log line per this many seconds.
CROWDED_LOG_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    """What one server grants its clients."""

    #: The request line and headers must all arrive within this many seconds...
    head_timeout_s: float
    #: ... and this many bytes.
    max_head_bytes: int
    #: Connections held at once; a newcomer past them takes the slot of the least useful.
    max_connections: int
    #: Connections the kernel queues before they are accepted.
    backlog: int
    #: What is written must be taken by the client within this many seconds.
    write_timeout_s: float
    #: A stream whose earlier bytes still unsent pass this is not reading.
    stream_high_water_bytes: int = 64 * 1024
    #: A stream's kernel send buffer (the kernel doubles it): a non-reading client
    #: then fills our buffer, where it is seen, instead of megabytes of the kernel's.
    stream_send_buffer_bytes: int = 64 * 1024

    @property
    def descriptors(self) -> int:
        """Sockets the server may hold at once: every slot, and a whole backlog
        accepted in one burst before the first newcomer is seen."""
        return self.max_connections + self.backlog


@dataclass(frozen=True, slots=True)
class Request:
    """A request head: its method, target and headers (names in lower case)."""

    method: str
    target: str
    headers: dict[str, str]

    @property
    def path(self) -> str:
        return urlsplit(self.target).path


Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: written, then the connection closed once the client has it."""

    status: HTTPStatus
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Stream:
    """An answer that goes on: ``opening``, then every ``HttpServer.broadcast``, until
    the client goes (to ``HEAD``: the headers alone, then closed)."""

    content_type: str
    opening: bytes = b""
    headers: Headers = ()


Route = Callable[[Request], Answer | Stream]


class _State(Enum):
    WAITING = "waiting for its request head"
    ANSWERED = "answered, closing once the answer is taken"
    STREAMING = "streaming"


def peer_group(peer: object) -> str:
    """Whose connection it is, as slots are shared out: an IPv4 address, an IPv6 /64."""
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    try:
        address = ipaddress.ip_address(str(host).partition("%")[0])
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class _Peer:
    """One peer's slots, all and by what each is doing, oldest first."""

    def __init__(self) -> None:
        self.held: dict[_Connection, None] = {}
        self.waiting: dict[_Connection, None] = {}
        self.unsent: dict[_Connection, None] = {}
        self.streams: dict[_Connection, None] = {}


class _Connection(asyncio.Protocol):
    """One client connection: its head read against the deadline, then its answer."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.state = _State.WAITING
        self.peer = ""
        #: Holding a slot (from its admission until it is gone).
        self.open = False
        #: Cut off already (its timers may still fire before it is told it is gone).
        self._cut = False
        self._head = bytearray()
        self._extra = 0
        self._head_timer: Timer | None = None
        self._write_timer: Timer | None = None

    # -- asyncio's callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = peer_group(transport.get_extra_info("peername"))
        # Told (pause_writing) as soon as anything is left unsent, and (resume_writing)
        # once it is all sent: the write deadline runs in between.
        transport.set_write_buffer_limits(high=0)
        self._head_timer = self._server.scheduler.after(
            self._limits.head_timeout_s, lambda now: self.drop("head_late"), "http head"
        )
        self._server._admit(self)

    def data_received(self, data: bytes) -> None:
        if self.state is not _State.WAITING:
            # Nothing more is read from a connection; a client pushing on is cut off.
            self._extra += len(data)
            if self._extra > self._limits.max_head_bytes:
                self.drop("sent_too_much")
            return
        start = max(0, len(self._head) - 3)
        self._head += data
        end = self._head.find(b"\r\n\r\n", start)
        if end < 0 or end + 4 > self._limits.max_head_bytes:
            if end >= 0 or len(self._head) > self._limits.max_head_bytes:
                self.drop("head_too_big")
            return
        self._extra = len(self._head) - end - 4
        head = bytes(self._head[:end])
        self._head = bytearray()
        self._cancel_head_timer()
        self._server._answer(self, head)

    def eof_received(self) -> bool:
        return False  # the client is done: close, once what is being written is sent

    def pause_writing(self) -> None:
        self._server._unsent(self)
        self._cancel_write_timer()
        self._write_timer = self._server.scheduler.after(
            self._limits.write_timeout_s, lambda now: self.drop("not_reading"), "http write"
        )

    def resume_writing(self) -> None:
        self._cancel_write_timer()
        self._server._sent(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_write_timer()
        self._server._forget(self)

    # -- what the server does with it ------------------------------------------------

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def send(self, data: bytes) -> None:
        """A stream's next bytes, unless what it was sent before is still piling up."""
        assert self.transport is not None
        if self.transport.get_write_buffer_size() > self._limits.stream_high_water_bytes:
            self.drop("not_reading")
            return
        self.transport.write(data)

    def close(self) -> None:
        """Close once everything written is sent (within the write deadline)."""
        assert self.transport is not None
        self.transport.close()

    def drop(self, reason: str) -> None:
        """Cut the connection off now, unsent bytes and all; ``reason`` is counted."""
        if not self._cut:
            self._server.dropped[reason] += 1
        self.abort()

    def abort(self) -> None:
        self._cut = True
        self._server._forget(self)
        if self.transport is not None:
            self.transport.abort()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None


class HttpServer:
    """Serves ``route``'s answers within ``limits``; ``name`` goes in its log lines."""

    def __init__(
        self,
        name: str,
        route: Route,
        limits: Limits,
        *,
        log: Any,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        #: Every connection's head and write deadlines are its timers.
        self.scheduler = scheduler if scheduler is not None else Scheduler(HostClock())
        self._route = route
        self._log = log
        self._server: asyncio.Server | None = None
        self._peers: dict[str, _Peer] = {}
        self._held = 0
        #: Connections cut off or turned away, by why.
        self.dropped: Counter[str] = Counter()
        self._crowded_said_at = float("-inf")
        self._crowded_since_said = 0

    @property
    def connections(self) -> int:
        """Slots held now."""
        return self._held

    @property
    def port(self) -> int:
        """The port listened on (the one picked, when asked for port 0); 0 before start."""
        if self._server is None or not self._server.sockets:
            return 0
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        """Listen; OSError (its strerror the system's own words) when the address is refused."""
        self._make_room_for_descriptors()
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Connection(self), host, port, backlog=self.limits.backlog
            )
        except OSError as exc:
            if exc.errno is None:
                raise
            # asyncio words it "error while attempting to bind on address ...": say it plainly.
            raise OSError(exc.errno, os.strerror(exc.errno)) from None

    async def close(self) -> None:
        """Stop listening and cut every connection off."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for peer in list(self._peers.values()):
            for connection in list(peer.held):
                connection.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await server.wait_closed()

    def broadcast(self, data: bytes) -> None:
        """``data`` to every stream (one that is not reading is dropped instead)."""
        for peer in list(self._peers.values()):
            for connection in list(peer.streams):
                connection.send(data)

    # -- the connections' bookkeeping ----------------------------------------------------

    def _admit(self, connection: _Connection) -> None:
        if self._held >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:
                connection.drop("refused")
                return
            victim[0].drop(f"made_room_{victim[1]}")
            self._crowded()
        peer = self._peers.setdefault(connection.peer, _Peer())
        peer.held[connection] = None
        peer.waiting[connection] = None
        self._held += 1
        connection.open = True

    def _victim(self) -> tuple[_Connection, str] | None:
        """Whose slot a newcomer takes, and why: see the module's documentation."""
        peers = self._peers.values()
        for kind, why in (("waiting", "idle"), ("unsent", "not_reading"), ("streams", "crowded")):
            candidates = [peer for peer in peers if getattr(peer, kind)]
            if candidates:
                crowded = max(candidates, key=lambda peer: len(peer.held))
                return next(iter(getattr(crowded, kind))), why
        return None

    def _forget(self, connection: _Connection) -> None:
        if not connection.open:
            return
        connection.open = False
        peer = self._peers[connection.peer]
        peer.waiting.pop(connection, None)
        peer.unsent.pop(connection, None)
        peer.streams.pop(connection, None)
        del peer.held[connection]
        self._held -= 1
        if not peer.held:
            del self._peers[connection.peer]

    def _unsent(self, connection: _Connection) -> None:
        if connection.open:
            self._peers[connection.peer].unsent[connection] = None

    def _sent(self, connection: _Connection) -> None:
        if connection.open:
            self._peers[connection.peer].unsent.pop(connection, None)

    def _crowded(self) -> None:
        """Says, at most once a minute, that slots ran out and connections made room."""
        self._crowded_since_said += 1
        now = self.scheduler.clock.monotonic()
        if now - self._crowded_said_at < CROWDED_LOG_EVERY_S:
            return
        self._log.warning(
            f"{self.name}: every connection slot held; the idlest dropped to make room",
            max_connections=self.limits.max_connections,
            made_room=self._crowded_since_said,
            dropped=dict(self.dropped),
        )
        self._crowded_said_at = now
        self._crowded_since_said = 0

    # -- answering -------------------------------------------------------------------------

    def _answer(self, connection: _Connection, head: bytes) -> None:
        if not connection.open:
            return
        self._peers[connection.peer].waiting.pop(connection, None)
        connection.state = _State.ANSWERED
        request = _parse(head)
        if request is None:
            answer: Answer | Stream = Answer(HTTPStatus.BAD_REQUEST, b"not an HTTP request\n")
        elif request.method not in ("GET", "HEAD"):
            answer = Answer(
                HTTPStatus.METHOD_NOT_ALLOWED, b"GET only\n", headers=(("Allow", "GET, HEAD"),)
            )
        else:
            try:
                answer = self._route(request)
            except Exception as exc:  # one request must never take the server down
                self._log.error(f"{self.name} request failed", error=f"{type(exc).__name__}: {exc}")
                answer = Answer(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
        head_only = request is not None and request.method == "HEAD"
        if isinstance(answer, Stream) and not head_only:
            self._stream(connection, answer)
            return
        if isinstance(answer, Stream):
            status, body = HTTPStatus.OK, b""
            fields = [("Content-Type", answer.content_type), *answer.headers]
        else:
            status, body = answer.status, answer.body
            fields = [
                ("Content-Type", answer.content_type),
                ("Content-Length", str(len(body))),
                *answer.headers,
            ]
        fields.append(("Connection", "close"))
        connection.write(_status_and_headers(status, fields) + (b"" if head_only else body))
        connection.close()

    def _stream(self, connection: _Connection, stream: Stream) -> None:
        assert connection.transport is not None
        sock = connection.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.stream_send_buffer_bytes
            )
        connection.state = _State.STREAMING
        self._peers[connection.peer].streams[connection] = None
        fields = [("Content-Type", stream.content_type), *stream.headers]
        connection.write(_status_and_headers(HTTPStatus.OK, fields) + stream.opening)

    def _make_room_for_descriptors(self) -> None:
        """Raise the open-file limit to what this server may hold, or say it cannot."""
        needed = self.limits.descriptors + DESCRIPTOR_RESERVE
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed:
            ceiling = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, ceiling), hard))
            except (OSError, ValueError) as exc:
                if getattr(exc, "errno", None) not in (None, errno.EPERM, errno.EINVAL):
                    raise
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY and soft < needed:
            self._log.warning(
                f"{self.name}: the open-file limit is below what its connections may need: "
                "raise LimitNOFILE= (a process out of descriptors stops accepting anyone)",
                limit=soft,
                needed=needed,
            )


def _parse(head: bytes) -> Request | None:
    """The request in ``head`` (up to the blank line), or None if it is not HTTP."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[0].isalpha():
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return Request(parts[0], parts[1], headers)


def _status_and_headers(status: HTTPStatus, fields: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", *(f"{k}: {v}" for k, v in fields)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
