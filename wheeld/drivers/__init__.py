"""Wheel drivers: one sans-I/O package per wheel protocol, found through entry points.

A driver turns the bytes a wheel sends into wheel events (``wheeld.core.events``)
and, where the wheel takes commands, says what to write to it and when. It is
the only place that knows a protocol. Each declares itself once as a
:class:`Driver` and is registered in the ``wheeld.drivers`` entry-point group,
so a wheel maker's driver is a distribution of its own; the reference WRP/1
driver is built into wheeld.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from wheeld.core.events import WheelEvent
from wheeld.core.game import Decision

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wheeld.core.rules import RulesConfig

ENTRY_POINT_GROUP = "wheeld.drivers"

#: A driver's settings: its ``[wheel.<section>]`` table as its own pydantic model.
S = TypeVar("S", bound="BaseModel")


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
    """What the pipeline needs of a driver's decoder."""

    @property
    def counters(self) -> Counters:
        """Good frames, drops and noise seen so far."""
        ...

    def feed(self, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        """Bytes from the wheel, heard at host time ``now``; the events they complete."""
        ...


class DriverSession(Protocol):
    """What a driver does to its wheel beyond listening: commands, on connect and on timers.

    Every method returns the bytes to write to the wheel, in order.
    """

    @property
    def unanswered(self) -> list[str]:
        """Commands that went unanswered after every retry (the pipeline raises alarms)."""
        ...

    def on_connect(self, now: float) -> list[bytes]: ...

    def on_disconnect(self, now: float) -> None: ...

    def on_event(self, event: WheelEvent, now: float) -> list[bytes]: ...

    def after_decisions(self, decisions: list[Decision], now: float) -> list[bytes]: ...

    def on_timer(self, now: float) -> list[bytes]: ...

    def next_deadline(self) -> float | None: ...


class GreetingSession:
    """A session that writes the same lines on every connect and nothing else (a WRP/1
    head's ``QRY``, a Cammegh Mercury's ``*V``)."""

    def __init__(self, *greeting: bytes) -> None:
        self.greeting = list(greeting)
        self.unanswered: list[str] = []

    def on_connect(self, now: float) -> list[bytes]:
        return list(self.greeting)

    def on_disconnect(self, now: float) -> None:
        """Nothing is in flight: an answer, when it comes, is read as any line."""

    def on_event(self, event: WheelEvent, now: float) -> list[bytes]:
        return []

    def after_decisions(self, decisions: list[Decision], now: float) -> list[bytes]:
        return []

    def on_timer(self, now: float) -> list[bytes]:
        return []

    def next_deadline(self) -> float | None:
        return None


@dataclass(frozen=True, slots=True)
class Driver(Generic[S]):
    """A driver's declaration: everything wheeld needs to know of it, in one place.

    Generic over its settings model ``S``, so ``mypy --strict`` holds ``session``,
    ``check`` and ``configure`` to the model ``settings`` names: ``Driver(settings=
    ControlConfig, check=check)`` with a ``check`` that takes another model is a
    type error, not a surprise at run time.
    """

    name: str
    default_baudrate: int
    decoder: Callable[[], WheelDecoder]
    #: Builds the session from the decoder and the driver's own settings (the
    #: configuration's ``[wheel.<section>]`` table, validated by ``settings``; None
    #: for a driver with no section).
    session: Callable[[WheelDecoder, S | None], DriverSession | None] | None = None
    #: The pydantic model of the driver's configuration section, if it has one.
    settings: type[S] | None = None
    #: The configuration section's name under ``[wheel]``.
    section: str | None = None
    #: Checks the section against the rules: ``(dotted key, problem)`` pairs.
    check: Callable[[S, RulesConfig], list[tuple[str, str]]] | None = None
    #: Tells a new decoder what its section says of the wheel (what the wheel may
    #: not say of itself: its model, firmware or game mode).
    configure: Callable[[WheelDecoder, S], None] | None = None

    def new_decoder(self, settings: S | None = None) -> WheelDecoder:
        """A decoder for this driver, told its section's ``settings`` when given."""
        decoder = self.decoder()
        if self.configure is not None and settings is not None:
            self.configure(decoder, settings)
        return decoder


class UnknownDriver(ValueError):
    """No driver by that name."""


#: The reference driver's name (WRP/1, ``wheeld.drivers.wrp``).
REFERENCE = "wrp"
_registry: dict[str, Driver[Any]] | None = None
#: Installed drivers that failed to load: name -> why, for the error that names them.
_broken: dict[str, str] = {}


def drivers() -> dict[str, Driver[Any]]:
    """Every installed driver, by name (entry points read once, then cached)."""
    global _registry
    if _registry is None:
        from importlib.metadata import entry_points

        found: dict[str, Driver[Any]] = {}
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                driver = point.load()
            except Exception as exc:  # a broken plug-in must not take the others down
                _broken[point.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                continue
            if isinstance(driver, Driver):
                found[driver.name] = driver
            else:
                _broken[point.name] = f"{point.value} is not a wheeld Driver"
        # The reference driver, even from a bare source tree; a plug-in that names
        # itself so does not replace it (``driver_named`` finds it without the scan).
        from wheeld.drivers.wrp import DRIVER

        found[REFERENCE] = DRIVER
        _broken.pop(REFERENCE, None)
        _registry = found
    return _registry


def driver_named(name: str) -> Driver[Any]:
    """The installed driver called ``name``.

    The reference driver is wheeld's own: found without reading every installed
    distribution's entry points (importlib.metadata and a scan of site-packages,
    tens of milliseconds of a start that READY waits for).
    """
    if name == REFERENCE and _registry is None:
        from wheeld.drivers.wrp import DRIVER

        return DRIVER
    known = drivers()
    if name in _broken:
        raise UnknownDriver(f"driver {name!r} is installed but does not load: {_broken[name]}")
    if name not in known:
        raise UnknownDriver(f"unknown driver {name!r} (installed: {', '.join(sorted(known))})")
    return known[name]
