"""Wheel layouts and the facts a winning number announces."""

from __future__ import annotations

from itertools import pairwise

import pytest

from wheeld.core.layout import DOUBLE_ZERO, RED, SECTORS, SINGLE_ZERO, layout_for


def test_each_wheel_has_each_pocket_once() -> None:
    assert sorted(SINGLE_ZERO.order, key=int) == [str(n) for n in range(37)]
    assert sorted(DOUBLE_ZERO.order) == sorted(["00", *(str(n) for n in range(37))])
    assert len(DOUBLE_ZERO.order) == 38


def test_wheel_order_starts_at_zero_as_on_the_rotor() -> None:
    assert SINGLE_ZERO.order[:4] == ("0", "32", "15", "19")
    assert DOUBLE_ZERO.order[18:21] == ("1", "00", "27")


def test_red_and_black_split_evenly_and_alternate_round_the_single_zero_wheel() -> None:
    assert len(RED) == 18
    colours = [SINGLE_ZERO.facts(n).color for n in SINGLE_ZERO.order[1:]]
    assert all(a != b for a, b in pairwise(colours))


@pytest.mark.parametrize(
    ("number", "color", "parity", "half", "dozen", "column"),
    [
        ("0", "green", None, None, None, None),
        ("00", "green", None, None, None, None),
        ("1", "red", "odd", "low", 1, 1),
        ("2", "black", "even", "low", 1, 2),
        ("12", "red", "even", "low", 1, 3),
        ("13", "black", "odd", "low", 2, 1),
        ("18", "red", "even", "low", 2, 3),
        ("19", "red", "odd", "high", 2, 1),
        ("25", "red", "odd", "high", 3, 1),
        ("34", "red", "even", "high", 3, 1),
        ("35", "black", "odd", "high", 3, 2),
        ("36", "red", "even", "high", 3, 3),
    ],
)
def test_number_facts(
    number: str,
    color: str,
    parity: str | None,
    half: str | None,
    dozen: int | None,
    column: int | None,
) -> None:
    facts = DOUBLE_ZERO.facts(number)
    assert (facts.color, facts.parity, facts.half, facts.dozen, facts.column) == (
        color,
        parity,
        half,
        dozen,
        column,
    )


def test_the_single_zero_sectors_cover_the_wheel_once_besides_jeu_zero() -> None:
    main = SECTORS["voisins"] | SECTORS["tiers"] | SECTORS["orphelins"]
    assert sorted(main, key=int) == [str(n) for n in range(37)]
    assert sum(len(SECTORS[s]) for s in ("voisins", "tiers", "orphelins")) == 37
    assert SECTORS["jeu_zero"] <= SECTORS["voisins"]


def test_sectors_are_announced_on_single_zero_wheels_only() -> None:
    assert SINGLE_ZERO.facts("0").sectors == ("voisins", "jeu_zero")
    assert SINGLE_ZERO.facts("17").sectors == ("orphelins",)
    assert SINGLE_ZERO.facts("27").sectors == ("tiers",)
    assert DOUBLE_ZERO.facts("0").sectors == ()


def test_a_number_not_on_the_wheel_has_no_facts() -> None:
    with pytest.raises(ValueError, match="not a pocket"):
        SINGLE_ZERO.facts("00")
    assert not SINGLE_ZERO.has_pocket("37")
    with pytest.raises(ValueError):
        layout_for(36)


def test_the_extra_zeros_of_39_and_40_pocket_wheels() -> None:
    """SS2 firmware 2.52: 000 one pocket clockwise of 0, and on 40 pockets 0000 of 00."""
    from wheeld.core.layout import DOUBLE_ZERO_ORDER, layout_for

    triple, quadruple = layout_for(39), layout_for(40)
    assert quadruple.order[:3] == ("0", "000", "28")
    at = quadruple.order.index("00")
    assert quadruple.order[at : at + 3] == ("00", "0000", "27")
    assert [n for n in quadruple.order if n not in ("000", "0000")] == list(DOUBLE_ZERO_ORDER)
    assert triple.order == tuple(n for n in quadruple.order if n != "0000")
    for zero in ("000", "0000"):
        facts = quadruple.facts(zero)
        assert (facts.color, facts.parity, facts.dozen, facts.sectors) == ("green", None, None, ())
    assert not triple.has_pocket("0000") and not layout_for(38).has_pocket("000")


def test_statistics_of_a_40_pocket_wheel() -> None:
    import json

    from wheeld.core.stats import Statistics

    stats = Statistics(40)
    for number in ("0000", "000", "17", "00", "0", "0000"):
        stats.add({"event": "result", "game_id": 1, "number": number, "rotor_direction": "cw"})
    figures = json.loads(json.dumps(stats.to_json()))
    assert figures["pockets"] == 40 and figures["games"] == 6
    assert figures["chi_squared"]["df"] == 39
    restored = Statistics.restore(stats.snapshot())
    assert restored.to_json() == stats.to_json()


def test_the_marquee_counts_the_extra_zeros_as_zeros() -> None:
    from wheeld.followers.marquee.board import statistics

    figures = statistics(["000", "0000", "1", "2"], min_games=100)
    assert (figures["green"], figures["red"], figures["black"]) == (50, 25, 25)
