"""The arcs of k pockets of one family of results (every result, or one rotor
direction), moved one result at a time (``docs/statistics.md``).

A result moves the k arcs that hold its pocket and no other, so each arc's count
is kept and moved by one instead of summed again round the wheel every outcome;
the judgement (``Arcs``, whose most-hit arc's p-value is the costly part) and its
JSON are made again only when asked after a move: a family an outcome left alone
(the other rotor direction) keeps its text.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from wheeld.core.judgements import Arcs
from wheeld.core.layout import WheelLayout


class SlidingArcs:
    """One family's counts per arc of ``k`` pockets, and their judgement as last made."""

    def __init__(self, layout: WheelLayout, k: int, per_pocket: Sequence[int]) -> None:
        self.layout = layout
        self.k = k
        judged = Arcs.of_pockets(per_pocket, layout, k)
        #: Each arc's count, by its first pocket in wheel order.
        self._by_arc = list(judged.counts.values())
        self._results = judged.results
        self._holding = _arcs_holding(layout.order, k)
        self._judged: tuple[Arcs, str] | None = (judged, judged.to_json_text())

    def move(self, number: str, by: int) -> None:
        """Count a result in ``number``'s pocket (``by`` 1) or take one back out (-1)."""
        by_arc = self._by_arc
        for first in self._holding[number]:
            by_arc[first] += by
        self._results += by
        self._judged = None

    def judged(self) -> tuple[Arcs, str]:
        """The arcs now, and their JSON: made again only after a move."""
        if self._judged is None:
            arcs = Arcs.of_arc_counts(self._by_arc, self._results, self.layout, self.k)
            self._judged = (arcs, arcs.to_json_text())
        return self._judged


@lru_cache(maxsize=64)
def _arcs_holding(order: tuple[str, ...], k: int) -> dict[str, tuple[int, ...]]:
    """Each pocket's arcs of ``k``: the first pockets of the k arcs it stands in."""
    pockets = len(order)
    return {
        number: tuple((index - step) % pockets for step in range(k))
        for index, number in enumerate(order)
    }
