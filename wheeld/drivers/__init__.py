"""Wheel drivers: one sans-I/O module per wheel protocol.

A driver turns the bytes a wheel sends into wheel events (``wheeld.events``).
It is the only place that knows a protocol: adding a wheel maker means adding a
module here, its captures and its tests.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Protocol

from wheeld.events import WheelEvent


class CounterSet:
    """Base for a driver's slotted counters dataclass: ``as_dict`` for status payloads."""

    __slots__ = ()

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain mapping, for status payloads and logs."""
        this: Any = self
        return {f.name: getattr(self, f.name) for f in fields(this)}


class Counters(Protocol):
    def as_dict(self) -> dict[str, int]: ...


class WheelDecoder(Protocol):
    """What the daemon and ``replay`` need of a driver's decoder."""

    @property
    def counters(self) -> Counters:
        """Good frames, drops and noise seen so far."""
        ...

    def feed(self, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        """Bytes from the wheel, heard at host time ``now``; the events they complete."""
        ...


class UnknownDriver(ValueError):
    """No driver by that name."""


def decoder_for(name: str) -> WheelDecoder:
    """A fresh decoder for the driver called ``name`` (imported only when asked for)."""
    if name == "wrp":
        from wheeld.drivers.wrp import WrpDecoder

        return WrpDecoder()
    if name == "cammegh-ss2":
        from wheeld.drivers.cammegh_ss2 import CammeghDecoder

        return CammeghDecoder()
    raise UnknownDriver(f"unknown driver {name!r} (known: wrp, cammegh-ss2)")


def default_baudrate(name: str) -> int:
    """The line speed a driver's wheels use unless configured otherwise."""
    return {"wrp": 115200, "cammegh-ss2": 9600}.get(name, 9600)
