"""A table's statistics over its result series (``docs/statistics.md``).

Pure: fed the published ``<base>/game`` payloads, from a replay, the journal
or (later) the pipeline after each decision. It reads no clock: games per
hour come from the payloads' own ``ts``.

The chi-squared test says how far the counts per number stand from an even
wheel; a small p-value is a *deviation* worth watching, never by itself proof
of a faulty wheel. It is reported only when every expected count is at least
5 (the usual condition for the chi-squared approximation to hold).

Beside it: sliding arcs of k pockets in wheel order (an exact binomial test of
the most-hit arc, Bonferroni-corrected), serial correlation (the lag-1 Pearson
correlation of the numbers and the chi-squared of the distances between
consecutive results), phase durations, ball revolutions and rotor speed.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import accumulate, pairwise
from operator import sub
from typing import Any

from wheeld.core.layout import SECTORS, WheelLayout, layout_for

#: Rolling windows (last N results) reported beside the whole series.
DEFAULT_WINDOWS: tuple[int, ...] = (500, 1000)

#: The smallest expected count per pocket for which the chi-squared test is reported.
MIN_EXPECTED = 5

#: Sliding arcs of k neighbouring pockets reported by default (k = 3, 5, 9).
DEFAULT_ARCS: tuple[int, ...] = (3, 5, 9)

#: Games the recent rate of play is taken over.
RECENT_GAMES = 30

#: A gap between games longer than this (seconds) is a pause, not play: left
#: out of the recent rate and of the time before a launch.
PAUSE_S = 900.0

_DIRECTIONS = ("cw", "ccw")

#: The layout of ``Statistics.snapshot``: ``Statistics.restore`` reads this version only.
SNAPSHOT_VERSION = 1

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


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a > 0 and b > 0.

    The continued fraction converges fast below (a + 1) / (a + b + 2) and gives
    I itself there, so a small tail keeps its relative precision; above, the
    symmetry I_x(a, b) = 1 - I_(1-x)(b, a) is used.
    """
    if a <= 0 or b <= 0:
        raise ValueError(f"the beta function's parameters must be positive, not {a}, {b}")
    if math.isnan(x):
        return math.nan
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x < (a + 1) / (a + b + 2):
        return _beta_front(a, b, x) * _beta_fraction(a, b, x) / a
    return max(0.0, 1.0 - _beta_front(b, a, 1 - x) * _beta_fraction(b, a, 1 - x) / b)


