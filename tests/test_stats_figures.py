"""The figures beyond the counts: arcs, serial correlation, phases, revolutions and rotor
speed, checked against scipy (an independent implementation) and by hypothesis."""

from __future__ import annotations

import json
import math
import random
import statistics as py_statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special as scipy_special  # tests only, never in wheeld
from scipy import stats as scipy_stats

from wheeld.cli import main
from wheeld.core.layout import DOUBLE_ZERO_ORDER, SINGLE_ZERO_ORDER, layout_for
from wheeld.core.stats import (
    PAUSE_S,
    RECENT_GAMES,
    Arcs,
    Statistics,
    Summary,
    beta_inc,
    binomial_sf,
    describe,
    pearson_p_value,
)


def results(
    numbers: list[str], directions: list[str | None] | None = None, gap_s: int = 60
) -> Iterator[dict[str, Any]]:
    """``<base>/game`` result payloads, ``gap_s`` apart."""
    for index, number in enumerate(numbers):
        direction = directions[index] if directions else ("cw", "ccw")[index % 2]
        yield {
            "event": "result",
            "game_id": index + 1,
            "ts": _ts(index * gap_s),
            "number": number,
            "rotor_direction": direction,
        }


def _ts(seconds: float) -> str:
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    days, rest = divmod(whole, 86400)
    return (
        f"2025-01-{1 + days:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
        f".{millis:03d}Z"
    )


# -- the incomplete beta function and what is built on it ------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "x"),
    [
        (1, 1, 0.3),
        (0.5, 0.5, 0.1),
        (1.5, 1.5, 1e-9),
        (3, 400, 0.001),
        (9, 1000, 9 / 37),
        (300, 700, 9 / 37),
        (5, 5, 0.99),
        (2, 3, 0.999999),
        (1e4, 3e4, 0.2),
        (49.5, 49.5, 0.45),
        (4999, 4999, 0.49),
    ],
)
def test_beta_inc_matches_scipy(a: float, b: float, x: float) -> None:
    assert beta_inc(a, b, x) == pytest.approx(float(scipy_special.betainc(a, b, x)), rel=1e-9)


def test_beta_inc_at_its_ends() -> None:
    assert beta_inc(2, 3, 0.0) == 0.0 and beta_inc(2, 3, 1.0) == 1.0
    assert math.isnan(beta_inc(2, 3, math.nan))
    with pytest.raises(ValueError, match="positive"):
        beta_inc(0, 1, 0.5)


@pytest.mark.parametrize("seed", range(6))
def test_binomial_tail_matches_scipy(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        trials = rng.choice([1, 5, 37, 100, 1000, 20000])
        p = rng.choice([1, 3, 5, 9]) / rng.choice([37, 38])
        count = rng.randint(-1, trials + 1)
        expected = float(scipy_stats.binom.sf(count - 1, trials, p))
        got = binomial_sf(count, trials, p)
        if expected < 1e-290:
            assert got < 1e-280
        else:
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)


# -- sliding arcs ----------------------------------------------------------------------------


def _brute_arcs(numbers: list[str], pockets: int, k: int) -> dict[str, int]:
    order = layout_for(pockets).order
    return {
        start: sum(numbers.count(order[(index + step) % pockets]) for step in range(k))
        for index, start in enumerate(order)
    }


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pockets", [37, 38])
def test_arcs_count_and_most_hit_p_value_match_scipy(seed: int, pockets: int) -> None:
    rng = random.Random(seed)
    order = layout_for(pockets).order
    numbers = [rng.choice(order) for _ in range(rng.choice([10, 200, 1000, 5000]))]
    statistics = Statistics.from_events(results(numbers), pockets, arcs=(1, 3, 5, 9, 18))
    for k in (1, 3, 5, 9, 18):
        arcs = statistics.arcs_of(k)["all"]
        brute = _brute_arcs(numbers, pockets, k)
        assert arcs.counts == brute and arcs.results == len(numbers)
        assert arcs.count == max(brute.values()) and arcs.expected == len(numbers) * k / pockets
        first = arcs.most_hit[0]
        assert brute[first] == arcs.count and list(arcs.most_hit) == [
            order[(order.index(first) + step) % pockets] for step in range(k)
        ]
        # The exact binomial upper tail of the most-hit arc, times the number of arcs.
        tail = float(scipy_stats.binom.sf(arcs.count - 1, len(numbers), k / pockets))
        assert arcs.p_value == pytest.approx(min(1.0, pockets * tail), rel=1e-9)


