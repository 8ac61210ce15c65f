"""wheel.usb_reset: when a wedged USB serial adapter is reset, and that a reset
that cannot happen is one warning, never a crash.

No USB device exists here, so pyserial's port listing and pyusb's devices are
fakes; the exception classes are the installed pyusb's own, and the link is
run on a real pty.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import serial.tools.list_ports
import structlog
import usb.core
from structlog.testing import capture_logs

from wheeld.config import ConfigError, load
from wheeld.shell import link as link_module
from wheeld.shell.clock import HostClock
from wheeld.shell.link import WheelLink
from wheeld.shell.scheduler import Scheduler
from wheeld.shell.usb_reset import (
    ResetPolicy,
    UsbAdapter,
    adapter_behind,
    is_adapter,
    is_resettable_port,
    parse_location,
    reset_usb_adapter,
)
from wheeld.testing.rig import PtyWheel, free_port

PORT = "/dev/ttyUSB7"
FTDI = UsbAdapter(0x0403, 0x6001, "A50285BI", "1-1.2", 1, (1, 2))


Lines = list[MutableMapping[str, Any]]


@pytest.fixture
def lines() -> Iterator[Lines]:
    """What is logged through ``structlog.get_logger()``, one dict a line."""
    with capture_logs() as captured:
        yield captured


def count(lines: Lines, words: str) -> int:
    return sum(words in line["event"] for line in lines)


@dataclass
class PortInfo:
    """The fields of pyserial's ListPortInfo that wheeld reads."""

    device: str
    vid: int | None = 0x0403
    pid: int | None = 0x6001
    serial_number: str | None = "A50285BI"
    location: str | None = "1-1.2"


@dataclass
class UsbDevice:
    """The fields and the reset of a pyusb Device that wheeld uses."""

    bus: int = 1
    port_numbers: tuple[int, ...] | None = (1, 2)
    idVendor: int = 0x0403  # noqa: N815 (pyusb's names)
    idProduct: int = 0x6001  # noqa: N815
    fails_with: Exception | None = None
    resets: int = 0

    def reset(self) -> None:
        if self.fails_with is not None:
            raise self.fails_with
        self.resets += 1


@pytest.fixture
def bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[UsbDevice]]:
    """The devices pyusb finds; pyserial lists one FTDI adapter as PORT."""
    devices: list[UsbDevice] = []

    def find(custom_match: Callable[[Any], bool]) -> UsbDevice | None:
        return next((device for device in devices if custom_match(device)), None)

    monkeypatch.setattr(usb.core, "find", find)
    monkeypatch.setattr(serial.tools.list_ports, "comports", lambda: [PortInfo(PORT)])
    yield devices


# -- pyserial's location and pyusb's device ------------------------------------


@pytest.mark.parametrize(
    ("location", "where"),
    [
        ("1-1.2", (1, (1, 2))),
        ("3-2", (3, (2,))),
        ("1-1.4.3", (1, (1, 4, 3))),
        ("1-1.2:1.0", (1, (1, 2))),  # one interface of an FT2232: the device's place
    ],
)
def test_location_is_bus_and_ports(location: str, where: tuple[int, tuple[int, ...]]) -> None:
    assert parse_location(location) == where


@pytest.mark.parametrize("location", ["", "usb1", "1-", "-1.2", "1-a.2", "1-1..2", "x-1"])
def test_a_location_that_is_none_is_refused(location: str) -> None:
    assert parse_location(location) is None


def test_the_adapter_behind_a_device_is_found_by_its_path() -> None:
    listed = [PortInfo("/dev/ttyS0", vid=None, pid=None, location=None), PortInfo(PORT)]
    assert adapter_behind(PORT, listed) == FTDI
    assert adapter_behind("/dev/ttyUSB8", listed) is None
    assert adapter_behind("/dev/ttyS0", listed) is None  # an on-board UART: not USB
    assert adapter_behind(PORT, [PortInfo(PORT, location=None)]) is None


@pytest.mark.parametrize(
    ("device", "matches"),
    [
        (UsbDevice(), True),
        (UsbDevice(bus=2), False),
        (UsbDevice(port_numbers=(1, 3)), False),
        (UsbDevice(port_numbers=(1,)), False),
        (UsbDevice(port_numbers=None), False),  # a backend that cannot tell
        (UsbDevice(idProduct=0x6015), False),  # another device in the same port since
    ],
)
def test_the_pyusb_device_is_the_one_at_the_adapters_place(
    device: UsbDevice, matches: bool
) -> None:
    assert is_adapter(device, FTDI) is matches


# -- when to reset ------------------------------------------------------------------


def test_three_failed_opens_in_a_row_reset_once() -> None:
    policy = ResetPolicy()
    assert [policy.open_failed(float(at)) for at in range(6)] == [
        False,
        False,
        True,
        False,
        False,
        False,
    ]


