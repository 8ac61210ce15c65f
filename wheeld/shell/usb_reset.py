"""pyusb's one job: resetting a wedged USB-serial adapter (``wheel.usb_reset``).

pyserial is enough to know which adapter is behind the port: its port listing
gives the vendor and product ids, the serial number and the bus location. What
pyserial cannot do is reset the adapter, the software equivalent of pulling it
out and plugging it back in, which is what a wedged FTDI or CH340 needs. That
is the one thing pyusb does here.

The pure part (reading pyserial's location, recognising the pyusb device,
deciding when a reset is due) is plain functions and ``ResetPolicy``, fed the
time. The I/O part is ``identify_usb_adapter`` and ``reset_usb_adapter``,
which never raise: whatever goes wrong is one warning line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Failed opens in a row after which the adapter is reset.
RESET_AFTER_FAILED_OPENS = 3
#: Never two resets closer than this, whatever happens in between.
RESET_INTERVAL_S = 60.0


def is_url(port: str) -> bool:
    """A pyserial URL (``socket://``, ``hwgrep://``): no device to reset."""
    return "://" in port  # pyserial's own test for a URL


def is_resettable_port(port: str) -> bool:
    """Whether the port may be a USB serial device: a device path that is not a pty.

    Resolved now, not once at start-up: a udev symlink may point elsewhere later.
    """
    if is_url(port):
        return False
    device = os.path.realpath(port)
    return not (device.startswith("/dev/pts/") or device == "/dev/ptmx")


def parse_location(location: str) -> tuple[int, tuple[int, ...]] | None:
    """Bus and port numbers from pyserial's ``location``, or None if it is not one.

    ``"1-1.2"`` is bus 1, port 2 of the hub on root port 1; a multi-interface
    adapter (FT2232, FT4232) adds its configuration and interface, ``"1-1.2:1.0"``,
    which says nothing about where the device is.
    """
    bus, sep, path = location.partition(":")[0].partition("-")
    numbers = path.split(".")
    if not sep or not bus.isdigit() or not all(number.isdigit() for number in numbers):
        return None
    return int(bus), tuple(int(number) for number in numbers)


@dataclass(frozen=True, slots=True)
class UsbAdapter:
    """A USB serial adapter as pyserial lists it, and where it sits on the bus."""

    vid: int
    pid: int
    serial_number: str | None
    #: pyserial's location, as it was read: ``"1-1.2"``.
    location: str
    bus: int
    ports: tuple[int, ...]

    def log_fields(self) -> dict[str, Any]:
        """The adapter's identity for a log line."""
        return {
            "usb_id": f"{self.vid:04x}:{self.pid:04x}",
            "serial_number": self.serial_number,
            "location": self.location,
        }


def adapter_behind(device: str, listed: Iterable[Any]) -> UsbAdapter | None:
    """The USB adapter that pyserial lists as ``device`` (a resolved path), if any.

    ``listed`` is ``serial.tools.list_ports.comports()``: an on-board UART or a
    port without a readable location is no USB adapter.
    """
    for info in listed:
        if info.device != device or info.vid is None or info.pid is None:
            continue
        where = parse_location(info.location or "")
        if where is None:
            return None
        return UsbAdapter(info.vid, info.pid, info.serial_number, info.location, *where)
    return None


def is_adapter(usb_device: Any, adapter: UsbAdapter) -> bool:
    """Whether a pyusb device is the adapter: at its place on the bus, with its ids.

    The ids are checked too so that a different device plugged into the same
    port since is never reset. pyusb's ``port_numbers`` is None where the backend
    cannot tell, and such a device is never matched.
    """
    return (
        usb_device.bus == adapter.bus
        and tuple(usb_device.port_numbers or ()) == adapter.ports
        and usb_device.idVendor == adapter.vid
        and usb_device.idProduct == adapter.pid
    )


class ResetPolicy:
    """When to reset: after a silence cycle, or ``after_failed_opens`` failed opens
    in a row; once, then not again until data has flowed; never twice within
    ``interval_s``. Times are monotonic seconds, passed in.
    """

    def __init__(
        self,
        *,
        after_failed_opens: int = RESET_AFTER_FAILED_OPENS,
        interval_s: float = RESET_INTERVAL_S,
    ) -> None:
        self.after_failed_opens = after_failed_opens
        self.interval_s = interval_s
        self.failed_opens = 0
        #: A reset is allowed: none yet, or data has flowed since the last one.
        self.armed = True
        self.last_reset: float | None = None

    def data_flowed(self) -> None:
        """Bytes came from the wheel: the adapter works, a later wedge may be reset."""
        self.armed = True

    def opened(self) -> None:
        self.failed_opens = 0

    def open_failed(self, now: float) -> bool:
        """The port failed to open; True when the adapter should be reset now."""
        self.failed_opens += 1
        return self.failed_opens >= self.after_failed_opens and self._take(now)

    def silence_cycled(self, now: float) -> bool:
        """The port was closed for silence; True when the adapter should be reset now."""
        return self._take(now)

    def _take(self, now: float) -> bool:
        if not self.armed:
            return False
        if self.last_reset is not None and now - self.last_reset < self.interval_s:
            return False
        self.armed = False
        self.last_reset = now
        return True


def identify_usb_adapter(port: str) -> UsbAdapter | None:
    """The USB adapter behind ``port`` per pyserial's listing, or None (never raises)."""
    try:
        from serial.tools import list_ports

        return adapter_behind(os.path.realpath(port), list_ports.comports())
    except Exception:  # a listing that fails leaves the adapter unknown, nothing worse
        return None


def reset_usb_adapter(
    port: str, known: UsbAdapter | None, log: Any, reason: str
) -> UsbAdapter | None:
    """Reset the USB adapter behind ``port``, logging one warning line either way.

    The adapter is looked up now; if the port has gone (a wedged adapter may lose
    its tty), ``known``, the adapter last seen behind it, is reset instead.
    Returns the adapter tried, for next time. Never raises: a reset is a last
    resort, and whatever stops it (no libusb, no permission on /dev/bus/usb, the
    device gone) must not take the link down with it.
    """
    adapter = identify_usb_adapter(port) or known
    if adapter is None:
        log.warning(
            "wheel USB reset skipped: no USB adapter behind the port", port=port, reason=reason
        )
        return None
    try:
        import usb.core

        usb_device = usb.core.find(custom_match=lambda candidate: is_adapter(candidate, adapter))
        if usb_device is None:
            log.warning(
                "wheel USB reset failed: adapter not on the bus",
                port=port,
                reason=reason,
                **adapter.log_fields(),
            )
            return adapter
        usb_device.reset()
    except Exception as exc:  # NoBackendError, USBError, PermissionError, ImportError...
        log.warning(
            "wheel USB reset failed",
            port=port,
            reason=reason,
            error=f"{type(exc).__name__}: {exc}",
            **adapter.log_fields(),
        )
        return adapter
    log.warning("wheel USB adapter reset", port=port, reason=reason, **adapter.log_fields())
    return adapter