def test_arcs_split_by_rotor_direction() -> None:
    numbers = ["0", "32", "15", "26", "17"]
    directions: list[str | None] = ["cw", "cw", "ccw", None, "ccw"]
    statistics = Statistics.from_events(results(numbers, directions), 37, arcs=(3,))
    arcs = statistics.arcs_of(3)
    assert [arcs[name].results for name in ("all", "cw", "ccw")] == [5, 2, 2]
    assert arcs["cw"].most_hit == ("0", "32", "15") and arcs["cw"].count == 2
    assert arcs["ccw"].counts == _brute_arcs(["15", "17"], 37, 3)
    data = statistics.to_json()["arcs"]["3"]
    assert set(data) == {"all", "cw", "ccw"}
    assert data["cw"]["most_hit"] == {
        "pockets": ["0", "32", "15"],
        "count": 2,
        "p_value": arcs["cw"].p_value,
    }


@pytest.mark.parametrize("pockets", [37, 38])
def test_a_heavy_sector_is_a_concentration_and_an_even_wheel_is_not(pockets: int) -> None:
    rng = random.Random(3)
    order = layout_for(pockets).order
    # Five neighbouring pockets half as likely again: a tilted wheel.
    weights = [1.5 if 10 <= index < 15 else 1.0 for index in range(pockets)]
    biased = rng.choices(order, weights, k=4000)
    found = Statistics.from_events(results(biased), pockets).sector_concentration(370)
    assert found is not None and found.p_value < 1e-6
    assert set(found.pockets) & set(order[10:15])
    even = list(order) * 20
    rng.shuffle(even)
    found = Statistics.from_events(results(even), pockets).sector_concentration(370)
    assert found is not None and found.p_value == 1.0
    # Too few results in every series: not judged.
    assert Statistics.from_events(results(biased[:300]), pockets).sector_concentration(370) is None


def test_arc_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="an arc is 1 to 36 pockets"):
        Statistics(37, arcs=[37])
    with pytest.raises(ValueError, match="an arc is 1 to 36 pockets"):
        Statistics(37, arcs=[0])
    assert Statistics(38, arcs=[37]).arcs == (37,)


_ADVERSARIAL = st.one_of(
    st.lists(st.sampled_from(SINGLE_ZERO_ORDER), max_size=300),
    st.lists(st.sampled_from(SINGLE_ZERO_ORDER[:3]), max_size=300),  # one arc only
    st.integers(0, 300).map(lambda n: ["0"] * n),  # the same pocket every time
    st.integers(0, 12).map(lambda n: list(SINGLE_ZERO_ORDER) * n),  # exactly even
    st.integers(0, 300).map(lambda n: [SINGLE_ZERO_ORDER[i * 18 % 37] for i in range(n)]),
)


@settings(max_examples=80, deadline=None)
@given(numbers=_ADVERSARIAL, k=st.integers(1, 36))
def test_arc_properties_on_random_and_adversarial_series(numbers: list[str], k: int) -> None:
    arcs = Arcs.of({n: numbers.count(n) for n in set(numbers)}, layout_for(37), k)
    # Every pocket lies in exactly k arcs.
    assert sum(arcs.counts.values()) == k * len(numbers)
    assert list(arcs.counts) == list(SINGLE_ZERO_ORDER)
    assert arcs.counts == _brute_arcs(numbers, 37, k)
    if numbers:
        assert arcs.count == max(arcs.counts.values()) >= arcs.expected
        assert arcs.p_value is not None and 0 <= arcs.p_value <= 1
        assert len(arcs.most_hit) == k
    else:
        assert arcs.p_value is None and arcs.most_hit == ()


