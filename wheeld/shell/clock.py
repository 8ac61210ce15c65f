"""The host's clock, as the daemon reads it: wall time that notices being stepped.

The one place in the shell's daemon that reads ``time``: the scheduler hands
every callback ``HostClock.now()``, and the link stamps the wheel's bytes
with it. A step of the wall clock (NTP, an operator) shows as wall time moving
unlike the monotonic clock; ``on_step`` is told of it before the time is
handed on, so a forward step is not read as the wheel's silence.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A wall clock that moves CLOCK_STEP_S unlike the monotonic clock has been stepped; the
# capture's reader holds a capture's times to the same.
from wheeld.core.capture import CLOCK_STEP_S


class HostClock:
    """Host time (epoch seconds), the monotonic clock, and the steps between them."""

    def __init__(self) -> None:
        self._wall, self._mono = time.time(), time.monotonic()
        #: Told ``(step, wall)`` when the wall clock has been stepped by ``step`` seconds.
        self.on_step: Callable[[float, float], None] | None = None

    def now(self) -> float:
        """Host time, after telling ``on_step`` of any step of the wall clock."""
        wall, mono = time.time(), time.monotonic()
        step = (wall - self._wall) - (mono - self._mono)
        self._wall, self._mono = wall, mono
        if abs(step) >= CLOCK_STEP_S and self.on_step is not None:
            self.on_step(step, wall)
        return wall

    def wall(self) -> float:
        """Host time as it reads, no step noticed: to turn a deadline into a wait."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds that never step: for how long something has lasted."""
        return time.monotonic()
