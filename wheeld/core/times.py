"""The times of a table's games (``docs/statistics.md``): phase durations, ball
revolutions and rotor speed, each a ``Summary`` in bounded memory.

Read from the payloads' own ``ts``, never a clock.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Any

#: Games the recent rate of play is taken over.
RECENT_GAMES = 30

#: A gap between games longer than this (seconds) is a pause, not play: left
#: out of the recent rate and of the time before a launch.
PAUSE_S = 900.0

#: launch (bets open, from the previous outcome), the ball running with bets
#: still open, from no more bets to the result, and the whole spin.
PHASES = ("open_to_launch", "launch_to_no_more_bets", "no_more_bets_to_result", "launch_to_result")

#: Games begun but not ended that are remembered (their launch times).
OPEN_GAMES = 8


def time_of(ts: Any) -> datetime | None:
    """A payload's ``ts``, or None when it is missing, malformed or without a zone."""
    try:
        at = datetime.fromisoformat(ts) if isinstance(ts, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


class Summary:
    """Count, mean, median, min and max of a series of values, in bounded memory.

    The median is read from a histogram at ``resolution`` (so it is exact to
    that step); the mean, min and max are exact.
    """

    def __init__(self, resolution: float) -> None:
        self.resolution = resolution
        self.count = 0
        self._sum = 0.0
        self.low = math.inf
        self.high = -math.inf
        self._histogram: Counter[int] = Counter()
        #: ``to_json`` as last computed: the median walks the histogram, and most
        #: outcomes add to only some of the summaries.
        self._figures: dict[str, Any] | None = None

    def add(self, value: float) -> None:
        self._figures = None
        self.count += 1
        self._sum += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        self._histogram[round(value / self.resolution)] += 1

    def median(self) -> float | None:
        if not self.count:
            return None
        middle = [(self.count - 1) // 2, self.count // 2]  # one index, or the two middle ones
        found: list[float] = []
        seen = 0
        for step in sorted(self._histogram):
            seen += self._histogram[step]
            while middle and middle[0] < seen:
                middle.pop(0)
                found.append(step * self.resolution)
        return sum(found) / len(found)

    def to_json(self) -> dict[str, Any]:
        if self._figures is None:
            self._figures = self._compute_figures()
        return dict(self._figures)

    def _compute_figures(self) -> dict[str, Any]:
        if not self.count:
            return {"count": 0, "mean": None, "median": None, "min": None, "max": None}
        median = self.median()
        assert median is not None
        return {
            "count": self.count,
            "mean": round(self._sum / self.count, 3),
            "median": round(median, 3),
            "min": round(self.low, 3),
            "max": round(self.high, 3),
        }
