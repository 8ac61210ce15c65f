"""Hostile clients for wheeld's HTTP servers (the metrics endpoint, the marquee), on real
loopback sockets: connections that never send a request, clients that drip one
(slowloris), event streams that never read. For async tests, on the test's own loop."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from collections.abc import Iterator


@contextlib.contextmanager
def descriptors(needed: int) -> Iterator[None]:
    """At least ``needed`` open files for this process while inside (the hard limit allowing)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise AssertionError(f"the hard open-file limit {hard} is below the {needed} this needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def connect(port: int, *, source: str = "127.0.0.1") -> socket.socket:
    """A connection to 127.0.0.1:``port`` from ``source`` (another loopback address is
    another peer to the server), non-blocking."""
    sock = socket.socket()
    sock.setblocking(False)
    sock.bind((source, 0))
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


async def idle(port: int, count: int, *, source: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` connections that never send anything."""
    # One at a time: each connect yields to the loop, so a server on it accepts as they
    # come and the kernel's queue never overflows (a dropped SYN costs a second).
    return [await connect(port, source=source) for _ in range(count)]


async def not_reading(
    port: int, count: int, request: bytes, *, source: str = "127.0.0.1", receive_buffer: int = 0
) -> list[socket.socket]:
    """``count`` connections that send ``request`` and never read the answer
    (``receive_buffer``: their SO_RCVBUF, to fill up sooner)."""
    loop = asyncio.get_running_loop()
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((source, 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, request)
        socks.append(sock)
    return socks


class Drippers:
    """``count`` clients each sending a request head that never ends, a byte every
    ``every_s`` (slowloris); ``cut_after`` says how long each lasted before the
    server cut it off."""

    def __init__(self, port: int, count: int, head: bytes, every_s: float = 0.1) -> None:
        self._port = port
        self._head = head
        self._every_s = every_s
        self._tasks = [asyncio.create_task(self._drip()) for _ in range(count)]
        self.cut_after: list[float] = []

    async def _drip(self) -> None:
        loop = asyncio.get_running_loop()
        sock = await connect(self._port)
        began = time.monotonic()
        try:
            await loop.sock_sendall(sock, self._head)
            while True:
                await asyncio.sleep(self._every_s)  # the drip itself, not a wait for a condition
                await loop.sock_sendall(sock, b"a")
        except OSError:  # reset, or a broken pipe: cut off
            self.cut_after.append(time.monotonic() - began)
        finally:
            sock.close()

    async def all_cut(self, timeout: float) -> list[float]:
        """How long each lasted, once the server has cut every one off (within ``timeout``)."""
        async with asyncio.timeout(timeout):
            await asyncio.gather(*self._tasks)
        return self.cut_after

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()


async def closed(sock: socket.socket, timeout: float) -> bool:
    """Whether the server has closed ``sock`` (reading, and discarding, whatever it sent)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            while await loop.sock_recv(sock, 65536):
                pass
    except ConnectionError:
        return True  # cut off with a reset
    except TimeoutError:
        return False
    return True  # closed: the end of what it sent
