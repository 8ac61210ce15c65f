"""The serial link to the wheel: open exclusively, read, and reopen when it goes.

Device paths, pseudo-terminals and the pyserial URLs the configuration allows
(``socket://``, ``hwgrep://``) all go through pyserial-asyncio-fast. Bytes are
handed on as they arrive, with the host time; nothing here decodes or decides.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TextIO

from wheeld.core.capture import (
    CUT_MARK,
    FORMAT_LINE,
    MAX_LINE_CHARS,
    clock_step_comment,
    format_line,
)
from wheeld.core.framing import CUT_BYTES, LineSplitter, lines_of
from wheeld.shell.usb_reset import (
    ResetPolicy,
    UsbAdapter,
    identify_usb_adapter,
    is_resettable_port,
    is_url,
    reset_usb_adapter,
)

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0
#: A port lost sooner than this after it opened never really came up: the backoff
#: goes on growing, so a port that accepts and drops at once is not reopened
#: thousands of times a second.
STABLE_AFTER_S = 1.0


class LinkOpenError(Exception):
    """The port could not be opened; the message names it."""


class CaptureWriter:
    """Records the link's traffic in the capture format, line by line.

    A line the wheel runs on without a line end is written in pieces of
    ``CUT_BYTES``, each marked and counted in ``cut_lines``, so a stream of
    garbage costs time and memory in proportion to its length. Appending to a
    capture that a crash left mid-line first drops that unfinished last line
    (``dropped_bytes``): it could never be read back, and what follows could.
    """

    def __init__(self, path: Path, driver: str) -> None:
        self.cut_lines = 0
        self.dropped_bytes = 0
        self._from_wheel = LineSplitter()
        try:
            # O_NONBLOCK: a FIFO with no reader fails at once instead of hanging.
            fd = os.open(
                path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666
            )
        except OSError as exc:
            raise OSError(f"--capture {path}: {exc.strerror or exc}") from None
        try:
            size = self._check_existing(fd, path)
        except OSError:
            os.close(fd)
            raise
        self._file: TextIO = os.fdopen(fd, "a", encoding="ascii", buffering=1)
        if size == 0:
            self._file.write(f"{FORMAT_LINE}\n# driver: {driver}\n")

    def _check_existing(self, fd: int, path: Path) -> int:
        """The size to append at, after refusing what is not a capture."""
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"--capture {path}: not a regular file")
        if status.st_size == 0:
            return 0
        if os.pread(fd, len(FORMAT_LINE) + 1, 0) != f"{FORMAT_LINE}\n".encode():
            raise OSError(f"--capture {path}: not a wheeld capture; refusing to append to it")
        tail_at = max(0, status.st_size - MAX_LINE_CHARS)
        tail = os.pread(fd, status.st_size - tail_at, tail_at)
        if tail.endswith(b"\n"):
            return status.st_size
        kept = tail_at + tail.rfind(b"\n") + 1
        os.ftruncate(fd, kept)
        self.dropped_bytes = status.st_size - kept
        return kept

    def received(self, data: bytes, at: float) -> None:
        # A piece of a line that runs on is written now, not held for a line end
        # that may never come.
        for line in self._from_wheel.feed(data):
            self._write("<", line.data, at, runs_on=line.over)

    def clock_step(self, step_s: float) -> None:
        """Record that the host's wall clock stepped, so replay does not read silence."""
        self._file.write(clock_step_comment(step_s))

    def sent(self, data: bytes, at: float) -> None:
        for line in lines_of(data):
            self._write(">", line, at)

    def _write(
        self, direction: Literal["<", ">"], line: bytes, at: float, *, runs_on: bool = False
    ) -> None:
        """Write a line, marked when it is a piece of one that ran on, in pieces when long."""
        if len(line) <= CUT_BYTES and not runs_on:
            self._file.write(format_line(at, direction, line))
            return
        for start in range(0, max(len(line), 1), CUT_BYTES):
            self.cut_lines += 1
            self._file.write(CUT_MARK)
            self._file.write(format_line(at, direction, line[start : start + CUT_BYTES]))

    def close(self) -> None:
        if unended := self._from_wheel.partial:
            self._write("<", unended, time.time())
        self._file.close()


