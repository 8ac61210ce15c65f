"""The judgements over a tally's counts (``docs/statistics.md``): how far they stand
from an even wheel.

``ChiSquared``, the goodness of fit of the counts per number (or of any counts
against equal ones); ``Arcs``, sliding arcs of k pockets in wheel order and the
exact binomial test of the most-hit one, Bonferroni-corrected; ``Concentration``,
the most concentrated arc the sector alert judges.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from operator import sub
from typing import Any

from wheeld.core.distributions import binomial_sf, chi2_sf
from wheeld.core.layout import WheelLayout

#: The smallest expected count per pocket for which the chi-squared test is reported.
MIN_EXPECTED = 5

#: Sliding arcs of k neighbouring pockets reported by default (k = 3, 5, 9).
DEFAULT_ARCS: tuple[int, ...] = (3, 5, 9)


def pocket_counts(counts: Mapping[str, int], layout: WheelLayout) -> list[int]:
    """Counts by number as a list in wheel order."""
    get = counts.get
    return [get(number, 0) for number in layout.order]


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
        return cls.of_pockets(pocket_counts(counts, layout), layout)

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
        return cls.of_pockets(pocket_counts(counts, layout), layout, k)

    @classmethod
    def of_pockets(cls, per_pocket: Sequence[int], layout: WheelLayout, k: int) -> Arcs:
        """The arcs over the counts per pocket in wheel order."""
        pockets = layout.pockets
        # Each arc's count is a difference of running sums round the wheel (and k - 1 on).
        running = [0, *accumulate([*per_pocket, *per_pocket[: k - 1]])]
        by_arc = list(map(sub, running[k : k + pockets], running[:pockets]))
        return cls.of_arc_counts(by_arc, running[pockets], layout, k)

    @classmethod
    def of_arc_counts(
        cls, by_arc: Sequence[int], results: int, layout: WheelLayout, k: int
    ) -> Arcs:
        """The arcs from each arc's count (by its first pocket, in wheel order) and the
        results they are of: what a family's ``SlidingArcs`` keeps."""
        order = layout.order
        pockets = layout.pockets
        arc_counts = dict(zip(order, by_arc, strict=True))
        first, top, p_value = most_hit_arc(by_arc, results, k)
        if p_value is None:
            return cls(k, 0, 0.0, arc_counts, (), 0, None)
        arc = tuple(order[(first + step) % pockets] for step in range(k))
        return cls(k, results, results * k / pockets, arc_counts, arc, top, p_value)

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
        """``to_json`` as ``json.dumps`` writes it, through a template: every outcome
        writes a score of these, and ``json.dumps`` of each part cost more than the rest."""
        order = tuple(self.counts)
        first = order.index(self.most_hit[0]) if self.most_hit else 0
        return arcs_text(
            order, self.k, list(self.counts.values()), self.results, first, self.p_value
        )


def most_hit_arc(by_arc: Sequence[int], results: int, k: int) -> tuple[int, int, float | None]:
    """The most-hit arc of ``k`` pockets: its first pocket's index (the first in wheel
    order among equals), its count, and its p-value (None before a result)."""
    if not results:
        return 0, 0, None
    pockets = len(by_arc)
    top = max(by_arc)
    return by_arc.index(top), top, min(1.0, pockets * binomial_sf(top, results, k / pockets))


def arcs_text(
    order: tuple[str, ...],
    k: int,
    by_arc: Sequence[int],
    results: int,
    first: int,
    p_value: float | None,
) -> str:
    """``Arcs.to_json`` as ``json.dumps`` writes it, from each arc's count (``first``
    and ``p_value`` those of ``most_hit_arc``), through a template: every outcome writes a
    score of these, and ``json.dumps`` of each part cost more than all the rest."""
    template, pockets = _arcs_shape(order, k)
    return template % (
        results,
        number_text(round(results * k / len(order), 6)),
        *by_arc,
        pockets[first] if p_value is not None else "[]",
        by_arc[first] if p_value is not None else 0,
        number_text(p_value),
    )


def number_text(value: float | None) -> str:
    """A figure as ``json.dumps`` writes it (a finite float is its ``repr``)."""
    if value is None:
        return "null"
    return repr(value) if math.isfinite(value) else json.dumps(value)


@lru_cache(maxsize=64)
def _arcs_shape(order: tuple[str, ...], k: int) -> tuple[str, tuple[str, ...]]:
    """The JSON of a wheel's arcs of ``k`` with a slot for each figure, and the JSON of
    each arc's pockets by its first: the most-hit one's, written in whole."""
    template = (
        '{"results": %d, "expected": %s, "counts": '
        + counts_template(order)
        + ', "most_hit": {"pockets": %s, "count": %d, "p_value": %s}}'
    )
    pockets = len(order)
    arcs = tuple(
        json.dumps([order[(first + step) % pockets] for step in range(k)])
        for first in range(pockets)
    )
    return template, arcs


@lru_cache(maxsize=64)
def counts_template(names: tuple[str, ...]) -> str:
    """The JSON object of ``names`` with a ``%d`` for each count: a wheel's few orders."""
    return object_template((name, "%d") for name in names)


def object_template(members: Iterable[tuple[str, str]]) -> str:
    """An object's JSON as ``json.dumps`` writes it, each member's value a %-format slot
    (or a template itself): a fixed shape written again and again with new figures."""
    return "{" + ", ".join(f"{json.dumps(name)}: {slot}" for name, slot in members) + "}"


@dataclass(frozen=True, slots=True)
class Concentration:
    """The most concentrated arc of the series: what the sector alert judges."""

    family: str
    pockets: tuple[str, ...]
    count: int
    results: int
    p_value: float
