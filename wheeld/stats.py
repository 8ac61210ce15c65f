"""A table's statistics over its result series (``docs/statistics.md``).

Pure: fed the published ``<base>/game`` payloads, from a replay, the journal
or (later) the pipeline after each decision. It reads no clock: games per
hour come from the payloads' own ``ts``.

The chi-squared test says how far the counts per number stand from an even
wheel; a small p-value is a *deviation* worth watching, never by itself proof
of a faulty wheel. It is reported only when every expected count is at least
5 (the usual condition for the chi-squared approximation to hold).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wheeld.layout import SECTORS, WheelLayout, layout_for

#: Rolling windows (last N results) reported beside the whole series.
DEFAULT_WINDOWS: tuple[int, ...] = (500, 1000)

#: The smallest expected count per pocket for which the chi-squared test is reported.
MIN_EXPECTED = 5

_DIRECTIONS = ("cw", "ccw")

#: Every outcome of each even chance and group, always listed (zero wins none of them).
_CHANCES: dict[str, tuple[str, ...]] = {
    "color": ("red", "black", "green"),
    "parity": ("odd", "even", "zero"),
    "half": ("low", "high", "zero"),
    "dozen": ("1", "2", "3", "zero"),
    "column": ("1", "2", "3", "zero"),
}


# -- the chi-squared distribution --------------------------------------------------------------

_EPS = 1e-16
_TINY = 1e-300
_MAX_TERMS = 100_000


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-squared with ``df`` degrees of freedom: Q(df/2, x/2)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df}")
    if math.isnan(x):
        return math.nan
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return _gamma_q(df / 2, x / 2)


def _gamma_q(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x), for a > 0 and x > 0.

    The series converges fast below a + 1 and gives P = 1 - Q, which is then not
    small; above it the continued fraction gives Q itself, so a tail
    probability keeps its relative precision down to the smallest doubles.
    """
    # x^a e^-x / Gamma(a), in logarithms so that large a and x do not overflow.
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1 / a
        denominator = a
        for _ in range(_MAX_TERMS):
            denominator += 1
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    # Modified Lentz evaluation of the continued fraction for Q.
    b = x + 1 - a
    c = 1 / _TINY
    d = 1 / b
    h = d
    for i in range(1, _MAX_TERMS):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        if abs(d) < _TINY:
            d = _TINY
        c = b + an / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < _EPS:
            break
    return math.exp(log_front) * h


@dataclass(frozen=True, slots=True)
class ChiSquared:
    """The chi-squared goodness of fit of the counts per number against an even wheel.

    ``value`` and ``p_value`` are None, with ``reason`` saying why, while some
    expected count is below ``MIN_EXPECTED``.
    """

    value: float | None
    df: int
    p_value: float | None
    games: int
    reason: str | None = None

    @classmethod
    def of(cls, counts: Mapping[str, int], layout: WheelLayout) -> ChiSquared:
        games = sum(counts.get(number, 0) for number in layout.order)
        df = layout.pockets - 1
        needed = MIN_EXPECTED * layout.pockets
        if games < needed:
            reason = (
                f"{games} games: the test needs {needed} on a {layout.pockets}-pocket wheel "
                f"(an expected count of at least {MIN_EXPECTED} per pocket)"
            )
            return cls(None, df, None, games, reason)
        expected = games / layout.pockets
        value = math.fsum(
            (counts.get(number, 0) - expected) ** 2 / expected for number in layout.order
        )
        return cls(value, df, chi2_sf(value, df), games)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "df": self.df,
            "p_value": self.p_value,
            "games": self.games,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out


# -- tallies over results ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Result:
    number: str
    rotor_direction: str | None