class _LinkProtocol(asyncio.Protocol):
    def __init__(self, link: WheelLink) -> None:
        self.link = link
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        #: What the transport said when it failed (its message to the loop), if it did.
        self.failure: str | None = None

    def data_received(self, data: bytes) -> None:
        self.link._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class WheelLink:
    """Keeps the wheel's port open for as long as the daemon runs."""

    def __init__(
        self,
        port: str,
        baudrate: int,
        *,
        on_data: Callable[[bytes, float], None],
        on_up: Callable[[], None],
        on_down: Callable[[str], None],
        silence_s: float,
        capture: CaptureWriter | None = None,
        usb_reset: bool = False,
        clock: Callable[[], float] = time.time,
        log: Any,
    ) -> None:
        self.port = port
        #: Host time for each read; the daemon's also notices wall-clock steps.
        self._clock = clock
        self.baudrate = baudrate
        self._on_data = on_data
        self._on_up = on_up
        self._on_down = on_down
        self._silence_s = silence_s
        self._capture = capture
        self._log = log
        self._transport: asyncio.BaseTransport | None = None
        self._protocol: _LinkProtocol | None = None
        self._silence_timer: asyncio.TimerHandle | None = None
        self.connected = False
        self.retrying = False
        self.last_data = time.monotonic()
        # wheel.usb_reset: a URL has no adapter to reset; a pty is ruled out later,
        # when the port's path is resolved.
        self._usb_policy = ResetPolicy() if usb_reset and not is_url(port) else None
        #: The adapter last seen behind the port: still resettable once its tty is gone.
        self._usb_adapter: UsbAdapter | None = None
        self._cycled_for_silence = False
        #: When the port last opened (monotonic): a loss soon after does not reset the backoff.
        self._opened_at = 0.0
        #: The loop whose exception handler this link filters, and the handler it had.
        self._filtered_loop: asyncio.AbstractEventLoop | None = None
        self._handler: _ExceptionHandler | None = None
        self._previous_handler: _ExceptionHandler | None = None

    async def open(self) -> None:
        """Open the port once; raises LinkOpenError naming it."""
        import serial
        import serial_asyncio_fast

        loop = asyncio.get_running_loop()
        self._filter_transport_errors(loop)
        protocol = _LinkProtocol(self)
        try:
            transport, _ = await serial_asyncio_fast.create_serial_connection(
                loop, lambda: protocol, self.port, baudrate=self.baudrate, exclusive=True
            )
        except (serial.SerialException, OSError, ValueError) as exc:
            raise LinkOpenError(f"{self.port}: {_reason(exc)}") from None
        self._transport = transport
        self._protocol = protocol
        self.connected = True
        self.retrying = False
        self.last_data = self._opened_at = time.monotonic()
        self._arm_silence_timer()
        self._log.info("wheel link up", port=self.port, baudrate=self.baudrate)
        self._on_up()
        if self._usb_policy is not None:
            self._usb_policy.opened()
            if is_resettable_port(self.port):
                adapter = await asyncio.to_thread(identify_usb_adapter, self.port)
                self._usb_adapter = adapter or self._usb_adapter

    async def run(self) -> None:
        """Serve the open port; reopen it with capped backoff whenever it goes.

        The backoff is reset only by a port that stayed up ``STABLE_AFTER_S``: one
        that fails to open and one that drops at once are retried alike, ever
        more slowly up to ``BACKOFF_MAX_S``.
        """
        backoff = BACKOFF_FIRST_S
        last_error = ""
        while True:
            if not self.connected:
                try:
                    await self.open()
                    last_error = ""
                except LinkOpenError as exc:
                    self.retrying = True
                    if str(exc) != last_error:  # log a new reason once, not every retry
                        self._log.warning("wheel port unavailable, retrying", error=str(exc))
                        last_error = str(exc)
                    policy = self._usb_policy
                    if policy is not None and policy.open_failed(time.monotonic()):
                        await self._reset_usb_adapter(
                            f"failed to open {policy.failed_opens} times in a row"
                        )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
            protocol = self._protocol
            assert protocol is not None
            lost = await protocol.lost
            reason = "port closed"
            if protocol.failure is not None:
                reason += f": {protocol.failure}"
            if lost is not None:
                reason += f": {_reason(lost)}"
            self._went_down(reason)
            policy = self._usb_policy
            if self._cycled_for_silence and policy is not None:
                self._cycled_for_silence = False
                if policy.silence_cycled(time.monotonic()):
                    await self._reset_usb_adapter("silent port cycled")
            if time.monotonic() - self._opened_at < STABLE_AFTER_S:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            else:
                backoff = BACKOFF_FIRST_S

    async def _reset_usb_adapter(self, reason: str) -> None:
        """Reset the adapter behind a USB port (a pty has none), in a thread: it blocks."""
        if is_resettable_port(self.port):
            self._usb_adapter = await asyncio.to_thread(
                reset_usb_adapter, self.port, self._usb_adapter, self._log, reason
            )

    def hearing(self) -> bool:
        """The port is open and bytes came within the silence limit."""
        return self.connected and time.monotonic() - self.last_data < self._silence_s + 1

    def write(self, data: bytes) -> None:
        """Send bytes to the wheel, if the port is open."""
        transport = self._transport
        if transport is not None and self.connected and not transport.is_closing():
            transport.write(data)  # type: ignore[attr-defined]
            if self._capture is not None:
                self._capture.sent(data, self._clock())

    def close(self) -> None:
        """Close the port for good (at shutdown)."""
        if self._silence_timer is not None:
            self._silence_timer.cancel()
        if self._transport is not None:
            self._transport.close()
        self.connected = False
        self._unfilter_transport_errors()

    def _filter_transport_errors(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take this link's transport failures off the loop's exception handler.

        A transport that fails a write tells the loop (which logs a traceback)
        and then closes, handing the same error to ``connection_lost``: the
        "wheel link down" line says it there, once. Everything else goes on to
        the handler the loop had.
        """
        if self._filtered_loop is loop:
            return
        self._unfilter_transport_errors()
        previous = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            protocol = context.get("protocol")
            if isinstance(protocol, _LinkProtocol) and protocol.link is self:
                protocol.failure = str(context.get("message") or "transport failed")
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)
        self._filtered_loop, self._handler, self._previous_handler = loop, handler, previous

    def _unfilter_transport_errors(self) -> None:
        """Give the loop back the handler it had, unless another was set over ours since."""
        loop = self._filtered_loop
        if loop is not None and loop.get_exception_handler() is self._handler:
            loop.set_exception_handler(self._previous_handler)
        self._filtered_loop = self._handler = self._previous_handler = None

    def _received(self, data: bytes) -> None:
        now = self._clock()
        self.last_data = time.monotonic()
        if self._usb_policy is not None:
            self._usb_policy.data_flowed()
        if self._capture is not None:
            self._capture.received(data, now)
        self._on_data(data, now)

    def _arm_silence_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._silence_timer = loop.call_later(self._silence_s, self._check_silence)

    def _check_silence(self) -> None:
        quiet = time.monotonic() - self.last_data
        if not self.connected:
            return
        if quiet >= self._silence_s:
            # A port that is open but silent may be a dead adapter: cycle it, so the
            # daemon is "actively retrying" rather than waiting on a corpse.
            self._log.warning("wheel silent, reopening port", silent_s=round(quiet, 1))
            self._cycled_for_silence = True
            if self._transport is not None:
                self._transport.close()
            return
        loop = asyncio.get_running_loop()
        self._silence_timer = loop.call_later(self._silence_s - quiet, self._check_silence)

    def _went_down(self, why: str) -> None:
        if self._silence_timer is not None:
            self._silence_timer.cancel()
        self._transport = None
        self._protocol = None
        self.connected = False
        self.retrying = True
        self._log.warning("wheel link down", port=self.port, reason=why)
        self._on_down(why)


_ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