def test_an_open_between_failures_starts_the_count_again() -> None:
    policy = ResetPolicy()
    assert not policy.open_failed(0) and not policy.open_failed(1)
    policy.opened()
    assert not policy.open_failed(2) and not policy.open_failed(3)
    assert policy.open_failed(4)


def test_a_silence_cycle_resets_once_until_data_flows() -> None:
    policy = ResetPolicy()
    assert policy.silence_cycled(0.0)
    assert not policy.silence_cycled(100.0)
    assert not policy.silence_cycled(200.0)
    policy.data_flowed()
    assert policy.silence_cycled(300.0)


def test_never_two_resets_within_a_minute() -> None:
    policy = ResetPolicy()
    assert policy.silence_cycled(1000.0)
    policy.data_flowed()
    assert not policy.silence_cycled(1059.9)
    policy.opened()
    assert [policy.open_failed(1059.9) for _ in range(3)] == [False, False, False]
    assert policy.open_failed(1060.0)  # armed still: the first chance after the minute


# -- which ports ------------------------------------------------------------------


@pytest.mark.parametrize(
    "port", ["socket://127.0.0.1:7000", "rfc2217://wheel:4000", "hwgrep://0403:6001"]
)
def test_a_url_is_never_reset(port: str) -> None:
    assert not is_resettable_port(port)


def test_a_pty_is_never_reset(tmp_path: Path) -> None:
    wheel = PtyWheel(tmp_path / "wheel0")
    try:
        assert not is_resettable_port(str(wheel.link))
        assert not is_resettable_port(os.path.realpath(wheel.link))
    finally:
        os.close(wheel.master)
    assert is_resettable_port("/dev/ttyUSB0")
    assert is_resettable_port("/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0")


# -- the reset itself ------------------------------------------------------------


def _reset(port: str, known: UsbAdapter | None = None) -> UsbAdapter | None:
    return reset_usb_adapter(port, known, structlog.get_logger(), "silent port cycled")


def test_a_reset_is_one_warning_naming_the_adapter(bus: list[UsbDevice], lines: Lines) -> None:
    bus.extend([UsbDevice(port_numbers=(1, 3)), adapter := UsbDevice()])
    assert _reset(PORT) == FTDI
    assert adapter.resets == 1 and bus[0].resets == 0
    assert lines == [
        {
            "event": "wheel USB adapter reset",
            "log_level": "warning",
            "port": PORT,
            "reason": "silent port cycled",
            "usb_id": "0403:6001",
            "serial_number": "A50285BI",
            "location": "1-1.2",
        }
    ]


@pytest.mark.parametrize(
    "failure",
    [
        usb.core.USBError("Access denied (insufficient permissions)", errno=13),
        usb.core.USBError("No such device (it may have been disconnected)", errno=19),
        PermissionError(13, "Permission denied"),
    ],
)
def test_a_reset_that_fails_is_one_warning(
    bus: list[UsbDevice], lines: Lines, failure: Exception
) -> None:
    bus.append(UsbDevice(fails_with=failure))
    assert _reset(PORT) == FTDI
    (line,) = lines
    assert (line["log_level"], line["event"]) == ("warning", "wheel USB reset failed")
    assert line["error"].startswith(type(failure).__name__)
    assert line["usb_id"] == "0403:6001"