@settings(max_examples=40, deadline=None)
@given(numbers=_ADVERSARIAL, size=st.integers(1, 350))
def test_a_windows_arcs_are_those_of_its_last_results(numbers: list[str], size: int) -> None:
    statistics = Statistics.from_events(results(numbers), 37, windows=[size], arcs=(3, 9))
    window = statistics.to_json()["windows"][str(size)]
    tail = numbers[-size:] if numbers else []
    for k in (3, 9):
        assert window["arcs"][str(k)]["all"]["counts"] == _brute_arcs(tail, 37, k)


# -- serial correlation ----------------------------------------------------------------------


def _label(number: str) -> int:
    return 37 if number == "00" else int(number)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pockets", [37, 38])
def test_lag1_correlation_matches_scipy_pearsonr(seed: int, pockets: int) -> None:
    rng = random.Random(seed)
    order = layout_for(pockets).order
    numbers = [rng.choice(order) for _ in range(rng.choice([5, 50, 500, 3000]))]
    serial = Statistics.from_events(results(numbers), pockets).to_json()["serial"]
    labels = [_label(n) for n in numbers]
    expected = scipy_stats.pearsonr(labels[:-1], labels[1:])
    assert serial["pairs"] == len(numbers) - 1
    assert serial["correlation"]["r"] == pytest.approx(float(expected.statistic), abs=1e-12)
    assert serial["correlation"]["p_value"] == pytest.approx(float(expected.pvalue), rel=1e-9)


def test_a_correlated_series_shows_and_a_constant_one_is_not_reported() -> None:
    rng = random.Random(5)
    numbers = ["17"]
    for _ in range(600):  # the next number near the last one: a dependent series
        numbers.append(str(min(36, max(0, int(numbers[-1]) + rng.randint(-4, 4)))))
    serial = Statistics.from_events(results(numbers)).to_json()["serial"]
    assert serial["correlation"]["r"] > 0.5 and serial["correlation"]["p_value"] < 1e-10
    for constant in (["7"] * 50, ["7", "8"], []):
        correlation = Statistics.from_events(results(constant)).to_json()["serial"]["correlation"]
        assert correlation["r"] is None and correlation["p_value"] is None
        assert correlation["reason"]
    with pytest.raises(ValueError, match="at least 3 pairs"):
        pearson_p_value(0.5, 2)


def _distance(previous: str, number: str, direction: str | None, order: tuple[str, ...]) -> int:
    pockets = len(order)
    steps = (order.index(number) - order.index(previous)) % pockets
    if steps > pockets // 2:
        steps -= pockets
    return -steps if direction == "ccw" else steps


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pockets", [37, 38])
def test_distance_chi_squared_matches_scipy_chisquare(seed: int, pockets: int) -> None:
    rng = random.Random(seed)
    order = layout_for(pockets).order
    numbers = [rng.choice(order) for _ in range(rng.choice([400, 2000]))]
    directions: list[str | None] = [rng.choice(["cw", "ccw", None]) for _ in numbers]
    test = Statistics.from_events(results(numbers, directions), pockets).to_json()["serial"]
    distances = [
        _distance(numbers[i - 1], numbers[i], directions[i], order) for i in range(1, len(numbers))
    ]
    observed = [sum(1 for d in distances if d % pockets == step) for step in range(pockets)]
    value, p_value = scipy_stats.chisquare(observed)
    chi = test["distance_chi_squared"]
    assert chi["df"] == pockets - 1 and chi["games"] == len(distances)
    assert chi["value"] == pytest.approx(float(value), rel=1e-12)
    assert chi["p_value"] == pytest.approx(float(p_value), rel=1e-9)


