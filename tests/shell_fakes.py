"""Fakes for the shell's units: an event loop moved by hand (no waiting), a kept log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from wheeld.shell.clock import HostClock
from wheeld.shell.scheduler import Scheduler


class _Handle:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class HandLoop:
    """An event loop's clock and timers, moved by hand: no waiting in these tests."""

    def __init__(self) -> None:
        self.t = 100.0
        self.handles: list[_Handle] = []
        self.errors: list[dict[str, Any]] = []

    def time(self) -> float:
        return self.t

    def call_at(self, when: float, callback: Callable[[], None]) -> _Handle:
        handle = _Handle(when, callback)
        self.handles.append(handle)
        return handle

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.errors.append(context)

    @property
    def armed(self) -> list[float]:
        return [handle.when for handle in self.handles if not handle.cancelled]

    def run_until(self, t: float) -> None:
        """Move the clock to ``t``, firing the armed timer whenever it falls due."""
        while True:
            live = [h for h in self.handles if not h.cancelled and h.when <= t]
            if not live:
                break
            handle = min(live, key=lambda h: h.when)
            self.t = max(self.t, handle.when)
            handle.cancelled = True  # fired
            handle.callback()
        self.t = t

    def wake_late(self, t: float) -> None:
        """The loop wakes at ``t``, past its armed timer (a busy loop, a paused VM)."""
        self.t = t
        (handle,) = [h for h in self.handles if not h.cancelled]
        handle.cancelled = True
        handle.callback()


class LoopClock(HostClock):
    """Host time that reads 1000 + the loop's time; counts how often it is read."""

    def __init__(self, loop: HandLoop) -> None:
        super().__init__()
        self.loop = loop
        self.reads = 0

    def now(self) -> float:
        self.reads += 1
        return 1000.0 + self.loop.t

    def wall(self) -> float:
        return 1000.0 + self.loop.t

    def monotonic(self) -> float:
        return self.loop.t


def hand_scheduler() -> tuple[Scheduler, HandLoop, LoopClock]:
    """A scheduler on a loop moved by hand, and its clock (host time = 1000 + loop time)."""
    loop = HandLoop()
    clock = LoopClock(loop)
    return Scheduler(clock, cast(Any, loop), phase_s=0.0), loop, clock


class RecordingLog:
    """A structlog logger's calls, kept as (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event, fields))