def test_no_libusb_is_one_warning(
    bus: list[UsbDevice], lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_backend(**_: Any) -> None:
        raise usb.core.NoBackendError("No backend available")

    monkeypatch.setattr(usb.core, "find", no_backend)
    assert _reset(PORT) == FTDI
    (line,) = lines
    assert (line["log_level"], line["event"]) == ("warning", "wheel USB reset failed")
    assert line["error"] == "NoBackendError: No backend available"


def test_an_adapter_gone_from_the_bus_is_one_warning(bus: list[UsbDevice], lines: Lines) -> None:
    assert _reset(PORT) == FTDI
    (line,) = lines
    assert line["event"] == "wheel USB reset failed: adapter not on the bus"
    assert line["location"] == "1-1.2"


def test_an_adapter_whose_tty_is_gone_is_reset_as_last_seen(
    bus: list[UsbDevice], lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serial.tools.list_ports, "comports", list)
    bus.append(adapter := UsbDevice())
    assert _reset(PORT, known=FTDI) == FTDI
    assert adapter.resets == 1
    assert [line["event"] for line in lines] == ["wheel USB adapter reset"]


def test_a_port_with_no_usb_adapter_is_one_warning(
    bus: list[UsbDevice], lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable() -> list[PortInfo]:
        raise PermissionError(13, "Permission denied: '/sys/class/tty'")

    monkeypatch.setattr(serial.tools.list_ports, "comports", unreadable)
    assert _reset("/dev/ttyS0") is None
    (line,) = lines
    assert (line["log_level"], line["event"]) == (
        "warning",
        "wheel USB reset skipped: no USB adapter behind the port",
    )


# -- the link ------------------------------------------------------------------


class Resets:
    """Stands in for reset_usb_adapter in the link; records each reason."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reasons: list[str] = []
        monkeypatch.setattr(link_module, "reset_usb_adapter", self)

    def __call__(self, port: str, known: UsbAdapter | None, log: Any, reason: str) -> None:
        self.reasons.append(reason)


def _link(
    port: str,
    *,
    silence_s: float = 30.0,
    on_data: Callable[[bytes, float], None] = lambda data, at: None,
    scheduler: Scheduler | None = None,
) -> WheelLink:
    return WheelLink(
        port,
        115200,
        on_data=on_data,
        on_up=lambda: None,
        on_down=lambda why: None,
        silence_s=silence_s,
        usb_reset=True,
        scheduler=scheduler,
        log=structlog.get_logger(),
    )


async def _until(condition: Callable[[], Any], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


class Opens:
    """Counts the link's attempts to open its port."""

    def __init__(self, link: WheelLink) -> None:
        self.count = 0
        self._open = link.open
        link.open = self._counted  # type: ignore[method-assign]

    async def _counted(self) -> None:
        self.count += 1
        await self._open()


async def _run_until(link: WheelLink, condition: Callable[[], Any], what: str) -> None:
    task = asyncio.create_task(link.run())
    try:
        await _until(condition, what)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        link.close()


async def test_a_port_failing_to_open_three_times_is_reset_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = Resets(monkeypatch)
    link = _link(str(tmp_path / "ttyUSB9"))
    opens = Opens(link)
    await _run_until(link, lambda: opens.count >= 5, "five opens")
    assert resets.reasons == ["failed to open 3 times in a row"]


async def test_a_silent_usb_port_is_reset_once_until_data_flows(
    tmp_path: Path, lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = Resets(monkeypatch)
    # The pty stands in for a USB device; no minute between resets, to see the re-arming.
    monkeypatch.setattr(link_module, "is_resettable_port", lambda port: True)
    monkeypatch.setattr(link_module, "ResetPolicy", lambda: ResetPolicy(interval_s=0))
    wheel = PtyWheel(tmp_path / "wheel0")
    heard: list[bytes] = []
    link = _link(str(wheel.link), silence_s=0.2, on_data=lambda data, at: heard.append(data))
    task = asyncio.create_task(link.run())
    try:
        await _until(lambda: count(lines, "wheel silent") >= 3, "three silence cycles")
        assert resets.reasons == ["silent port cycled"]

        def heard_again() -> bool:
            wheel.write(b"HEL;WRP/1;37\r\n")  # until it lands: a cycle may drop a write
            return bool(heard)

        await _until(heard_again, "data from the wheel")
        await _until(lambda: len(resets.reasons) == 2, "a second reset after data flowed")
        assert resets.reasons == ["silent port cycled"] * 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        link.close()
        os.close(wheel.master)


async def test_a_silent_pty_is_never_reset(
    tmp_path: Path, lines: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets = Resets(monkeypatch)
    wheel = PtyWheel(tmp_path / "wheel0")
    try:
        link = _link(str(wheel.link), silence_s=0.2)
        await _run_until(link, lambda: count(lines, "wheel silent") >= 3, "three silence cycles")
    finally:
        os.close(wheel.master)
    assert resets.reasons == []


async def test_the_links_silence_check_and_reopen_backoff_are_the_schedulers_timers(
    tmp_path: Path,
) -> None:
    scheduler = Scheduler(HostClock())
    missing = _link(str(tmp_path / "ttyUSB9"), scheduler=scheduler)
    task = asyncio.create_task(missing.run())
    try:
        await _until(lambda: "link reopen" in scheduler.names(), "the reopen backoff")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        missing.close()
    assert "link reopen" not in scheduler.names(), "a cancelled wait leaves no timer"
    wheel = PtyWheel(tmp_path / "wheel0")
    try:
        link = _link(str(wheel.link), silence_s=30.0, scheduler=scheduler)
        await _run_until(
            link, lambda: link.connected and "link silence" in scheduler.names(), "link up"
        )
    finally:
        os.close(wheel.master)
    assert "link silence" not in scheduler.names(), "a closed link leaves no timer"


async def test_a_url_port_is_never_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    resets = Resets(monkeypatch)
    link = _link(f"socket://127.0.0.1:{free_port()}")  # nobody listens
    opens = Opens(link)
    await _run_until(link, lambda: opens.count >= 4, "four opens")
    assert resets.reasons == []


# -- the key ------------------------------------------------------------------


def test_usb_reset_is_off_by_default_and_a_strict_bool(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    assert load(path, {}).wheel.usb_reset is False
    path.write_text("[wheel]\nusb_reset = true\n")
    assert load(path, {}).wheel.usb_reset is True
    path.write_text("[wheel]\nusb_reset = 1\n")
    with pytest.raises(ConfigError) as caught:
        load(path, {})
    assert [problem.split(":")[0] for problem in caught.value.problems] == ["wheel.usb_reset"]
