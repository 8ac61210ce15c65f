"""Where a simulated wheel's bytes go: a pseudo-terminal, a TCP listener or a file.

Frames are paced by their wheel time, divided by a speed factor; a file gets
them all at once, stamped as if played in real time from now.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
import struct
import tempfile
import termios
import time
import tty
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TextIO

from wheeld.core.capture import FORMAT_LINE, format_line
from wheeld_simulators.physics import Disconnect, GamePlan, WheelSimulator


class Sink(Protocol):
    """Something a wheel can talk into."""

    def write(self, data: bytes) -> None: ...

    async def disconnect(self, seconds: float) -> None: ...

    def close(self) -> None: ...


class PtySink:
    """A pseudo-terminal; the daemon opens ``link`` (a stable symlink to the slave). With
    no ``link``, one in a directory of its own, removed with it at the close."""

    def __init__(self, link: Path | None = None) -> None:
        #: The directory made for the link, if none was given: not left behind empty.
        self._made: Path | None = None
        if link is None:
            self._made = Path(tempfile.mkdtemp(prefix="wheeld-sim-"))
            link = self._made / "wheel"
        elif os.path.lexists(link) and not link.is_symlink():
            # Replaced, then removed at the close: a file given by mistake (a key) would
            # be lost. Only a link (one a run before left) is replaced.
            raise FileExistsError(f"--link {link}: exists and is no symlink; not replaced")
        self.link = link
        self.master = -1
        self.slave_name = ""
        #: A wheel that answers commands reads them itself.
        self.drain_input = True
        self._open()

    def _open(self) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)  # raw: no echo, no line discipline
        os.set_blocking(master, False)
        self.slave_name = os.ttyname(slave)
        os.close(slave)
        fresh = self.link.with_name(self.link.name + ".new")
        with contextlib.suppress(FileNotFoundError):
            fresh.unlink()
        fresh.symlink_to(self.slave_name)
        fresh.replace(self.link)
        self.master = master

    def has_reader(self) -> bool:
        """True once something opened the slave (the master stops reporting a hang-up)."""
        poller = select.poll()
        poller.register(self.master, select.POLLIN)
        return not any(mask & select.POLLHUP for _, mask in poller.poll(0))

    async def wait_for_reader(self) -> None:
        """Hold the wheel until the daemon opens the port: nothing it says is lost."""
        while not self.has_reader():
            await asyncio.sleep(0.05)

    def write(self, data: bytes) -> None:
        with contextlib.suppress(BlockingIOError):  # nobody reading: a wheel does not wait
            os.write(self.master, data)
        if self.drain_input:
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self.master, 4096)  # what the host sent: drained, unanswered

    async def disconnect(self, seconds: float) -> None:
        # The link goes first: the pty's number is soon another's (a test running
        # beside, a demo), and a daemon reopening the link must not find that one.
        with contextlib.suppress(FileNotFoundError):
            self.link.unlink()
        os.close(self.master)
        await asyncio.sleep(seconds)
        self._open()
        await self.wait_for_reader()

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.link.unlink()  # first, as in disconnect
        if self._made is not None:
            with contextlib.suppress(OSError):
                self._made.rmdir()
        if self.master >= 0:
            self._drain()
            os.close(self.master)
            self.master = -1

    def _drain(self, within_s: float = 5.0) -> None:
        """Wait (at most ``within_s``) for the reader to take what was written: closing
        the master throws away what the slave side has not read yet, and a daemon would
        lose the last game's frames (and call the link lost) when the wheel stops."""
        if not self.has_reader():
            return  # no one to wait for
        try:
            fd = os.open(self.slave_name, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            deadline = time.monotonic() + within_s
            time.sleep(0.05)  # what was just written reaches the slave's queue
            while time.monotonic() < deadline:
                waiting = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
                if not waiting:
                    return
                time.sleep(0.02)
        except OSError:
            return
        finally:
            os.close(fd)


class TcpSink:
    """A TCP listener for ``socket://`` URLs; every connected client hears the wheel."""

    def __init__(self) -> None:
        self.clients: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._client, host, port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.add(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass  # what the host sent: drained, unanswered
        self.clients.discard(writer)

    def write(self, data: bytes) -> None:
        for writer in list(self.clients):
            if writer.is_closing():
                self.clients.discard(writer)
            else:
                writer.write(data)

    async def disconnect(self, seconds: float) -> None:
        for writer in list(self.clients):
            writer.close()
        self.clients.clear()
        await asyncio.sleep(seconds)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.clients:
            writer.close()


class CaptureSink:
    """A capture file: lines stamped with the time they would have been heard."""

    def __init__(self, path: Path, start: float) -> None:
        self.handle: TextIO = path.open("w", encoding="ascii")
        self.handle.write(f"{FORMAT_LINE}\n# driver: wrp\n# source: wheeld simulate\n")
        self.start = start
        self.at = start

    def write(self, data: bytes) -> None:
        for line in data.split(b"\r\n"):
            if line:
                self.handle.write(format_line(self.at, "<", line))

    async def disconnect(self, seconds: float) -> None:
        """Silence: the wheel-time gap already shows in the next line's stamp."""

    def close(self) -> None:
        self.handle.close()


async def play(
    simulator: WheelSimulator,
    sink: Sink,
    *,
    speed: float = 1.0,
    games: int | None = None,
    faults: list[str | None] | None = None,
    paced: bool = True,
    on_game: Callable[[int, GamePlan], None] | None = None,
    before_game: Callable[[], Awaitable[None]] | None = None,
) -> list[GamePlan]:
    """Play games into ``sink``: ``faults`` in order first, then at the configured rate.

    ``before_game`` is awaited before each game is planned, e.g. to hear the
    controller's verdict on the last one (``WheelSimulator.follow_table``); the
    time it takes shifts the rest of the session rather than bunching frames.
    """
    plans: list[GamePlan] = []
    queue = list(faults or [])
    wheel = simulator.wheel
    sent = 0
    start_wall = time.monotonic()
    noise_rate = simulator.settings.noise_rate
    while games is None or len(plans) < games:
        if before_game is not None:
            waited_from = time.monotonic()
            await before_game()
            start_wall += time.monotonic() - waited_from
        new = simulator.play(queue.pop(0) if queue else None)
        for plan in new:
            plans.append(plan)
            if on_game is not None:
                on_game(len(plans), plan)
        for index in range(sent, len(wheel.lines)):
            at, frame = wheel.lines[index]
            marker = simulator.disconnects.pop(index, None)
            if isinstance(marker, Disconnect):
                await sink.disconnect(max(0.5, marker.ms / 1000 / speed) if paced else 0)
            if paced:
                delay = start_wall + at / speed - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            if isinstance(sink, CaptureSink):
                sink.at = round(sink.start + at, 3)
            if noise_rate and simulator.rng.random() < noise_rate:
                sink.write(simulator.noise())
            sink.write(frame + b"\r\n")
        sent = len(wheel.lines)
    return plans
