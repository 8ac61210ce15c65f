"""The running figures over a run of results (``docs/statistics.md``): the whole
series, or one rolling window.

A ``Tally`` counts each result as it comes (numbers, by rotor direction, the even
chances, the sectors, repeats, the distance from the previous result, the lag-1
sums) and takes a window's oldest back out in constant time; its judgements
(chi-squared, arcs, the distances' test) are computed again only when the
counts they are of moved, and its JSON is put together from parts serialised once.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from wheeld.core.distributions import pearson_p_value
from wheeld.core.judgements import (
    DEFAULT_ARCS,
    Arcs,
    ChiSquared,
    counts_template,
    number_text,
    object_template,
    pocket_counts,
)
from wheeld.core.layout import SECTORS, WheelLayout
from wheeld.core.sliding_arcs import SlidingArcs

DIRECTIONS = ("cw", "ccw")

#: Every outcome of each even chance and group, always listed (zero wins none of them).
_CHANCES: dict[str, tuple[str, ...]] = {
    "color": ("red", "black", "green"),
    "parity": ("odd", "even", "zero"),
    "half": ("low", "high", "zero"),
    "dozen": ("1", "2", "3", "zero"),
    "column": ("1", "2", "3", "zero"),
}


@dataclass(frozen=True, slots=True)
class CountedResult:
    number: str
    rotor_direction: str | None


def _percent(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 2) if whole else None


# The small members every outcome moves are written through templates of their
# fixed shape, as ``json.dumps`` writes them: it cost more than all the rest.
_CHANCES_TEMPLATE = object_template(
    (name, object_template((key, '{"count": %d, "percent": %s}') for key in keys))
    for name, keys in _CHANCES.items()
)
_SECTOR_KEYS = ("all", *DIRECTIONS, "unknown")
_SECTORS_TEMPLATE = object_template(
    (name, object_template((key, "%d") for key in _SECTOR_KEYS)) for name in SECTORS
)
_REPEATS_TEMPLATE = '{"count": %d, "pairs": %d, "expected_rate": %s}'


def _chances_text(chances: dict[str, Counter[str]], results: int) -> str:
    """The even chances' counts and percents (of ``results``), as ``json.dumps`` writes them."""
    figures: list[int | str] = []
    for name, keys in _CHANCES.items():
        tally = chances[name]
        for key in keys:
            count = tally[key]
            figures += (count, number_text(_percent(count, results)))
    return _CHANCES_TEMPLATE % tuple(figures)


def _sectors_text(sectors: dict[str, Counter[str]]) -> str:
    """Each sector's counts by rotor direction, as ``json.dumps`` writes them."""
    return _SECTORS_TEMPLATE % tuple(
        [sectors[name].get(key, 0) for name in SECTORS for key in _SECTOR_KEYS]
    )


def object_text(members: Iterable[tuple[str, str]]) -> str:
    """An object's JSON from its members' names and their values' JSON, as ``json.dumps``
    writes it: parts serialised once and kept are put together without encoding again."""
    return "{" + ", ".join([_name_text(name) + ": " + text for name, text in members]) + "}"


@lru_cache(maxsize=256)
def _name_text(name: str) -> str:
    """A member's name as JSON: the same few score names, every outcome."""
    return json.dumps(name)


#: The families of arcs, in the order published: every result, then by rotor direction.
FAMILIES = ("all", "cw", "ccw")


