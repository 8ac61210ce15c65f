"""The serial link to the wheel: open exclusively, read, and reopen when it goes.

Device paths, pseudo-terminals and the pyserial URLs the configuration allows
(``socket://``, ``hwgrep://``) all go through pyserial-asyncio-fast. Bytes are
handed on as they arrive, with the host time; nothing here decodes or decides.
Its two waits, the silence check and the reopen backoff, are timers on the
daemon's ``Scheduler`` (a link of its own, as the display's, makes its own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wheeld.shell.clock import HostClock
from wheeld.shell.scheduler import Scheduler, Timer
from wheeld.shell.usb_reset import (
    ResetPolicy,
    UsbAdapter,
    identify_usb_adapter,
    is_resettable_port,
    is_url,
    reset_usb_adapter,
)

if TYPE_CHECKING:
    from wheeld.shell.capture_writer import CaptureWriter

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0
#: A port lost sooner than this after it opened never really came up: the backoff
#: goes on growing, so a port that accepts and drops at once is not reopened
#: thousands of times a second.
STABLE_AFTER_S = 1.0


#: Why a port cannot be the wheel's, in the words ``run`` and ``check-config`` share.
PORT_HELD = "in use by another program (another wheeld? each table needs its own wheel.port)"
NOT_A_TERMINAL = "not a serial port (a character device, but no terminal)"


class LinkOpenError(Exception):
    """The port could not be opened; the message names it."""


def open_refusal(exc: BaseException) -> str:
    """Why opening a port failed, in words: pyserial's own for what it says plainly."""
    text = _reason(exc)
    if "exclusively lock" in text:  # pyserial's flock, refused: "[Errno 11] ... [Errno 11] ..."
        return PORT_HELD
    if "Inappropriate ioctl" in text:  # opened, but no termios: /dev/null, a printer
        return NOT_A_TERMINAL
    return text


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
        scheduler: Scheduler | None = None,
        log: Any,
    ) -> None:
        self.port = port
        #: The silence check and the reopen backoff are its timers; its clock stamps each
        #: read with the host time (the daemon's notices wall-clock steps).
        self._scheduler = scheduler if scheduler is not None else Scheduler(HostClock())
        self._clock = self._scheduler.clock.now
        self._monotonic = self._scheduler.clock.monotonic
        self.baudrate = baudrate
        self._on_data = on_data
        self._on_up = on_up
        self._on_down = on_down
        self._silence_s = silence_s
        self._capture = capture
        self._log = log
        self._transport: asyncio.BaseTransport | None = None
        self._protocol: _LinkProtocol | None = None
        self._silence_timer: Timer | None = None
        self.connected = False
        self.retrying = False
        self.last_data = self._monotonic()
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
            raise LinkOpenError(f"{self.port}: {open_refusal(exc)}") from None
        self._transport = transport
        self._protocol = protocol
        self.connected = True
        self.retrying = False
        self.last_data = self._opened_at = self._monotonic()
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
                    if policy is not None and policy.open_failed(self._monotonic()):
                        await self._reset_usb_adapter(
                            f"failed to open {policy.failed_opens} times in a row"
                        )
                    await self._scheduler.sleep(backoff, "link reopen")
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
                if policy.silence_cycled(self._monotonic()):
                    await self._reset_usb_adapter("silent port cycled")
            if self._monotonic() - self._opened_at < STABLE_AFTER_S:
                await self._scheduler.sleep(backoff, "link reopen")
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
        return self.connected and self._monotonic() - self.last_data < self._silence_s + 1

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
        self.last_data = self._monotonic()
        if self._usb_policy is not None:
            self._usb_policy.data_flowed()
        if self._capture is not None:
            self._capture.received(data, now)
        self._on_data(data, now)

    def _arm_silence_timer(self, delay_s: float | None = None) -> None:
        wait = self._silence_s if delay_s is None else delay_s
        self._silence_timer = self._scheduler.after(wait, self._check_silence, "link silence")

    def _check_silence(self, now: float) -> None:
        quiet = self._monotonic() - self.last_data
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
        self._arm_silence_timer(self._silence_s - quiet)

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