def test_a_dealer_signature_shows_in_the_distances_not_in_the_counts() -> None:
    # Each result 12 pockets on from the last, the way the rotor turns: every pocket
    # drawn equally often, but nothing random about the walk.
    order = SINGLE_ZERO_ORDER
    numbers = [order[i * 12 % 37] for i in range(37 * 10)]
    data = Statistics.from_events(results(numbers, ["cw"] * len(numbers))).to_json()
    assert data["chi_squared"]["p_value"] == 1.0
    assert data["serial"]["distance_chi_squared"]["p_value"] < 1e-100
    few = Statistics.from_events(results(numbers[:100])).to_json()["serial"]
    assert few["distance_chi_squared"]["value"] is None
    assert "99 pairs: the test needs 185" in few["distance_chi_squared"]["reason"]


# -- phases, revolutions, rotor speed, rate of play ------------------------------------------


def _game(
    game_id: int, start: float, phases: tuple[float, float], **result: Any
) -> list[dict[str, Any]]:
    """A game's payloads: launch at ``start``, no more bets and the outcome after ``phases``."""
    to_close, to_result = phases
    spinning = {"event": "spinning", "game_id": game_id, "ts": _ts(start)}
    spinning.update({k: v for k, v in result.items() if k == "rotor_rpm"})
    closed = {"event": "no_more_bets", "game_id": game_id, "ts": _ts(start + to_close)}
    end: dict[str, Any] = {"event": "result", "game_id": game_id, "number": "7"}
    end.update({k: v for k, v in result.items() if k != "rotor_rpm"})
    end["ts"] = _ts(start + to_close + to_result)
    return [spinning, closed, end]


def test_phase_durations_from_the_payloads_times() -> None:
    events = _game(1, 0, (10, 20), revolutions=9, rotor_rpm=22.5)
    events += _game(2, 60, (12, 18.5), revolutions=11, rotor_rpm=25)
    events += _game(3, 120, (8, 30), revolutions=12)
    # A no-spin after its launch: no phase of its own, but the next game waits from it.
    events += [
        {"event": "spinning", "game_id": 4, "ts": _ts(200)},
        {"event": "no_spin", "game_id": 4, "reason": "foreign_object", "ts": _ts(205)},
    ]
    events += _game(5, 240, (9, 21), revolutions=None, rotor_rpm=True)
    data = Statistics.from_events(events).to_json()
    phases = data["phases"]
    assert phases["launch_to_no_more_bets"] == {
        "count": 4,
        "mean": 9.75,
        "median": 9.5,
        "min": 8.0,
        "max": 12.0,
    }
    assert phases["no_more_bets_to_result"]["median"] == 20.5
    assert phases["launch_to_result"] == {
        "count": 4,
        "mean": 32.125,
        "median": 30.25,
        "min": 30.0,
        "max": 38.0,
    }
    # From each outcome to the next launch: 30, 29.5, 42, 35 seconds.
    assert phases["open_to_launch"]["count"] == 4 and phases["open_to_launch"]["max"] == 42.0
    assert data["revolutions"] == {"count": 3, "mean": 10.667, "median": 11, "min": 9, "max": 12}
    assert data["rotor_rpm"] == {
        "count": 2,
        "mean": 23.75,
        "median": 23.75,
        "min": 22.5,
        "max": 25.0,
    }


