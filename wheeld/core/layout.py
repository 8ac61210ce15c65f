"""Wheel layouts and what a winning number announces (``docs/rules.md``).

The croupier announces the colour and the winning even chances and groups with
the number; these are the same facts, computed once per layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

Color = Literal["red", "black", "green"]
Sector = Literal["voisins", "tiers", "orphelins", "jeu_zero"]

RED = frozenset({1, 3, 5, 7, 9, 12, 14, 16, 18, 19, 21, 23, 25, 27, 30, 32, 34, 36})

SINGLE_ZERO_ORDER: tuple[str, ...] = tuple(
    "0 32 15 19 4 21 2 25 17 34 6 27 13 36 11 30 8 23 10 5 "
    "24 16 33 1 20 14 31 9 22 18 29 7 28 12 35 3 26".split()
)
DOUBLE_ZERO_ORDER: tuple[str, ...] = tuple(
    "0 28 9 26 30 11 7 20 32 17 5 22 34 15 3 24 36 13 1 00 "
    "27 10 25 29 12 8 19 31 18 6 21 33 16 4 23 35 14 2".split()
)

#: Firmware 2.52 of the Cammegh SS2: 40 pockets are the double-zero order with 000 one
#: pocket clockwise of 0 and 0000 one clockwise of 00 (the orders above read
#: clockwise); 39 is taken to be the same without 0000 (the maker's "M15" order is not
#: published: an assumption the Cammegh driver's README states).
QUADRUPLE_ZERO_ORDER: tuple[str, ...] = tuple(
    z
    for number in DOUBLE_ZERO_ORDER
    for z in (
        (number, "000") if number == "0" else (number, "0000") if number == "00" else (number,)
    )
)
TRIPLE_ZERO_ORDER: tuple[str, ...] = tuple(n for n in QUADRUPLE_ZERO_ORDER if n != "0000")
#: The zeros: green, and none of the even chances or groups.
ZEROS = frozenset({"0", "00", "000", "0000"})

# The single-zero "called bets": racetrack sectors (regulations 000 and 004, docs/rules.md).
SECTORS: dict[Sector, frozenset[str]] = {
    "voisins": frozenset("22 18 29 7 28 12 35 3 26 0 32 15 19 4 21 2 25".split()),
    "tiers": frozenset("27 13 36 11 30 8 23 10 5 24 16 33".split()),
    "orphelins": frozenset("1 20 14 31 9 17 34 6".split()),
    "jeu_zero": frozenset("12 35 3 26 0 32 15".split()),
}


@dataclass(frozen=True, slots=True)
class NumberFacts:
    """The colour, even chances and groups that win with ``number``."""

    number: str
    color: Color
    parity: Literal["even", "odd"] | None
    half: Literal["low", "high"] | None
    dozen: int | None
    column: int | None
    sectors: tuple[Sector, ...]


@dataclass(frozen=True, slots=True)
class WheelLayout:
    """One wheel: its pockets in the order they stand on the rotor."""

    pockets: int
    order: tuple[str, ...]

    def has_pocket(self, pocket: str) -> bool:
        """True when this wheel has a pocket named ``pocket`` (``"00"`` only from 38 on)."""
        return pocket in self._pocket_set()

    def _pocket_set(self) -> frozenset[str]:
        return _pocket_set(self.order)

    def facts(self, number: str) -> NumberFacts:
        """What the croupier announces with ``number``; ``number`` must be a pocket."""
        if not self.has_pocket(number):
            raise ValueError(f"{number!r} is not a pocket of a {self.pockets}-pocket wheel")
        return _facts(number, self.order if self.pockets == 37 else None)


@cache
def _pocket_set(order: tuple[str, ...]) -> frozenset[str]:
    return frozenset(order)


@cache
def sectors_of(order: tuple[str, ...]) -> dict[Sector, frozenset[str]]:
    """A single-zero wheel's racetrack sectors: the pockets that stand where the standard
    wheel's sector pockets stand, counted from 0 (a custom order, ``wheel.pocket_order``,
    moves them with its pockets)."""
    if order == SINGLE_ZERO_ORDER:
        return SECTORS
    zero = order.index("0")
    from_zero = order[zero:] + order[:zero]
    return {
        name: frozenset(from_zero[SINGLE_ZERO_ORDER.index(n)] for n in members)
        for name, members in SECTORS.items()
    }


@cache
def _facts(number: str, single_zero_order: tuple[str, ...] | None) -> NumberFacts:
    sectors: tuple[Sector, ...] = ()
    if single_zero_order is not None:
        found = sectors_of(single_zero_order)
        sectors = tuple(name for name, members in found.items() if number in members)
    if number in ZEROS:
        return NumberFacts(number, "green", None, None, None, None, sectors)
    value = int(number)
    return NumberFacts(
        number=number,
        color="red" if value in RED else "black",
        parity="even" if value % 2 == 0 else "odd",
        half="low" if value <= 18 else "high",
        dozen=(value - 1) // 12 + 1,
        column=(value - 1) % 3 + 1,
        sectors=sectors,
    )


SINGLE_ZERO = WheelLayout(37, SINGLE_ZERO_ORDER)
DOUBLE_ZERO = WheelLayout(38, DOUBLE_ZERO_ORDER)
TRIPLE_ZERO = WheelLayout(39, TRIPLE_ZERO_ORDER)
QUADRUPLE_ZERO = WheelLayout(40, QUADRUPLE_ZERO_ORDER)
LAYOUTS = {
    layout.pockets: layout for layout in (SINGLE_ZERO, DOUBLE_ZERO, TRIPLE_ZERO, QUADRUPLE_ZERO)
}


def layout_for(pockets: int, order: Sequence[str] | None = None) -> WheelLayout:
    """The layout of a 37-, 38-, 39- or 40-pocket wheel: the maker's standard order, or
    ``order`` (clockwise, from any pocket: a custom order, ``wheel.pocket_order``)."""
    if order is not None:
        layout = custom_layout(order)
        if layout.pockets != pockets:
            raise ValueError(f"the pocket order has {layout.pockets} pockets, not {pockets}")
        return layout
    if pockets in LAYOUTS:
        return LAYOUTS[pockets]
    raise ValueError(f"a wheel has 37 to 40 pockets, not {pockets}")


def pocket_order_problem(order: Sequence[str]) -> str | None:
    """Why ``order`` is no wheel's pockets (each of a 37- to 40-pocket wheel's once), or None."""
    pockets = len(order)
    if pockets not in LAYOUTS:
        return f"a wheel has 37 to 40 pockets, not {pockets}"
    wanted = set(LAYOUTS[pockets].order)
    repeated = sorted({p for p in order if list(order).count(p) > 1})
    if repeated:
        return f"pockets named twice: {', '.join(repeated)}"
    strange = [p for p in order if p not in wanted]
    if strange:
        return f"not pockets of a {pockets}-pocket wheel: {', '.join(strange)}"
    return None


def custom_layout(order: Sequence[str]) -> WheelLayout:
    """The layout of a wheel whose pockets stand in ``order`` (clockwise)."""
    problem = pocket_order_problem(order)
    if problem is not None:
        raise ValueError(f"pocket order: {problem}")
    return WheelLayout(len(order), tuple(order))
