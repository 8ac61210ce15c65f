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

from wheeld.core.judgements import Arcs, arcs_text, most_hit_arc
from wheeld.core.layout import WheelLayout


class SlidingArcs:
    """One family's counts per arc of ``k`` pockets, their judgement and its JSON."""

    def __init__(self, layout: WheelLayout, k: int, per_pocket: Sequence[int]) -> None:
        self.layout = layout
        self.k = k
        judged = Arcs.of_pockets(per_pocket, layout, k)
        #: Each arc's count, by its first pocket in wheel order.
        self._by_arc = list(judged.counts.values())
        self._results = judged.results
        self._holding = _arcs_holding(layout.order, k)
        self._text: str | None = None
        self._arcs: Arcs | None = judged

    def move(self, number: str, by: int) -> None:
        """Count a result in ``number``'s pocket (``by`` 1) or take one back out (-1)."""
        by_arc = self._by_arc
        for first in self._holding[number]:
            by_arc[first] += by
        self._results += by
        self._text = self._arcs = None

    def arcs(self) -> Arcs:
        """The arcs now (what the sector alert judges, after each result): made again
        only after a move."""
        if self._arcs is None:
            self._arcs = Arcs.of_arc_counts(self._by_arc, self._results, self.layout, self.k)
        return self._arcs

    def text(self) -> str:
        """The arcs' JSON now: written again only after a move."""
        if self._text is None:
            first, _, p_value = most_hit_arc(self._by_arc, self._results, self.k)
            self._text = arcs_text(
                self.layout.order, self.k, self._by_arc, self._results, first, p_value
            )
        return self._text


@lru_cache(maxsize=64)
def _arcs_holding(order: tuple[str, ...], k: int) -> dict[str, tuple[int, ...]]:
    """Each pocket's arcs of ``k``: the first pockets of the k arcs it stands in."""
    pockets = len(order)
    return {
        number: tuple((index - step) % pockets for step in range(k))
        for index, number in enumerate(order)
    }