def test_a_pause_is_not_time_before_a_launch_and_unreadable_times_are_not_timed() -> None:
    events = _game(1, 0, (10, 20)) + _game(2, 30 + PAUSE_S + 1, (10, 20))
    events += [
        {"event": "spinning", "game_id": 3, "ts": "yesterday", "rotor_rpm": math.nan},
        {"event": "no_more_bets", "game_id": 3},
        {"event": "result", "game_id": 3, "number": "7", "ts": 12, "revolutions": -1},
        {"event": "spinning", "game_id": "4", "ts": _ts(5000), "rotor_rpm": "25"},
    ]
    data = Statistics.from_events(events).to_json()
    # Games 2 and "4" were launched over PAUSE_S after the last timed outcome.
    assert data["pauses"] == 2 and data["phases"]["open_to_launch"]["count"] == 0
    assert data["phases"]["launch_to_result"]["count"] == 2
    assert data["revolutions"]["count"] == 0 and data["rotor_rpm"]["count"] == 0
    assert data["results"] == 3


def test_the_recent_rate_leaves_pauses_out() -> None:
    numbers = ["7"] * (RECENT_GAMES + 5)
    events = list(results(numbers, gap_s=120))  # 30 games an hour
    statistics = Statistics.from_events(events[: RECENT_GAMES - 1])
    assert statistics.recent_rate()["rate"] is None  # fewer games than the window
    statistics = Statistics.from_events(events)
    assert statistics.recent_rate() == {"games": RECENT_GAMES, "hours": 0.966667, "rate": 30.0}
    # An hour's pause in the middle changes nothing: play, not the clock.
    paused = [
        {**event, "ts": _ts(index * 120 + (3600 if index >= 20 else 0))}
        for index, event in enumerate(events)
    ]
    assert Statistics.from_events(paused).recent_rate()["rate"] == 30.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=200))
def test_a_summary_is_exact_to_its_resolution(tenths: list[int]) -> None:
    summary = Summary(0.1)
    values = [tenth / 10 for tenth in tenths]
    for seen, value in enumerate(values, 1):
        summary.add(value)
        # Asked after each value: the steps kept sorted between medians stay right.
        assert summary.median() == pytest.approx(py_statistics.median(values[:seen]), abs=1e-9)
    data = summary.to_json()
    assert data["count"] == len(values)
    assert data["median"] == pytest.approx(py_statistics.median(values), abs=1e-9)
    # Rounded to 3 places: a running float sum may round a half the other way.
    assert data["mean"] == pytest.approx(py_statistics.fmean(values), abs=5e-4 + 1e-9)
    assert (data["min"], data["max"]) == (min(values), max(values))


def test_the_text_names_every_new_figure_and_never_a_defect() -> None:
    rng = random.Random(9)
    events: list[dict[str, Any]] = []
    for game in range(1, 400):
        events += _game(game, game * 50, (9, 20), revolutions=rng.randint(8, 14), rotor_rpm=24)
        events[-1]["number"] = rng.choice(DOUBLE_ZERO_ORDER)
        events[-1]["rotor_direction"] = ("cw", "ccw")[game % 2]
    text = "\n".join(describe(Statistics.from_events(events)))
    for words in (
        "arcs of 3 (all): most hit",
        "arcs of 9 (ccw)",
        "lag-1 correlation of the numbers: r",
        "chi-squared (distances between results)",
        "launch to no more bets",
        "ball revolutions",
        "rotor rpm at launch",
        "games per hour of play, last 30 games: 72.0",
    ):
        assert words in text
    assert "defective" not in text


# -- wheeld stats --arc ----------------------------------------------------------------------

NORMAL_GAMES = Path(__file__).parent / "captures" / "wrp" / "normal-games.cap"


def test_stats_reports_the_arcs_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--json", "--arc", "4", "--arc", "2", str(NORMAL_GAMES)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["arcs"]) == ["2", "4"] and data["arcs"]["4"]["all"]["results"] == 4
    assert set(data["windows"]["500"]["arcs"]) == {"2", "4"}
    assert data["phases"]["launch_to_result"]["count"] == 4  # the capture's games, timed
    assert data["revolutions"]["count"] == 4 and data["rotor_rpm"]["count"] == 0
    assert main(["stats", "--arc", "37", str(NORMAL_GAMES)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "wheeld stats: --arc: an arc is 1 to 36 pockets, not 37"