def _percent(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


class _Tally:
    """Everything counted over a run of results: the whole series, or one window."""

    def __init__(self, layout: WheelLayout) -> None:
        self.layout = layout
        self.results = 0
        self.counts: Counter[str] = Counter()
        self.chances: dict[str, Counter[str]] = {
            name: Counter() for name in ("color", "parity", "half", "dozen", "column")
        }
        self.sectors: dict[str, Counter[str]] = {name: Counter() for name in SECTORS}
        self.repeats = 0
        self.distances: dict[str, Counter[int]] = {}
        self._previous: str | None = None

    def add(self, result: _Result) -> None:
        facts = self.layout.facts(result.number)
        self.results += 1
        self.counts[result.number] += 1
        direction = result.rotor_direction if result.rotor_direction in _DIRECTIONS else None
        for name, value in (
            ("color", facts.color),
            ("parity", facts.parity),
            ("half", facts.half),
            ("dozen", facts.dozen),
            ("column", facts.column),
        ):
            # Zero wins none of the even chances, dozens or columns: it is counted as "zero".
            self.chances[name][str(value) if value is not None else "zero"] += 1
        for sector in facts.sectors:
            self.sectors[sector]["all"] += 1
            self.sectors[sector][direction or "unknown"] += 1
        if self._previous is not None:
            if self._previous == result.number:
                self.repeats += 1
            distance = self._distance(self._previous, result.number, direction)
            self.distances.setdefault(direction or "unknown", Counter())[distance] += 1
        self._previous = result.number

    def _distance(self, previous: str, number: str, direction: str | None) -> int:
        """Pockets from the previous result to this one, in -(p-1)/2 .. p/2.

        Counted along the wheel order (clockwise as seen from above); with a
        known rotor direction, positive is the way the rotor turned, so the
        two directions' histograms are comparable.
        """
        order = self.layout.order
        pockets = self.layout.pockets
        steps = (order.index(number) - order.index(previous)) % pockets
        if steps > pockets // 2:
            steps -= pockets
        return -steps if direction == "ccw" else steps

    def to_json(self) -> dict[str, Any]:
        counts = {number: self.counts.get(number, 0) for number in self.layout.order}
        return {
            "results": self.results,
            "counts": dict(sorted(counts.items(), key=lambda item: _number_key(item[0]))),
            "chi_squared": ChiSquared.of(self.counts, self.layout).to_json(),
            "chances": {
                name: {
                    key: {"count": tally[key], "percent": _percent(tally[key], self.results)}
                    for key in _CHANCES[name]
                }
                for name, tally in self.chances.items()
            },
            "sectors": (
                {
                    name: {key: tally.get(key, 0) for key in ("all", *_DIRECTIONS, "unknown")}
                    for name, tally in self.sectors.items()
                }
                if self.layout.pockets == 37
                else None  # the called bets are single-zero bets
            ),
            "repeats": {
                "count": self.repeats,
                "pairs": max(0, self.results - 1),
                "expected_rate": round(1 / self.layout.pockets, 6),
            },
            "distance": {
                direction: {str(step): n for step, n in sorted(histogram.items())}
                for direction, histogram in sorted(self.distances.items())
            },
        }


def _number_key(number: str) -> tuple[int, int]:
    return (-1, 0) if number == "00" else (0, int(number))


# -- the statistics ------------------------------------------------------------------------------


class Statistics:
    """A table's statistics: the whole result series, rolling windows, no-spins and game rate."""

    def __init__(self, pockets: int = 37, windows: Sequence[int] = DEFAULT_WINDOWS) -> None:
        if any(size < 1 for size in windows):
            raise ValueError(f"a window is at least one result: {list(windows)}")
        self.layout = layout_for(pockets)
        self.windows = tuple(sorted(set(windows)))
        self._whole = _Tally(self.layout)
        self._recent: deque[_Result] = deque(maxlen=max(self.windows, default=0))
        self.no_spins: Counter[str] = Counter()
        #: Results not counted: a number this wheel does not have.
        self.ignored = 0
        self._first_ts: datetime | None = None
        self._last_ts: datetime | None = None
        self._timed_games = 0

    @classmethod
    def from_events(
        cls,
        events: Iterable[Mapping[str, Any]],
        pockets: int | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
    ) -> Statistics:
        """Statistics over ``<base>/game`` payloads, in the order published.

        Without ``pockets``, a series with a ``"00"`` is of a double-zero wheel,
        any other of a single-zero one.
        """
        events = list(events)
        if pockets is None:
            pockets = 38 if any(event.get("number") == "00" for event in events) else 37
        statistics = cls(pockets, windows)
        for event in events:
            statistics.add(event)
        return statistics

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one ``<base>/game`` payload; only results and no-spins count.

        A result whose number is not a pocket of this wheel is counted in
        ``ignored``, never guessed at.
        """
        kind = event.get("event")
        if kind == "result":
            number = event.get("number")
            if not isinstance(number, str) or not self.layout.has_pocket(number):
                self.ignored += 1
                return
            direction = event.get("rotor_direction")
            result = _Result(number, direction if isinstance(direction, str) else None)
            self._whole.add(result)
            self._recent.append(result)
        elif kind == "no_spin":
            reason = event.get("reason")
            self.no_spins[reason if isinstance(reason, str) else "unknown"] += 1
        else:
            return  # spinning, no_more_bets: not an outcome
        self._note_time(event.get("ts"))

    def _note_time(self, ts: Any) -> None:
        try:
            at = datetime.fromisoformat(ts) if isinstance(ts, str) else None
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            return  # a game without a readable time is counted, but not in the rate
        self._timed_games += 1
        if self._first_ts is None or at < self._first_ts:
            self._first_ts = at
        if self._last_ts is None or at > self._last_ts:
            self._last_ts = at

    @property
    def results(self) -> int:
        return self._whole.results

    @property
    def counts(self) -> dict[str, int]:
        """Results per number, every pocket of the wheel included."""
        return {number: self._whole.counts.get(number, 0) for number in self.layout.order}

    @property
    def chi_squared(self) -> ChiSquared:
        """The test over the whole series."""
        return ChiSquared.of(self._whole.counts, self.layout)

    def window(self, size: int) -> dict[str, Any]:
        """The tally over the last ``size`` results (fewer while the series is shorter)."""
        if size not in self.windows:
            raise ValueError(f"no window of {size} results: the windows are {list(self.windows)}")
        tally = _Tally(self.layout)
        for result in list(self._recent)[-size:]:
            tally.add(result)
        return tally.to_json()

    def to_json(self) -> dict[str, Any]:
        games = self.results + sum(self.no_spins.values())
        return {
            "pockets": self.layout.pockets,
            "games": games,
            **self._whole.to_json(),
            "windows": {str(size): self.window(size) for size in self.windows},
            "no_spins": {
                "count": sum(self.no_spins.values()),
                "by_reason": {
                    reason: {"count": count, "rate": round(count / games, 6)}
                    for reason, count in sorted(self.no_spins.items())
                },
            },
            "games_per_hour": self._games_per_hour(),
            "ignored": self.ignored,
        }

    def _games_per_hour(self) -> dict[str, Any]:
        """Games (results and no-spins) per hour between the first and the last game's time."""
        hours = None
        rate = None
        if self._first_ts is not None and self._last_ts is not None:
            hours = (self._last_ts - self._first_ts).total_seconds() / 3600
            if hours > 0:
                rate = round((self._timed_games - 1) / hours, 3)
            hours = round(hours, 6)
        return {"games": self._timed_games, "hours": hours, "rate": rate}


def describe(statistics: Statistics) -> list[str]:
    """The statistics as a readable table, a line per row."""
    data = statistics.to_json()
    lines = [f"{data['pockets']}-pocket wheel: {data['games']} games, {data['results']} results"]
    lines += _describe_chi(data["chi_squared"], "whole series")
    for size, window in data["windows"].items():
        lines += _describe_chi(window["chi_squared"], f"last {size}")
    lines.append("")
    lines.append("number  count")
    lines += [f"{number:>6}  {count:5}" for number, count in data["counts"].items()]
    lines.append("")
    for name, tally in data["chances"].items():
        parts = [f"{key} {value['count']} ({value['percent']}%)" for key, value in tally.items()]
        lines.append(f"{name:>8}: " + ", ".join(parts))
    if data["sectors"] is not None:
        lines.append("")
        lines.append("sector      all    cw   ccw")
        for name, tally in data["sectors"].items():
            lines.append(f"{name:<9} {tally['all']:5} {tally['cw']:5} {tally['ccw']:5}")
    repeats = data["repeats"]
    lines.append("")
    lines.append(
        f"repeats: {repeats['count']} of {repeats['pairs']} "
        f"(an even wheel: {repeats['expected_rate']:.4f} of them)"
    )
    for direction, histogram in data["distance"].items():
        top = sorted(histogram.items(), key=lambda item: -item[1])[:5]
        lines.append(
            f"distance from the previous result ({direction}), most frequent: "
            + ", ".join(f"{step} x{count}" for step, count in top)
        )
    spins = data["no_spins"]
    lines.append(f"no-spins: {spins['count']}")
    lines += [
        f"  {reason}: {value['count']} ({100 * value['rate']:.2f}% of games)"
        for reason, value in spins["by_reason"].items()
    ]
    rate = data["games_per_hour"]
    if rate["rate"] is not None:
        lines.append(f"games per hour: {rate['rate']} ({rate['games']} games in {rate['hours']} h)")
    if data["ignored"]:
        lines.append(f"ignored: {data['ignored']} results with a number this wheel does not have")
    return lines


def _describe_chi(chi: dict[str, Any], label: str) -> list[str]:
    if chi["value"] is None:
        return [f"chi-squared ({label}): not reported: {chi['reason']}"]
    verdict = (
        "a deviation from an even wheel worth watching"
        if chi["p_value"] < 0.01
        else "no significant deviation"
    )
    return [
        f"chi-squared ({label}): {chi['value']:.3f}, df {chi['df']}, "
        f"p-value {chi['p_value']:.4g} over {chi['games']} games: {verdict}"
    ]
