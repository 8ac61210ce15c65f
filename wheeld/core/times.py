"""The times of a table's games (``docs/statistics.md``): phase durations, ball
revolutions and rotor speed, each a ``Summary`` in bounded memory.

Read from the payloads' own ``ts``, never a clock.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Mapping
from datetime import datetime
from itertools import accumulate, pairwise
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
        #: The histogram's steps in order, as last sorted: the median walks them in C,
        #: each outcome, and a new step (which sorts them again) soon comes seldom.
        self._steps: list[int] = []
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
        histogram = self._histogram
        # Steps are only ever added: a histogram with as many as were sorted has no new one.
        if len(self._steps) != len(histogram):
            self._steps = sorted(histogram)
        steps = self._steps
        seen = list(accumulate(map(histogram.__getitem__, steps)))
        middle = ((self.count - 1) // 2, self.count // 2)  # one index twice, or the two middle
        found = [steps[bisect_right(seen, index)] * self.resolution for index in middle]
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


class GameTimes:
    """When a table's games were played, from the payloads' ``ts``: the phases'
    durations, ball revolutions, rotor speed at launch and the rate of play."""

    def __init__(self) -> None:
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.timed_games = 0
        #: The last games' times, for the recent rate of play.
        self.recent_times: deque[datetime] = deque(maxlen=RECENT_GAMES)
        #: The open games' launch and no-more-bets times, by game id.
        self.marks: dict[int, dict[str, datetime]] = {}
        self.last_outcome: datetime | None = None
        self.phases = {name: Summary(0.1) for name in PHASES}
        #: Pauses (gaps over PAUSE_S) left out of the time before a launch.
        self.pauses = 0
        self.revolutions = Summary(1.0)
        self.rotor_rpm = Summary(0.1)

    def note_phase(self, event: Mapping[str, Any], kind: str) -> None:
        """A launch or a no-more-bets: its time, and the rotor's speed at launch."""
        at = time_of(event.get("ts"))
        game = event.get("game_id")
        if kind == "spinning":
            rpm = event.get("rotor_rpm")
            # bool is an int: a stray true is no speed.
            if isinstance(rpm, int | float) and type(rpm) is not bool and 0 < rpm < math.inf:
                self.rotor_rpm.add(rpm)
            if at is not None and self.last_outcome is not None:
                waited = (at - self.last_outcome).total_seconds()
                if waited > PAUSE_S:
                    self.pauses += 1
                elif waited >= 0:
                    self.phases["open_to_launch"].add(waited)
        if at is None or type(game) is not int:
            return
        self.marks.setdefault(game, {})[kind] = at
        while len(self.marks) > OPEN_GAMES:  # games that never ended: forget the oldest
            del self.marks[min(self.marks)]

    def note_outcome(self, event: Mapping[str, Any], is_result: bool) -> None:
        at = time_of(event.get("ts"))
        game = event.get("game_id")
        marks = self.marks.pop(game, {}) if type(game) is int else {}
        if is_result:
            revolutions = event.get("revolutions")
            if type(revolutions) is int and revolutions >= 0:
                self.revolutions.add(revolutions)
        if at is None:
            return  # a game without a readable time is counted, but not timed
        if is_result:
            launch, closed = marks.get("spinning"), marks.get("no_more_bets")
            for name, start, end in (
                ("launch_to_no_more_bets", launch, closed),
                ("no_more_bets_to_result", closed, at),
                ("launch_to_result", launch, at),
            ):
                if start is not None and end is not None and end >= start:
                    self.phases[name].add((end - start).total_seconds())
        self.last_outcome = at
        self.recent_times.append(at)
        self.timed_games += 1
        if self.first_ts is None or at < self.first_ts:
            self.first_ts = at
        if self.last_ts is None or at > self.last_ts:
            self.last_ts = at

    def recent_rate(self) -> dict[str, Any]:
        """Games per hour of play over the last ``RECENT_GAMES`` games: gaps over
        ``PAUSE_S`` are pauses, left out; ``rate`` null until there are that many."""
        times = list(self.recent_times)
        gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(times)]
        play = [gap for gap in gaps if 0 <= gap <= PAUSE_S]
        seconds = math.fsum(play)
        rate = None
        if len(times) == RECENT_GAMES and seconds > 0:
            rate = round(len(play) * 3600 / seconds, 3)
        return {"games": len(times), "hours": round(seconds / 3600, 6), "rate": rate}

    def games_per_hour(self) -> dict[str, Any]:
        """Games (results and no-spins) per hour between the first and the last game's time."""
        hours = None
        rate = None
        if self.first_ts is not None and self.last_ts is not None:
            hours = (self.last_ts - self.first_ts).total_seconds() / 3600
            if hours > 0:
                rate = round((self.timed_games - 1) / hours, 3)
            hours = round(hours, 6)
        return {"games": self.timed_games, "hours": hours, "rate": rate}

    def json_members(self) -> list[tuple[str, str]]:
        """The members of ``Statistics.to_json`` these times give, with their JSON text."""
        dumps = json.dumps
        return [
            ("games_per_hour", dumps({**self.games_per_hour(), "recent": self.recent_rate()})),
            (
                "phases",
                dumps({name: summary.to_json() for name, summary in self.phases.items()}),
            ),
            ("pauses", dumps(self.pauses)),
            ("revolutions", dumps(self.revolutions.to_json())),
            ("rotor_rpm", dumps(self.rotor_rpm.to_json())),
        ]
