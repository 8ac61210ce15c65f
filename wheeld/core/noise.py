"""Line noise: how much of what the wheel sends is no frame of its protocol. Pure.

A wheel's line picks up a stray byte now and then; a cable going bad, a
wrong line speed or another device on the port sends garbage by the
kilobyte. ``NoiseMeter`` keeps the noise of the last minute, a second a
bucket (bounded, whatever the rate), for the ``line_noise`` fault: set when
the minute holds more than the threshold, cleared once it holds under half.
"""

from __future__ import annotations

from collections import deque

#: The window the noise is judged over.
WINDOW_S = 60


class NoiseMeter:
    """Noise bytes over the last ``WINDOW_S`` seconds, in one-second buckets."""

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, int]] = deque()
        self._total = 0

    def add(self, now: float, size: int) -> None:
        """``size`` bytes of noise heard at host time ``now``."""
        second = int(now)
        self._forget(second)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1] = (second, self._buckets[-1][1] + size)
        else:
            self._buckets.append((second, size))
        self._total += size

    def in_window(self, now: float) -> int:
        """Noise bytes heard over the window that ends at ``now``."""
        self._forget(int(now))
        return self._total

    def _forget(self, second: int) -> None:
        buckets = self._buckets
        while buckets and (buckets[0][0] <= second - WINDOW_S or buckets[0][0] > second):
            # Older than the window, or ahead of a clock that stepped back: gone.
            self._total -= buckets.popleft()[1]
