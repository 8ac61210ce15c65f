"""The HTTP server the metrics endpoint and the marquee share, on real loopback sockets:
whose slot a newcomer takes, what is cut off, and what it answers on its own.

The two servers' own tests put it under load (a thousand idle connections,
slowloris, streams that never read): tests/test_metrics.py, tests/test_marquee.py."""

from __future__ import annotations

import asyncio
import resource
import socket
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

import pytest

from tests import siege
from tests.test_marquee import RecordingLog
from tests.test_publisher import until
from wheeld.shell.http_server import (
    DESCRIPTOR_RESERVE,
    Answer,
    HttpServer,
    Limits,
    Request,
    Stream,
    peer_group,
)

LIMITS = Limits(
    head_timeout_s=5.0, max_head_bytes=1024, max_connections=3, backlog=16, write_timeout_s=30.0
)


def _route(request: Request) -> Answer | Stream:
    if request.path == "/stream":
        return Stream("text/event-stream", b"hello\n")
    if request.path == "/fail":
        raise RuntimeError("a bug")
    return Answer(HTTPStatus.OK, b"ok\n")


async def _served(limits: Limits = LIMITS) -> tuple[HttpServer, RecordingLog]:
    log = RecordingLog()
    server = HttpServer("test", _route, limits, log=log)
    await server.start("127.0.0.1", 0)
    return server, log


async def _ask(port: int, request: bytes, *, source: str = "127.0.0.1") -> bytes:
    """The whole answer to ``request``, up to the server's close."""
    sock = await siege.connect(port, source=source)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, request)
        answer = b""
        async with asyncio.timeout(5):
            while chunk := await loop.sock_recv(sock, 65536):
                answer += chunk
        return answer
    finally:
        sock.close()


async def _holding(server: HttpServer, count: int) -> None:
    await until(lambda: server.connections == count, f"{count} connections held", 5)


@pytest.fixture
async def sockets() -> AsyncIterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


@pytest.mark.parametrize(
    ("peer", "group"),
    [
        (("192.0.2.7", 51000), "192.0.2.7"),
        (("2001:db8:1:2:aaaa::1", 51000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 51000, 0, 0), "2001:db8:1:2::/64"),
        (("::ffff:192.0.2.7", 51000, 0, 0), "192.0.2.7"),
        (("fe80::1%eth0", 51000, 0, 2), "fe80::/64"),
        (None, "None"),
    ],
)
def test_a_peer_is_an_address_or_an_ipv6_64(peer: Any, group: str) -> None:
    assert peer_group(peer) == group


async def test_a_newcomer_takes_the_slot_of_the_idle_then_the_unread_then_the_crowded(
    sockets: list[socket.socket],
) -> None:
    server, _ = await _served()
    port = server.port
    stream = b"GET /stream HTTP/1.1\r\n\r\n"
    try:
        # A reading stream, a stream that reads nothing of a big broadcast, an idle one.
        reading = [await siege.connect(port, source="127.0.0.2")]
        await asyncio.get_running_loop().sock_sendall(reading[0], stream)
        stuck = await siege.not_reading(port, 1, stream, source="127.0.0.4", receive_buffer=4096)
        sockets += reading + stuck + await siege.idle(port, 1, source="127.0.0.3")
        await _holding(server, 3)
        server.broadcast(b"x" * (1 << 20))
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(5):  # the reading stream takes all of it
            taken = 0
            while taken < (1 << 20):
                taken += len(await loop.sock_recv(reading[0], 1 << 20))

        assert (await _ask(port, b"GET / HTTP/1.1\r\n\r\n")).endswith(b"\r\n\r\nok\n")
        assert server.dropped == {"made_room_idle": 1}
        await _holding(server, 2)
        sockets += await siege.not_reading(port, 1, stream, source="127.0.0.1")
        await _holding(server, 3)

        assert (await _ask(port, b"GET / HTTP/1.1\r\n\r\n")).endswith(b"ok\n")
        assert server.dropped["made_room_not_reading"] == 1
        assert await siege.closed(stuck[0], timeout=1)
        await _holding(server, 2)
        sockets += await siege.not_reading(port, 1, stream, source="127.0.0.2")
        await _holding(server, 3)

        # Three healthy streams: 127.0.0.2 holds two of them, and gives its oldest up.
        assert (await _ask(port, b"GET / HTTP/1.1\r\n\r\n", source="127.0.0.5")).endswith(b"ok\n")
        assert server.dropped["made_room_crowded"] == 1
        assert await siege.closed(reading[0], timeout=1)
    finally:
        await server.close()


async def test_a_connections_head_deadline_is_a_timer_on_the_servers_scheduler(
    sockets: list[socket.socket],
) -> None:
    server, _ = await _served()
    try:
        sockets.append(await siege.connect(server.port))
        await _holding(server, 1)
        assert server.scheduler.names() == ["http head"]
        assert b" 200 " in await _ask(server.port, b"GET / HTTP/1.1\r\n\r\n")
        sockets.pop().close()
        await until(lambda: server.scheduler.names() == [], "no deadline left", 5)
    finally:
        await server.close()


async def test_a_stream_asked_for_by_head_is_its_headers_alone_and_keeps_no_slot() -> None:
    server, _ = await _served()
    try:
        assert (await _ask(server.port, b"HEAD /stream HTTP/1.1\r\n\r\n")).startswith(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        assert server.connections == 0 and not server.dropped
    finally:
        await server.close()


async def test_too_much_before_or_after_the_head_is_cut_off(sockets: list[socket.socket]) -> None:
    server, _ = await _served()
    loop = asyncio.get_running_loop()
    try:
        sock = await siege.connect(server.port)
        sockets.append(sock)
        await loop.sock_sendall(sock, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200)
        assert await siege.closed(sock, timeout=2)
        assert server.dropped == {"head_too_big": 1}

        (stream,) = await siege.not_reading(server.port, 1, b"GET /stream HTTP/1.1\r\n\r\n")
        sockets.append(stream)
        await loop.sock_sendall(stream, b"more" * 100)  # within what a head may be: ignored
        await _holding(server, 1)
        await loop.sock_sendall(stream, b"more" * 200)
        assert await siege.closed(stream, timeout=2)
        assert server.dropped["sent_too_much"] == 1
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (b"nonsense\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET /a b HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 405 Method Not Allowed"),
        (b"GET /fail HTTP/1.1\r\n\r\n", b"HTTP/1.1 500 Internal Server Error"),
    ],
)
async def test_what_it_cannot_answer_is_told_so_and_closed(request_: bytes, status: bytes) -> None:
    server, log = await _served()
    try:
        answer = await _ask(server.port, request_)
    finally:
        await server.close()
    assert answer.startswith(status + b"\r\n") and b"\r\nConnection: close\r\n" in answer
    failed = log.events("test request failed")
    assert failed == ([{"error": "RuntimeError: a bug"}] if b"/fail" in request_ else [])


async def test_the_open_file_limit_is_raised_to_what_the_slots_need() -> None:
    """Out of descriptors, asyncio stops accepting anyone for a second at a time."""
    limits = Limits(
        head_timeout_s=1, max_head_bytes=1024, max_connections=512, backlog=1024, write_timeout_s=1
    )
    needed = limits.descriptors + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
    try:
        server, log = await _served(limits)
        await server.close()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == needed
        assert not log.lines
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