class Tally:
    """Everything counted over a run of results: the whole series, or one window."""

    def __init__(self, layout: WheelLayout, arcs: Sequence[int] = DEFAULT_ARCS) -> None:
        self.layout = layout
        self.arcs = tuple(arcs)
        self.results = 0
        self.counts: Counter[str] = Counter()
        #: Counts per number by the game's rotor direction, for the arcs.
        self.by_direction: dict[str, Counter[str]] = {key: Counter() for key in DIRECTIONS}
        #: Lag-1 sums over consecutive numbers (x the one before, y the next), exact integers.
        self._pairs = PairSums()
        self.chances: dict[str, Counter[str]] = {
            name: Counter() for name in ("color", "parity", "half", "dozen", "column")
        }
        self.sectors: dict[str, Counter[str]] = {name: Counter() for name in SECTORS}
        self.repeats = 0
        self.distances: dict[str, Counter[int]] = {}
        self._previous: str | None = None
        #: Each family's arcs of each size, moved by each result: made from the counts
        #: when first wanted (or again after a snapshot is loaded: ``counts_loaded``).
        self._sliding: dict[str, tuple[SlidingArcs, ...]] | None = None
        #: The chi-squared test as last computed, by the counts per pocket it was of.
        self._chi: tuple[list[int], ChiSquared] | None = None
        #: Each direction's distance histogram as JSON, and the directions a pair moved
        #: since: an outcome moves one (two in a window), the others keep their text.
        self._distance_texts: dict[str, str] = {}
        self._distances_moved: set[str] = set()
        #: Results counted or taken out so far: what the serial member was written at.
        self._moves = 0
        #: The serial member as last written, by ``_moves`` then: the correlation's
        #: p-value and the distances' test are made once per move, however often asked.
        self._serial: tuple[int, str] | None = None

    def add(self, result: CountedResult) -> None:
        facts = self.layout.facts(result.number)
        direction = result.rotor_direction if result.rotor_direction in DIRECTIONS else None
        self._move_arcs(result.number, direction, 1)  # before the counts they are made from
        self._moves += 1
        self.results += 1
        self.counts[result.number] += 1
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
            self._distances_moved.add(direction or "unknown")
            self._pairs.add(number_label(self._previous), number_label(result.number))
        self._previous = result.number

    def remove_oldest(self, oldest: CountedResult, following: CountedResult | None) -> None:
        """Take the window's oldest result back out, and its pair with the one after it.

        What ``add`` counted for ``oldest`` is undone exactly (keys that fall to
        zero go, as a tally rebuilt from the window would not have them), so a
        window slides in constant time instead of being recounted per game.
        """
        facts = self.layout.facts(oldest.number)
        direction = oldest.rotor_direction if oldest.rotor_direction in DIRECTIONS else None
        self._move_arcs(oldest.number, direction, -1)  # before the counts they are made from
        self._moves += 1
        self.results -= 1
        _decrement(self.counts, oldest.number)
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
        later = following.rotor_direction if following.rotor_direction in DIRECTIONS else None
        if oldest.number == following.number:
            self.repeats -= 1
        key = later or "unknown"
        _decrement(self.distances[key], self._distance(oldest.number, following.number, later))
        if not self.distances[key]:
            del self.distances[key]
        self._distances_moved.add(key)
        self._pairs.remove(number_label(oldest.number), number_label(following.number))

    def _move_arcs(self, number: str, direction: str | None, by: int) -> None:
        """A result counted (``by`` 1) or taken back out (-1) in its families' arcs:
        every result's, and its rotor direction's when known."""
        sliding = self._sliding_arcs()
        for arcs in sliding["all"]:
            arcs.move(number, by)
        if direction is not None:
            for arcs in sliding[direction]:
                arcs.move(number, by)

    def _sliding_arcs(self) -> dict[str, tuple[SlidingArcs, ...]]:
        if self._sliding is None:
            self._sliding = {
                family: tuple(
                    SlidingArcs(self.layout, k, self.family_counts(family)) for k in self.arcs
                )
                for family in FAMILIES
            }
        return self._sliding

    def counts_loaded(self) -> None:
        """The counts were set from a snapshot, not counted: what is kept beside them
        (the arcs) is made from them again when next wanted."""
        self._sliding = None
        self._chi = None
        self._serial = None
        self._distance_texts.clear()
        self._distances_moved.update(self.distances)

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
        return object_text(self.json_members())

    def json_members(self) -> list[tuple[str, str]]:
        """The members of ``to_json``, each name with its value's JSON text, in order."""
        layout = self.layout
        numbers = _in_number_order(layout.order)
        counts = self.counts
        dumps = json.dumps
        return [
            ("results", dumps(self.results)),
            ("counts", counts_template(numbers) % tuple([counts[n] for n in numbers])),
            ("chi_squared", dumps(self.chi_squared().to_json())),
            ("chances", _chances_text(self.chances, self.results)),
            (
                "sectors",
                # The called bets are single-zero bets.
                _sectors_text(self.sectors) if layout.pockets == 37 else "null",
            ),
            (
                "repeats",
                _REPEATS_TEMPLATE
                % (
                    self.repeats,
                    max(0, self.results - 1),
                    number_text(round(1 / layout.pockets, 6)),
                ),
            ),
            ("distance", self._distance_text()),
            ("arcs", self._arcs_text()),
            ("serial", self._serial_text()),
        ]

    def _distance_text(self) -> str:
        """The distances' histograms, each direction's written again only when moved."""
        texts = self._distance_texts
        for key in self._distances_moved:
            histogram = self.distances.get(key)
            if histogram is None:
                texts.pop(key, None)
            else:
                steps = sorted(histogram)
                texts[key] = counts_template(tuple(map(str, steps))) % tuple(
                    map(histogram.__getitem__, steps)
                )
        self._distances_moved.clear()
        return object_text((key, texts[key]) for key in sorted(texts))

    def _serial_text(self) -> str:
        """Lag-1 correlation and the distances' test: both move with every pair, and
        both cost a p-value, so they are made once per move of the pair sums."""
        if self._serial is None or self._serial[0] != self._moves:
            serial = {
                "pairs": self._pairs.n,
                "correlation": self._pairs.correlation(),
                "distance_chi_squared": self.distance_test().to_json(),
            }
            self._serial = (self._moves, json.dumps(serial))
        return self._serial[1]

    def family_counts(self, family: str) -> list[int]:
        """A family's counts per pocket in wheel order: every result (``all``), cw or ccw."""
        return pocket_counts(
            self.counts if family == "all" else self.by_direction[family], self.layout
        )

    def _arcs_text(self) -> str:
        """Every family's arcs of each size: a family's written again only when moved."""
        sliding = self._sliding_arcs()
        return object_text(
            (str(k), object_text((name, sliding[name][index].text()) for name in FAMILIES))
            for index, k in enumerate(self.arcs)
        )

    def family_arcs(self, family: str, k: int) -> Arcs:
        """A family's arcs of ``k`` pockets (one of this tally's sizes) now."""
        return self._sliding_arcs()[family][self.arcs.index(k)].arcs()

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
        return {name: self.family_arcs(name, k).to_json() for name in FAMILIES}

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


def _decrement(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


#: The extra zeros as integers for the correlation: the labels after 36.
_ZERO_LABELS = {"00": 37, "000": 38, "0000": 39}


def number_label(number: str) -> int:
    """A number as an integer for the correlation: 00 is 37, the label after 36 (000 38,
    0000 39)."""
    return _ZERO_LABELS.get(number) or int(number)


class PairSums:
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


def _number_key(number: str) -> tuple[int, int]:
    return (-len(number), 0) if number in ("00", "000", "0000") else (0, int(number))


@lru_cache(maxsize=8)
def _in_number_order(order: tuple[str, ...]) -> tuple[str, ...]:
    """A wheel's numbers as the counts are published: the extra zeros first, then 0 to 36."""
    return tuple(sorted(order, key=_number_key))


# -- phases, revolutions, speeds -----------------------------------------------------------------