def _beta_front(a: float, b: float, x: float) -> float:
    """x^a (1-x)^b / B(a, b), in logarithms so that large a and b do not overflow."""
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    return math.exp(log_front)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction for I_x(a, b), by the modified Lentz method."""
    c = 1.0
    d = 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) >= _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) >= _TINY else _TINY)
            c = 1 + numerator / c
            if abs(c) < _TINY:
                c = _TINY
            delta = d * c
            h *= delta
        if abs(delta - 1) < _EPS:
            break
    return h


def binomial_sf(count: int, trials: int, p: float) -> float:
    """P(X >= count) for X binomial(trials, p): I_p(count, trials - count + 1)."""
    if count <= 0:
        return 1.0
    if count > trials:
        return 0.0
    return _binomial_tail(count, trials, p)


@lru_cache(maxsize=4096)
def _binomial_tail(count: int, trials: int, p: float) -> float:
    """Remembered: a full window's arcs ask the same few tails outcome after outcome
    (its number of results no longer moves, its most-hit count seldom)."""
    return beta_inc(count, trials - count + 1, p)


def pearson_p_value(r: float, pairs: int) -> float:
    """The two-sided p-value of a Pearson correlation ``r`` over ``pairs`` pairs.

    Under independence (and normal margins) (r + 1) / 2 follows Beta(n/2 - 1,
    n/2 - 1): the exact distribution ``scipy.stats.pearsonr`` uses too.
    """
    if pairs < 3:
        raise ValueError(f"a correlation's p-value needs at least 3 pairs, not {pairs}")
    half = pairs / 2 - 1
    return min(1.0, 2 * beta_inc(half, half, (1 - abs(r)) / 2))


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
        return cls.of_pockets(_per_pocket(counts, layout), layout)

    @classmethod
    def of_pockets(cls, per_pocket: Sequence[int], layout: WheelLayout) -> ChiSquared:
        """The test over the counts per pocket in wheel order."""
        games = sum(per_pocket)
        df = layout.pockets - 1
        needed = MIN_EXPECTED * layout.pockets
        if games < needed:
            reason = (
                f"{games} games: the test needs {needed} on a {layout.pockets}-pocket wheel "
                f"(an expected count of at least {MIN_EXPECTED} per pocket)"
            )
            return cls(None, df, None, games, reason)
        expected = games / layout.pockets
        value = math.fsum((count - expected) ** 2 / expected for count in per_pocket)
        return cls(value, df, chi2_sf(value, df), games)

    @classmethod
    def uniform(cls, observed: Sequence[int], what: str) -> ChiSquared:
        """The goodness of fit of ``observed`` against equal counts in every category."""
        games = sum(observed)
        df = len(observed) - 1
        needed = MIN_EXPECTED * len(observed)
        if games < needed:
            reason = (
                f"{games} {what}: the test needs {needed} over {len(observed)} categories "
                f"(an expected count of at least {MIN_EXPECTED} in each)"
            )
            return cls(None, df, None, games, reason)
        expected = games / len(observed)
        value = math.fsum((count - expected) ** 2 / expected for count in observed)
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


def _per_pocket(counts: Mapping[str, int], layout: WheelLayout) -> list[int]:
    """Counts by number as a list in wheel order."""
    get = counts.get
    return [get(number, 0) for number in layout.order]


def _object_text(members: Iterable[tuple[str, str]]) -> str:
    """An object's JSON from its members' names and their values' JSON, as ``json.dumps``
    writes it: parts serialised once and kept are put together without encoding again."""
    return "{" + ", ".join(f"{json.dumps(name)}: {text}" for name, text in members) + "}"


#: The families of arcs, in the order published: every result, then by rotor direction.
_FAMILIES = ("all", "cw", "ccw")


class _Tally:
    """Everything counted over a run of results: the whole series, or one window."""

    def __init__(self, layout: WheelLayout, arcs: Sequence[int] = DEFAULT_ARCS) -> None:
        self.layout = layout
        self.arcs = tuple(arcs)
        self.results = 0
        self.counts: Counter[str] = Counter()
        #: Counts per number by the game's rotor direction, for the arcs.
        self.by_direction: dict[str, Counter[str]] = {key: Counter() for key in _DIRECTIONS}
        #: Lag-1 sums over consecutive numbers (x the one before, y the next), exact integers.
        self._pairs = _PairSums()
        self.chances: dict[str, Counter[str]] = {
            name: Counter() for name in ("color", "parity", "half", "dozen", "column")
        }
        self.sectors: dict[str, Counter[str]] = {name: Counter() for name in SECTORS}
        self.repeats = 0
        self.distances: dict[str, Counter[int]] = {}
        self._previous: str | None = None
        #: Each family's arcs of each size as last computed, with their JSON, by the
        #: family's counts per pocket: a family no outcome changed is not computed again.
        self._arcs: dict[tuple[str, int], tuple[list[int], Arcs, str]] = {}
        #: The chi-squared test as last computed, by the counts per pocket it was of.
        self._chi: tuple[list[int], ChiSquared] | None = None

    def add(self, result: _Result) -> None:
        facts = self.layout.facts(result.number)
        self.results += 1
        self.counts[result.number] += 1
        direction = result.rotor_direction if result.rotor_direction in _DIRECTIONS else None
        if direction is not None:
            self.by_direction[direction][result.number] += 1
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
            self._pairs.add(_label(self._previous), _label(result.number))
        self._previous = result.number

    def remove_oldest(self, oldest: _Result, following: _Result | None) -> None:
        """Take the window's oldest result back out, and its pair with the one after it.

        What ``add`` counted for ``oldest`` is undone exactly (keys that fall to
        zero go, as a tally rebuilt from the window would not have them), so a
        window slides in constant time instead of being recounted per game.
        """
        facts = self.layout.facts(oldest.number)
        self.results -= 1
        _decrement(self.counts, oldest.number)
        direction = oldest.rotor_direction if oldest.rotor_direction in _DIRECTIONS else None
        if direction is not None:
            _decrement(self.by_direction[direction], oldest.number)
        for name, value in (
            ("color", facts.color),
            ("parity", facts.parity),
            ("half", facts.half),
            ("dozen", facts.dozen),
            ("column", facts.column),
        ):
            _decrement(self.chances[name], str(value) if value is not None else "zero")
        for sector in facts.sectors:
            _decrement(self.sectors[sector], "all")
            _decrement(self.sectors[sector], direction or "unknown")
        if following is None:
            self._previous = None  # the window is empty now
            return
        # The pair (oldest, following) was counted when ``following`` came, by its direction.
        later = following.rotor_direction if following.rotor_direction in _DIRECTIONS else None
        if oldest.number == following.number:
            self.repeats -= 1
        key = later or "unknown"
        _decrement(self.distances[key], self._distance(oldest.number, following.number, later))
        if not self.distances[key]:
            del self.distances[key]
        self._pairs.remove(_label(oldest.number), _label(following.number))

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
        loaded: dict[str, Any] = json.loads(self.to_json_text())
        return loaded

    def to_json_text(self) -> str:
        """``to_json`` as JSON text (``json.dumps``'s), each arc's part serialised once."""
        return _object_text(self.json_members())

    def json_members(self) -> list[tuple[str, str]]:
        """The members of ``to_json``, each name with its value's JSON text, in order."""
        layout = self.layout
        families = {name: self.family_counts(name) for name in _FAMILIES}
        numbers = _in_number_order(layout.order)
        counts = self.counts
        dumps = json.dumps
        return [
            ("results", dumps(self.results)),
            ("counts", _counts_template(numbers) % tuple([counts[n] for n in numbers])),
            ("chi_squared", dumps(self.chi_squared(families["all"]).to_json())),
            (
                "chances",
                dumps(
                    {
                        name: {
                            key: {
                                "count": tally[key],
                                "percent": _percent(tally[key], self.results),
                            }
                            for key in _CHANCES[name]
                        }
                        for name, tally in self.chances.items()
                    }
                ),
            ),
            (
                "sectors",
                dumps(
                    {
                        name: {key: tally.get(key, 0) for key in ("all", *_DIRECTIONS, "unknown")}
                        for name, tally in self.sectors.items()
                    }
                    if layout.pockets == 37
                    else None  # the called bets are single-zero bets
                ),
            ),
            (
                "repeats",
                dumps(
                    {
                        "count": self.repeats,
                        "pairs": max(0, self.results - 1),
                        "expected_rate": round(1 / layout.pockets, 6),
                    }
                ),
            ),
            (
                "distance",
                dumps(
                    {
                        direction: {str(step): n for step, n in sorted(histogram.items())}
                        for direction, histogram in sorted(self.distances.items())
                    }
                ),
            ),
            (
                "arcs",
                _object_text(
                    (
                        str(k),
                        _object_text(
                            (name, self.family_arcs(name, per_pocket, k)[1])
                            for name, per_pocket in families.items()
                        ),
                    )
                    for k in self.arcs
                ),
            ),
            (
                "serial",
                dumps(
                    {
                        "pairs": self._pairs.n,
                        "correlation": self._pairs.correlation(),
                        "distance_chi_squared": self.distance_test().to_json(),
                    }
                ),
            ),
        ]

    def family_counts(self, family: str) -> list[int]:
        """A family's counts per pocket in wheel order: every result (``all``), cw or ccw."""
        return _per_pocket(
            self.counts if family == "all" else self.by_direction[family], self.layout
        )

    def family_arcs(self, family: str, per_pocket: list[int], k: int) -> tuple[Arcs, str]:
        """The arcs of ``k`` pockets over a family's counts per pocket, and their JSON:
        computed again only when those counts moved."""
        kept = self._arcs.get((family, k))
        if kept is not None and kept[0] == per_pocket:
            return kept[1], kept[2]
        arcs = Arcs.of_pockets(per_pocket, self.layout, k)
        text = arcs.to_json_text()
        self._arcs[family, k] = (per_pocket, arcs, text)
        return arcs, text

    def chi_squared(self, per_pocket: list[int] | None = None) -> ChiSquared:
        """The chi-squared over the counts (``per_pocket``, when already at hand):
        computed again only when they moved."""
        if per_pocket is None:
            per_pocket = self.family_counts("all")
        if self._chi is None or self._chi[0] != per_pocket:
            self._chi = (per_pocket, ChiSquared.of_pockets(per_pocket, self.layout))
        return self._chi[1]

    def arcs_of(self, k: int) -> dict[str, Any]:
        """The arcs of ``k`` neighbouring pockets over every result and by rotor direction."""
        return {
            name: self.family_arcs(name, self.family_counts(name), k)[0].to_json()
            for name in _FAMILIES
        }

    def distance_test(self) -> ChiSquared:
        """The chi-squared of the distances between consecutive results against uniform.

        Independent results of an even wheel are a uniform walk round it: every
        distance equally likely, whatever the one before. A peak (a dealer
        signature) or a hole shows here before it shows in the counts.
        """
        pockets = self.layout.pockets
        # By residue: on a double-zero wheel +19 and -19 (a ccw game's +19) are one distance.
        observed = [0] * pockets
        for histogram in self.distances.values():
            for step, count in histogram.items():
                observed[step % pockets] += count
        return ChiSquared.uniform(observed, "pairs")

    def snapshot(self) -> dict[str, Any]:
        """What the whole series' tally needs to go on: counts per pocket (all and by
        rotor direction) in wheel order, each direction's distance histogram from
        ``-(pockets // 2)`` on, the repeats, the lag-1 sums and the last result.

        The even chances and the sectors are sums of the counts: recounted, not kept.
        """
        order = self.layout.order
        steps = _steps(self.layout)
        return {
            "results": self.results,
            "counts": [self.counts.get(number, 0) for number in order],
            "by_direction": {
                key: [self.by_direction[key].get(number, 0) for number in order]
                for key in _DIRECTIONS
            },
            "repeats": self.repeats,
            "distances": {
                key: [self.distances.get(key, Counter()).get(step, 0) for step in steps]
                for key in _DISTANCE_KEYS
            },
            "pairs": self._pairs.snapshot(),
            "previous": self._previous,
        }

    def load(self, snapshot: Any, where: str) -> None:
        """Take up ``snapshot`` in this fresh tally, checked to be one a series can give."""
        data = _fields(snapshot, where, _TALLY_MEMBERS)
        order = self.layout.order
        counts = _counts(data["counts"], f"{where}.counts", len(order))
        results = _count(data["results"], f"{where}.results")
        if results != sum(counts):
            raise _malformed(f"{where}.results", "not the sum of the counts")
        directions = _fields(data["by_direction"], f"{where}.by_direction", _DIRECTIONS)
        by_direction = {
            key: _counts(directions[key], f"{where}.by_direction.{key}", len(order))
            for key in _DIRECTIONS
        }
        known = [cw + ccw for cw, ccw in zip(by_direction["cw"], by_direction["ccw"], strict=True)]
        if any(map(int.__gt__, known, counts)):
            raise _malformed(f"{where}.by_direction", "more results than the counts")
        self._load_distances(data["distances"], f"{where}.distances", by_direction, results)
        repeats = _count(data["repeats"], f"{where}.repeats")
        if repeats != sum(histogram[0] for histogram in self.distances.values()):
            raise _malformed(f"{where}.repeats", "not the distances of 0")
        previous = data["previous"]
        if (previous is None) != (results == 0) or (
            previous is not None and not counts[_index(previous, self.layout, f"{where}.previous")]
        ):
            raise _malformed(f"{where}.previous", "not a result counted")
        self._pairs.load(data["pairs"], f"{where}.pairs", counts, self.layout, previous)
        self.results, self.repeats, self._previous = results, repeats, previous
        for index, number in enumerate(order):
            _credit(self.counts, number, counts[index])
            for key in _DIRECTIONS:
                _credit(self.by_direction[key], number, by_direction[key][index])
            facts = self.layout.facts(number)
            for name, tally in self.chances.items():
                value = getattr(facts, name)
                _credit(tally, str(value) if value is not None else "zero", counts[index])
            for sector in facts.sectors:
                _credit(self.sectors[sector], "all", counts[index])
                for key in _DIRECTIONS:
                    _credit(self.sectors[sector], key, by_direction[key][index])
                _credit(self.sectors[sector], "unknown", counts[index] - known[index])

    def _load_distances(
        self, snapshot: Any, where: str, by_direction: dict[str, list[int]], results: int
    ) -> None:
        steps = _steps(self.layout)
        data = _fields(snapshot, where, _DISTANCE_KEYS)
        histograms = {
            key: _counts(data[key], f"{where}.{key}", len(steps)) for key in _DISTANCE_KEYS
        }
        if sum(map(sum, histograms.values())) != max(0, results - 1):
            raise _malformed(where, "not one distance per pair of consecutive results")
        # A pair is counted by its later result's direction: no more pairs than such results.
        available = {key: sum(by_direction[key]) for key in _DIRECTIONS}
        available["unknown"] = results - sum(available.values())
        for key, histogram in histograms.items():
            if sum(histogram) > available[key]:
                raise _malformed(f"{where}.{key}", "more pairs than results of that direction")
        # Half-way round a double-zero wheel is +19 clockwise: -19 only for a ccw game.
        if self.layout.pockets % 2 == 0 and (
            histograms["ccw"][-1] or histograms["cw"][0] or histograms["unknown"][0]
        ):
            raise _malformed(where, "a distance half-way round counted the wrong way")
        for key, histogram in histograms.items():
            found = Counter(
                {step: count for step, count in zip(steps, histogram, strict=True) if count}
            )
            if found:
                self.distances[key] = found


def _decrement(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


#: The extra zeros as integers for the correlation: the labels after 36.
_ZERO_LABELS = {"00": 37, "000": 38, "0000": 39}


def _label(number: str) -> int:
    """A number as an integer for the correlation: 00 is 37, the label after 36 (000 38,
    0000 39)."""
    return _ZERO_LABELS.get(number) or int(number)


class _PairSums:
    """Running sums over consecutive pairs (x, y), exact in integers, for a Pearson r."""

    def __init__(self) -> None:
        self.n = self.sx = self.sy = self.sxx = self.syy = self.sxy = 0

    def add(self, x: int, y: int) -> None:
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.syy += y * y
        self.sxy += x * y

    def remove(self, x: int, y: int) -> None:
        self.n -= 1
        self.sx -= x
        self.sy -= y
        self.sxx -= x * x
        self.syy -= y * y
        self.sxy -= x * y

    def snapshot(self) -> list[int]:
        """``[n, sx, sy, sxx, syy, sxy]``."""
        return [self.n, self.sx, self.sy, self.sxx, self.syy, self.sxy]

    def load(
        self, snapshot: Any, where: str, counts: list[int], layout: WheelLayout, last: str | None
    ) -> None:
        """Take up ``snapshot``, checked against the counts it was summed over.

        Every result but the last is an x, every one but the first a y: the x sums
        follow from the counts and the last result, and the y sums must name a
        first result that was counted.
        """
        sums = _counts(snapshot, where, 6)
        n, sx, sy, sxx, syy, sxy = sums
        labels = [_label(number) for number in layout.order]
        total = sum(map(int.__mul__, labels, counts))
        squares = sum(label * label * count for label, count in zip(labels, counts, strict=True))
        results = sum(counts)
        if n != max(0, results - 1):
            raise _malformed(where, "not one pair per consecutive results")
        if last is None or n == 0:
            consistent = sums == [0] * 6
        else:
            x_out = _label(last)
            first = total - sy
            held = counts[labels.index(first)] if first in labels else 0
            consistent = (
                sx == total - x_out
                and sxx == squares - x_out * x_out
                and syy == squares - first * first
                and held >= 1 + (first == x_out)
                and sxy * sxy <= sxx * syy  # Cauchy-Schwarz: |r| <= 1
            )
        if not consistent:
            raise _malformed(where, "lag-1 sums no series of these counts gives")
        self.n, self.sx, self.sy, self.sxx, self.syy, self.sxy = sums

    def correlation(self) -> dict[str, Any]:
        """The lag-1 correlation ``r`` and its two-sided ``p_value``; null, with a
        ``reason``, under 3 pairs or when either side never varies."""
        n = self.n
        if n < 3:
            return {"r": None, "p_value": None, "reason": f"{n} pairs: the test needs 3"}
        var_x = n * self.sxx - self.sx * self.sx
        var_y = n * self.syy - self.sy * self.sy
        if var_x == 0 or var_y == 0:
            return {"r": None, "p_value": None, "reason": "the same number every time"}
        r = (n * self.sxy - self.sx * self.sy) / math.sqrt(var_x * var_y)
        r = max(-1.0, min(1.0, r))
        return {"r": r, "p_value": pearson_p_value(r, n)}


@dataclass(frozen=True, slots=True)
class Arcs:
    """Sliding arcs of ``k`` neighbouring pockets in wheel order, and the most-hit one.

    Arc i is the k pockets from ``layout.order[i]`` on, clockwise. Each arc's
    count is binomial(results, k / pockets) on an even wheel; the most-hit arc's
    ``p_value`` is the exact binomial upper tail P(X >= its count), times the
    number of arcs (Bonferroni: the most-hit of many arcs is high by chance),
    at most 1.
    """

    k: int
    results: int
    expected: float
    #: Each arc's count, by its first pocket, in wheel order.
    counts: dict[str, int]
    #: The most-hit arc's pockets, clockwise (the first in wheel order among equals).
    most_hit: tuple[str, ...]
    count: int
    p_value: float | None

    @classmethod
    def of(cls, counts: Mapping[str, int], layout: WheelLayout, k: int) -> Arcs:
        return cls.of_pockets(_per_pocket(counts, layout), layout, k)

    @classmethod
    def of_pockets(cls, per_pocket: Sequence[int], layout: WheelLayout, k: int) -> Arcs:
        """The arcs over the counts per pocket in wheel order."""
        order = layout.order
        pockets = layout.pockets
        # Each arc's count is a difference of running sums round the wheel (and k - 1 on).
        running = [0, *accumulate([*per_pocket, *per_pocket[: k - 1]])]
        by_arc = list(map(sub, running[k : k + pockets], running[:pockets]))
        arc_counts = dict(zip(order, by_arc, strict=True))
        results = running[pockets]
        expected = results * k / pockets
        if not results:
            return cls(k, 0, 0.0, arc_counts, (), 0, None)
        top = max(by_arc)
        first = by_arc.index(top)  # the first in wheel order among equals
        arc = tuple(order[(first + step) % pockets] for step in range(k))
        p_value = min(1.0, pockets * binomial_sf(top, results, k / pockets))
        return cls(k, results, expected, arc_counts, arc, top, p_value)

    def to_json(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "expected": round(self.expected, 6),
            "counts": self.counts,
            "most_hit": {
                "pockets": list(self.most_hit),
                "count": self.count,
                "p_value": self.p_value,
            },
        }

    def to_json_text(self) -> str:
        """``to_json`` as ``json.dumps`` writes it; the counts per arc through a template."""
        dumps = json.dumps
        return (
            f'{{"results": {self.results}, "expected": {dumps(round(self.expected, 6))}, '
            f'"counts": {_counts_text(self.counts)}, '
            f'"most_hit": {{"pockets": {dumps(list(self.most_hit))}, "count": {self.count}, '
            f'"p_value": {dumps(self.p_value)}}}}}'
        )


def _counts_text(counts: Mapping[str, int]) -> str:
    """Counts by name as ``json.dumps`` writes them, in the mapping's order."""
    return _counts_template(tuple(counts)) % tuple(counts.values())


@lru_cache(maxsize=64)
def _counts_template(names: tuple[str, ...]) -> str:
    """The JSON object of ``names`` with a ``%d`` for each count: a wheel's few orders."""
    return "{" + ", ".join(f"{json.dumps(name)}: %d" for name in names) + "}"


def _number_key(number: str) -> tuple[int, int]:
    return (-len(number), 0) if number in ("00", "000", "0000") else (0, int(number))


@lru_cache(maxsize=8)
def _in_number_order(order: tuple[str, ...]) -> tuple[str, ...]:
    """A wheel's numbers as the counts are published: the extra zeros first, then 0 to 36."""
    return tuple(sorted(order, key=_number_key))


# -- phases, revolutions, speeds -----------------------------------------------------------------

#: The phases of a game timed, from the payloads' ``ts``: the time before the
#: launch (bets open, from the previous outcome), the ball running with bets
#: still open, from no more bets to the result, and the whole spin.
PHASES = ("open_to_launch", "launch_to_no_more_bets", "no_more_bets_to_result", "launch_to_result")

#: Games begun but not ended that are remembered (their launch times).
_OPEN_GAMES = 8


def _time(ts: Any) -> datetime | None:
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

    def snapshot(self) -> dict[str, Any]:
        """Count, sum, min and max (null with no value) and the histogram, a
        ``[step, count]`` pair per step of the resolution seen, ascending."""
        return {
            "count": self.count,
            "sum": self._sum,
            "low": self.low if self.count else None,
            "high": self.high if self.count else None,
            "histogram": [[step, count] for step, count in sorted(self._histogram.items())],
        }

    def load(self, snapshot: Any, where: str) -> None:
        """Take up ``snapshot`` in this fresh summary, checked to be one values can give."""
        data = _fields(snapshot, where, _SUMMARY_MEMBERS)
        count = _count(data["count"], f"{where}.count")
        histogram: Counter[int] = Counter()
        step = None
        for index, entry in enumerate(_items(data["histogram"], f"{where}.histogram")):
            at = f"{where}.histogram[{index}]"
            pair = _items(entry, at, 2)
            if type(pair[0]) is not int or not -_FLOAT_MAX <= pair[0] <= _FLOAT_MAX:
                raise _malformed(at, "a step is a whole number")
            if step is not None and pair[0] <= step:
                raise _malformed(at, "steps ascend, each once")
            step = pair[0]
            histogram[step] = _count(pair[1], at)
            if not histogram[step]:
                raise _malformed(at, "a step seen is seen at least once")
        if sum(histogram.values()) != count:
            raise _malformed(f"{where}.histogram", "not as many values as the count")
        total = data["sum"]
        if type(total) is not float or math.isnan(total):
            raise _malformed(f"{where}.sum", f"a number with a point expected, not {_kind(total)}")
        if not count:
            if total != 0 or data["low"] is not None or data["high"] is not None:
                raise _malformed(where, "a sum, min or max without values")
            return
        low, high = _value(data["low"], f"{where}.low"), _value(data["high"], f"{where}.high")
        if low > high:
            raise _malformed(where, "its min above its max")
        self.count, self._sum, self.low, self.high = count, total, low, high
        self._histogram = histogram
        self._figures = None

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


@dataclass(frozen=True, slots=True)
class Concentration:
    """The most concentrated arc of the series: what the sector alert judges."""

    family: str
    pockets: tuple[str, ...]
    count: int
    results: int
    p_value: float


# -- the statistics ------------------------------------------------------------------------------


class Statistics:
    """A table's statistics: the whole result series, rolling windows, no-spins and game rate."""

    def __init__(
        self,
        pockets: int = 37,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> None:
        if any(size < 1 for size in windows):
            raise ValueError(f"a window is at least one result: {list(windows)}")
        # A custom pocket order (wheel.pocket_order) sets the pockets and their neighbours.
        self.layout = layout_for(len(order), order) if order else layout_for(pockets)
        if any(not 1 <= k < self.layout.pockets for k in arcs):
            raise ValueError(f"an arc is 1 to {self.layout.pockets - 1} pockets: {list(arcs)}")
        self.windows = tuple(sorted(set(windows)))
        self.arcs = tuple(sorted(set(arcs)))
        self._whole = _Tally(self.layout, self.arcs)
        self._recent: deque[_Result] = deque(maxlen=max(self.windows, default=0))
        #: Each window's tally, slid by one result per result (not recounted).
        self._window_tallies = {size: _Tally(self.layout, self.arcs) for size in self.windows}
        self.no_spins: Counter[str] = Counter()
        #: Results not counted: a number this wheel does not have.
        self.ignored = 0
        self._first_ts: datetime | None = None
        self._last_ts: datetime | None = None
        self._timed_games = 0
        #: The last games' times, for the recent rate of play.
        self._recent_times: deque[datetime] = deque(maxlen=RECENT_GAMES)
        #: The open games' launch and no-more-bets times, by game id.
        self._marks: dict[int, dict[str, datetime]] = {}
        self._last_outcome: datetime | None = None
        self.phases = {name: Summary(0.1) for name in PHASES}
        #: Pauses (gaps over PAUSE_S) left out of the time before a launch.
        self.pauses = 0
        self.revolutions = Summary(1.0)
        self.rotor_rpm = Summary(0.1)

    @classmethod
    def from_events(
        cls,
        events: Iterable[Mapping[str, Any]],
        pockets: int | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> Statistics:
        """Statistics over ``<base>/game`` payloads, in the order published.

        With ``pockets`` the events are counted as they come, one at a time:
        memory stays bounded whatever the series' length. Without, a series with
        a ``"00"`` is of a double-zero wheel, any other of a single-zero one, and
        the whole series is held in a list to look for it first: pass
        ``pockets`` for a long series.
        """
        if pockets is None:
            events = list(events)
            pockets = 38 if any(event.get("number") == "00" for event in events) else 37
        statistics = cls(pockets, windows, arcs, order)
        for event in events:
            statistics.add(event)
        return statistics

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one ``<base>/game`` payload; only results and no-spins are outcomes,
        launches and no-more-bets are timed for the phases.

        A result whose number is not a pocket of this wheel is counted in
        ``ignored``, never guessed at.
        """
        kind = event.get("event")
        if kind in ("spinning", "no_more_bets"):
            self._note_phase(event, kind)
            return
        if kind == "result":
            number = event.get("number")
            if not isinstance(number, str) or not self.layout.has_pocket(number):
                self.ignored += 1
                return
            direction = event.get("rotor_direction")
            result = _Result(number, direction if isinstance(direction, str) else None)
            self._whole.add(result)
            self._slide_windows(result)
        elif kind == "no_spin":
            reason = event.get("reason")
            self.no_spins[reason if isinstance(reason, str) else "unknown"] += 1
        else:
            return  # not a game event
        self._note_outcome(event, kind == "result")

    def _slide_windows(self, result: _Result) -> None:
        recent = self._recent
        held = len(recent)
        for size, tally in self._window_tallies.items():
            if held >= size:  # full: the oldest of the last ``size`` leaves
                oldest = recent[held - size]
                following = recent[held - size + 1] if size > 1 else None
                tally.remove_oldest(oldest, following)
            tally.add(result)
        recent.append(result)

    def _note_phase(self, event: Mapping[str, Any], kind: str) -> None:
        """A launch or a no-more-bets: its time, and the rotor's speed at launch."""
        at = _time(event.get("ts"))
        game = event.get("game_id")
        if kind == "spinning":
            rpm = event.get("rotor_rpm")
            # bool is an int: a stray true is no speed.
            if isinstance(rpm, int | float) and type(rpm) is not bool and 0 < rpm < math.inf:
                self.rotor_rpm.add(rpm)
            if at is not None and self._last_outcome is not None:
                waited = (at - self._last_outcome).total_seconds()
                if waited > PAUSE_S:
                    self.pauses += 1
                elif waited >= 0:
                    self.phases["open_to_launch"].add(waited)
        if at is None or type(game) is not int:
            return
        self._marks.setdefault(game, {})[kind] = at
        while len(self._marks) > _OPEN_GAMES:  # games that never ended: forget the oldest
            del self._marks[min(self._marks)]

    def _note_outcome(self, event: Mapping[str, Any], is_result: bool) -> None:
        at = _time(event.get("ts"))
        game = event.get("game_id")
        marks = self._marks.pop(game, {}) if type(game) is int else {}
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
        self._last_outcome = at
        self._recent_times.append(at)
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
        return self._whole.chi_squared()

    def arcs_of(self, k: int) -> dict[str, Arcs]:
        """The arcs of ``k`` pockets over the whole series: all results, cw and ccw."""
        whole = self._whole
        return {
            name: whole.family_arcs(name, whole.family_counts(name), k)[0] for name in _FAMILIES
        }

    def sector_concentration(self, min_results: int) -> Concentration | None:
        """The most concentrated arc over every arc size and rotor direction with at
        least ``min_results`` results, its p-value multiplied by how many such
        families were judged (Bonferroni again); None when none has enough."""
        judged = [
            (arcs, family)
            for k in self.arcs
            for family, arcs in self.arcs_of(k).items()
            if arcs.results >= min_results and arcs.p_value is not None
        ]
        if not judged:
            return None
        arcs, family = min(judged, key=lambda item: item[0].p_value or 0.0)
        assert arcs.p_value is not None
        p_value = min(1.0, arcs.p_value * len(judged))
        return Concentration(family, arcs.most_hit, arcs.count, arcs.results, p_value)

    def recent_rate(self) -> dict[str, Any]:
        """Games per hour of play over the last ``RECENT_GAMES`` games: gaps over
        ``PAUSE_S`` are pauses, left out; ``rate`` null until there are that many."""
        times = list(self._recent_times)
        gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(times)]
        play = [gap for gap in gaps if 0 <= gap <= PAUSE_S]
        seconds = math.fsum(play)
        rate = None
        if len(times) == RECENT_GAMES and seconds > 0:
            rate = round(len(play) * 3600 / seconds, 3)
        return {"games": len(times), "hours": round(seconds / 3600, 6), "rate": rate}

    def window(self, size: int) -> dict[str, Any]:
        """The tally over the last ``size`` results (fewer while the series is shorter)."""
        if size not in self.windows:
            raise ValueError(f"no window of {size} results: the windows are {list(self.windows)}")
        return self._window_tallies[size].to_json()

    def to_json(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.to_json_text())
        return loaded

    def to_json_text(self, **extra: Any) -> str:
        """``to_json`` as JSON text, as ``json.dumps`` writes it, with ``extra``'s members
        (new names) after the figures': what ``<base>/stats`` publishes.

        Each part is serialised once: an arc no outcome moved keeps its text, and
        nothing is encoded twice to put the whole together.
        """
        dumps = json.dumps
        games = self.results + sum(self.no_spins.values())
        members = [
            ("pockets", dumps(self.layout.pockets)),
            ("games", dumps(games)),
            *self._whole.json_members(),
            (
                "windows",
                _object_text(
                    (str(size), self._window_tallies[size].to_json_text()) for size in self.windows
                ),
            ),
            (
                "no_spins",
                dumps(
                    {
                        "count": sum(self.no_spins.values()),
                        "by_reason": {
                            reason: {"count": count, "rate": round(count / games, 6)}
                            for reason, count in sorted(self.no_spins.items())
                        },
                    }
                ),
            ),
            ("games_per_hour", dumps({**self._games_per_hour(), "recent": self.recent_rate()})),
            (
                "phases",
                dumps({name: summary.to_json() for name, summary in self.phases.items()}),
            ),
            ("pauses", dumps(self.pauses)),
            ("revolutions", dumps(self.revolutions.to_json())),
            ("rotor_rpm", dumps(self.rotor_rpm.to_json())),
            ("ignored", dumps(self.ignored)),
        ]
        clash = extra.keys() & {name for name, _ in members}
        if clash:
            raise ValueError(f"already a member of the figures: {sorted(clash)}")
        return _object_text([*members, *((name, dumps(value)) for name, value in extra.items())])

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to go on exactly from here, in plain JSON values
        (``json.loads(json.dumps(...))`` gives it back equal): ``restore`` takes it up.

        Its size is bounded by the wheel's size and the largest window, never by the
        number of games: counts per pocket, distance histograms and lag-1 sums of the
        whole series; the last ``max(windows)`` results with their rotor direction
        (the windows are recounted from them); the last ``RECENT_GAMES`` outcome
        times; at most ``_OPEN_GAMES`` open games; no-spins by reason (a handful);
        and each ``Summary``'s histogram, an entry per step of its resolution seen
        (0.1 s, 0.1 rpm, a revolution), bounded by how far the values spread, not by
        how many there are. About 27 kB of JSON on a 37-pocket wheel with the default
        windows, half of it the last 1000 results.
        """
        return {
            "version": SNAPSHOT_VERSION,
            "pockets": self.layout.pockets,
            "windows": list(self.windows),
            "arcs": list(self.arcs),
            "whole": self._whole.snapshot(),
            # Oldest first; a direction other than cw or ccw counts as unknown, as null.
            "recent": [
                [result.number, result.rotor_direction]
                if result.rotor_direction in _DIRECTIONS
                else [result.number, None]
                for result in self._recent
            ],
            "no_spins": dict(sorted(self.no_spins.items())),
            "ignored": self.ignored,
            "timed_games": self._timed_games,
            "first_ts": None if self._first_ts is None else self._first_ts.isoformat(),
            "last_ts": None if self._last_ts is None else self._last_ts.isoformat(),
            # The last is the last outcome's time, which the next launch waits from.
            "recent_times": [at.isoformat() for at in self._recent_times],
            "open_games": [
                [game, {kind: at.isoformat() for kind, at in sorted(marks.items())}]
                for game, marks in sorted(self._marks.items())
            ],
            "phases": {name: summary.snapshot() for name, summary in self.phases.items()},
            "pauses": self.pauses,
            "revolutions": self.revolutions.snapshot(),
            "rotor_rpm": self.rotor_rpm.snapshot(),
        }

    @classmethod
    def restore(
        cls,
        snapshot: Any,
        *,
        pockets: int | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> Statistics:
        """The statistics ``snapshot`` was taken of, exactly: the same figures now,
        and, fed the same events, the same figures and the same next snapshot.

        ``pockets`` (None: the snapshot's), ``windows`` and ``arcs`` are the ones
        wanted; a snapshot of others, of another version, malformed, or whose
        parts no one series gives, is refused with a ValueError of one line (and
        never another exception, whatever ``snapshot`` holds): count the series
        again then.
        """
        if order:
            # Snapshots keep counts in the standard order: a custom one is counted again.
            raise ValueError("statistics snapshot: a custom pocket order is counted again")
        try:
            return cls._restore(snapshot, pockets, windows, arcs)
        except _Malformed:
            raise
        except Exception as exc:  # a check missed: still a refusal, never a crash at start
            raise ValueError(f"statistics snapshot: unreadable ({type(exc).__name__})") from exc

    @classmethod
    def _restore(
        cls, snapshot: Any, pockets: int | None, windows: Sequence[int], arcs: Sequence[int]
    ) -> Statistics:
        if type(snapshot) is not dict:
            raise _malformed("the snapshot", f"an object expected, not {_kind(snapshot)}")
        version = snapshot.get("version")
        if version != SNAPSHOT_VERSION or type(version) is not int:
            readable = type(version) is int and abs(version) < 10**6
            shown = f"version {version}" if readable else "no version it knows"
            raise _Malformed(
                f"statistics snapshot: {shown}, this wheeld reads version {SNAPSHOT_VERSION}"
            )
        data = _fields(snapshot, "the snapshot", _SNAPSHOT_MEMBERS)
        kept = data["pockets"]
        if kept not in (37, 38, 39, 40) or type(kept) is not int:
            raise _malformed("pockets", "37 to 40 expected")
        kept_windows = _ascending(data["windows"], "windows", None)
        kept_arcs = _ascending(data["arcs"], "arcs", kept - 1)
        for name, had, wanted in (
            ("pockets", kept, kept if pockets is None else pockets),
            ("windows", kept_windows, tuple(sorted(set(windows)))),
            ("arcs", kept_arcs, tuple(sorted(set(arcs)))),
        ):
            if had != wanted:
                raise _Malformed(
                    f"statistics snapshot: taken with {name} {_listed(had)}, not {_listed(wanted)}"
                )
        statistics = cls(kept, kept_windows, kept_arcs)
        statistics._load_series(data)
        statistics._load_times(data)
        phases = _fields(data["phases"], "phases", PHASES)
        for name, summary in statistics.phases.items():
            summary.load(phases[name], f"phases.{name}")
        statistics.revolutions.load(data["revolutions"], "revolutions")
        statistics.rotor_rpm.load(data["rotor_rpm"], "rotor_rpm")
        statistics.pauses = _count(data["pauses"], "pauses")
        return statistics

    def _load_series(self, data: dict[str, Any]) -> None:
        """The whole tally, the recent results (the windows recounted from them),
        no-spins and ignored results."""
        whole = self._whole
        whole.load(data["whole"], "whole")
        held = min(whole.results, max(self.windows, default=0))
        recent = _items(data["recent"], "recent", held)
        seen: Counter[tuple[str, str | None]] = Counter()
        for index, entry in enumerate(recent):
            at = f"recent[{index}]"
            number, direction = _items(entry, at, 2)
            if direction not in (None, *_DIRECTIONS):
                raise _malformed(at, "a rotor direction is cw, ccw or null")
            result = _Result(self.layout.order[_index(number, self.layout, at)], direction)
            seen[result.number, direction] += 1
            self._slide_windows(result)
        if recent and self._recent[-1].number != whole._previous:
            raise _malformed("recent", "not ending with the last result")
        for (number, direction), count in seen.items():
            if direction is None:  # of unknown direction: neither cw nor ccw
                counted = whole.counts[number] - sum(
                    whole.by_direction[key][number] for key in _DIRECTIONS
                )
            else:
                counted = whole.by_direction[direction][number]
            if count > counted:
                raise _malformed("recent", "results the whole series did not count")
        reasons = data["no_spins"]
        if type(reasons) is not dict:
            raise _malformed("no_spins", f"an object expected, not {_kind(reasons)}")
        for reason, count in reasons.items():
            if type(reason) is not str or not _count(count, "no_spins"):
                raise _malformed("no_spins", "a count of at least 1 per reason")
            self.no_spins[reason] = count
        self.ignored = _count(data["ignored"], "ignored")

    def _load_times(self, data: dict[str, Any]) -> None:
        """The times of the outcomes and of the open games."""
        timed = _count(data["timed_games"], "timed_games")
        first = _optional_instant(data["first_ts"], "first_ts")
        last = _optional_instant(data["last_ts"], "last_ts")
        times = [
            _instant(value, f"recent_times[{index}]")
            for index, value in enumerate(
                _items(data["recent_times"], "recent_times", min(timed, RECENT_GAMES))
            )
        ]
        if (first is None or last is None) != (timed == 0) or (
            first is not None and last is not None and not first <= min(times) <= max(times) <= last
        ):
            raise _malformed("timed_games", "times not between the first and the last")
        self._timed_games, self._first_ts, self._last_ts = timed, first, last
        self._recent_times.extend(times)
        self._last_outcome = self._recent_times[-1] if self._recent_times else None
        game = None
        for index, entry in enumerate(_items(data["open_games"], "open_games")):
            at = f"open_games[{index}]"
            if index >= _OPEN_GAMES:
                raise _malformed("open_games", f"more than {_OPEN_GAMES}")
            pair = _items(entry, at, 2)
            if type(pair[0]) is not int or (game is not None and pair[0] <= game):
                raise _malformed(at, "game ids are whole numbers, ascending, each once")
            game = pair[0]
            marks = pair[1]
            if type(marks) is not dict or not marks or not marks.keys() <= {*_MARKS}:
                raise _malformed(at, "a launch or no-more-bets time expected")
            self._marks[game] = {
                kind: _instant(marks[kind], f"{at}.{kind}") for kind in _MARKS if kind in marks
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


# -- snapshots: reading them back, trusting nothing ---------------------------------------------

_DISTANCE_KEYS = (*_DIRECTIONS, "unknown")
_MARKS = ("spinning", "no_more_bets")
_TALLY_MEMBERS = ("results", "counts", "by_direction", "repeats", "distances", "pairs", "previous")
_SUMMARY_MEMBERS = ("count", "sum", "low", "high", "histogram")
_SNAPSHOT_MEMBERS = (
    "version",
    "pockets",
    "windows",
    "arcs",
    "whole",
    "recent",
    "no_spins",
    "ignored",
    "timed_games",
    "first_ts",
    "last_ts",
    "recent_times",
    "open_games",
    "phases",
    "pauses",
    "revolutions",
    "rotor_rpm",
)
#: More than any table plays: a larger count is no count of games.
_MOST = 2**64
_FLOAT_MAX = float.fromhex("0x1.fffffffffffffp+1023")
_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "a whole number",
    float: "a number",
    type(None): "null",
}


class _Malformed(ValueError):
    """A snapshot ``Statistics.restore`` refuses; the message is one line."""


def _malformed(where: str, what: str) -> _Malformed:
    return _Malformed(f"statistics snapshot: {where}: {what}")


def _kind(value: Any) -> str:
    """What a value is, for a message: never the value itself, which may be huge."""
    return _KINDS.get(type(value), type(value).__name__)


def _fields(value: Any, where: str, names: Sequence[str]) -> dict[str, Any]:
    """``value``, an object with exactly the members ``names``."""
    if type(value) is not dict:
        raise _malformed(where, f"an object expected, not {_kind(value)}")
    for name in names:
        if name not in value:
            raise _malformed(where, f"no {name!r}")
    if len(value) != len(names):
        raise _malformed(where, "a member it should not have")
    return value


def _items(value: Any, where: str, length: int | None = None) -> list[Any]:
    """``value``, a list (of ``length`` items, if given)."""
    if type(value) is not list:
        raise _malformed(where, f"a list expected, not {_kind(value)}")
    if length is not None and len(value) != length:
        raise _malformed(where, f"{length} items expected, not {len(value)}")
    return value


def _count(value: Any, where: str) -> int:
    if type(value) is not int or not 0 <= value <= _MOST:
        what = "a number out of range" if type(value) is int else _kind(value)
        raise _malformed(where, f"a count expected, not {what}")
    return value


def _counts(value: Any, where: str, length: int) -> list[int]:
    items = _items(value, where, length)
    return [_count(item, f"{where}[{index}]") for index, item in enumerate(items)]


def _value(value: Any, where: str) -> float:
    """A finite number, whole or not: a summary's min and max keep the type they had."""
    if type(value) not in (int, float) or not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        raise _malformed(where, f"a finite number expected, not {_kind(value)}")
    kept: float = value
    return kept


def _instant(value: Any, where: str) -> datetime:
    at = _time(value) if type(value) is str else None
    if at is None:
        raise _malformed(where, "an ISO 8601 time with its zone expected")
    return at


def _optional_instant(value: Any, where: str) -> datetime | None:
    return None if value is None else _instant(value, where)


def _index(value: Any, layout: WheelLayout, where: str) -> int:
    """Where the pocket ``value`` stands in the wheel order."""
    if type(value) is not str or not layout.has_pocket(value):
        raise _malformed(where, f"not a pocket of a {layout.pockets}-pocket wheel")
    return layout.order.index(value)


def _ascending(value: Any, where: str, most: int | None) -> tuple[int, ...]:
    """Whole numbers from 1 (to ``most``), ascending, each once: windows or arcs."""
    items = _items(value, where)
    if (
        any(type(item) is not int for item in items)
        or any(later <= earlier for earlier, later in pairwise(items))
        or (items and (items[0] < 1 or (most is not None and items[-1] > most)))
    ):
        bound = f" to {most}" if most is not None else ""
        raise _malformed(where, f"whole numbers from 1{bound} expected, ascending, each once")
    return tuple(items)


def _listed(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _credit(counter: Counter[Any], key: Any, count: int) -> None:
    """Add ``count`` to ``counter[key]``, leaving no key at zero (as counting one by one)."""
    if count:
        counter[key] += count


def _steps(layout: WheelLayout) -> range:
    """Every distance between two results that a tally keeps, from ``-(pockets // 2)`` on."""
    half = layout.pockets // 2
    return range(-half, half + 1)


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
        parts = [
            f"{key} {value['count']} ({'-' if value['percent'] is None else value['percent']}%)"
            for key, value in tally.items()
        ]
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
    lines += _describe_arcs(data["arcs"])
    lines += _describe_serial(data["serial"])
    lines.append("")
    spins = data["no_spins"]
    lines.append(f"no-spins: {spins['count']}")
    lines += [
        f"  {reason}: {value['count']} ({100 * value['rate']:.2f}% of games)"
        for reason, value in spins["by_reason"].items()
    ]
    rate = data["games_per_hour"]
    if rate["rate"] is not None:
        hours = f"{rate['hours']:.1f}"
        lines.append(f"games per hour: {rate['rate']} ({rate['games']} games in {hours} h)")
    recent = rate["recent"]
    if recent["rate"] is not None:
        lines.append(
            f"games per hour of play, last {recent['games']} games: {recent['rate']} "
            f"(pauses over {PAUSE_S / 60:.0f} min left out)"
        )
    lines.append("")
    lines.append("seconds                 games   mean median    min    max")
    for name, summary in data["phases"].items():
        lines.append(_describe_summary(name.replace("_", " "), summary))
    if data["pauses"]:
        lines.append(f"pauses before a launch (over {PAUSE_S / 60:.0f} min): {data['pauses']}")
    lines.append(_describe_summary("ball revolutions", data["revolutions"]))
    lines.append(_describe_summary("rotor rpm at launch", data["rotor_rpm"]))
    if data["ignored"]:
        lines.append(f"ignored: {data['ignored']} results with a number this wheel does not have")
    return lines


def _describe_summary(label: str, summary: dict[str, Any]) -> str:
    if not summary["count"]:
        return f"{label:<22} {0:6}  (not reported)"
    figures = " ".join(f"{summary[key]:6.1f}" for key in ("mean", "median", "min", "max"))
    return f"{label:<22} {summary['count']:6} {figures}"


def _describe_arcs(arcs: dict[str, dict[str, Any]]) -> list[str]:
    lines = [""]
    for k, families in arcs.items():
        for family, arc in families.items():
            top = arc["most_hit"]
            if not arc["results"]:
                continue
            verdict = (
                "a concentration worth watching"
                if top["p_value"] < 0.01
                else "no significant concentration"
            )
            lines.append(
                f"arcs of {k} ({family}): most hit {'-'.join(top['pockets'])}, {top['count']} "
                f"of {arc['results']} (expected {arc['expected']:.1f}), "
                f"p-value {top['p_value']:.4g}: {verdict}"
            )
    return lines


def _describe_serial(serial: dict[str, Any]) -> list[str]:
    correlation = serial["correlation"]
    if correlation["r"] is None:
        lines = [f"lag-1 correlation of the numbers: not reported: {correlation['reason']}"]
    else:
        lines = [
            f"lag-1 correlation of the numbers: r {correlation['r']:.4f}, "
            f"p-value {correlation['p_value']:.4g} over {serial['pairs']} pairs"
        ]
    return lines + _describe_chi(serial["distance_chi_squared"], "distances between results")


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
