"""Statistics over a result series, checked against scipy (an independent implementation)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats  # tests only, never in wheeld

from wheeld.audit.replay import replay
from wheeld.cli import main
from wheeld.config import Config
from wheeld.core import capture as capture_format
from wheeld.core.engine import EngineState
from wheeld.core.layout import DOUBLE_ZERO_ORDER, SINGLE_ZERO_ORDER, layout_for
from wheeld.core.stats import ChiSquared, Statistics, chi2_sf
from wheeld.drivers import driver_named
from wheeld.shell.journal import JOURNAL_FILE, Journal
from wheeld.table.effects import GameRecord
from wheeld.table.pipeline import TablePipeline, TableSettings

CAPTURES = Path(__file__).parent / "captures" / "wrp"
NORMAL_GAMES = CAPTURES / "normal-games.cap"


def results(
    numbers: list[str], directions: list[str | None] | None = None
) -> Iterator[dict[str, Any]]:
    """``<base>/game`` result payloads, a minute apart."""
    for index, number in enumerate(numbers):
        direction = directions[index] if directions else ("cw", "ccw")[index % 2]
        yield {
            "event": "result",
            "game_id": index + 1,
            "ts": f"2025-01-01T{index // 60 % 24:02d}:{index % 60:02d}:00.000Z",
            "number": number,
            "rotor_direction": direction,
        }


# -- the chi-squared survival function -------------------------------------------------------


def _survival_cases() -> Iterator[tuple[int, float]]:
    for df in (1, 2, 3, 4, 5, 7, 10, 36, 37, 50, 100, 500, 1000, 5000):
        for factor in (
            1e-12,
            1e-6,
            0.01,
            0.1,
            0.5,
            0.9,
            0.99,
            1.0,
            1.01,
            1.1,
            1.5,
            2,
            3,
            5,
            10,
            30,
        ):
            yield df, df * factor
        yield df, df + 2.0  # about a + 1, where the series hands over to the continued fraction
        yield df, df + 1.999999
    yield from ((1, x) for x in (1e-300, 1e-20, 50.0, 200.0, 700.0, 1300.0))
    yield from ((36, x) for x in (0.001, 500.0, 1000.0, 1400.0))


@pytest.mark.parametrize(("df", "x"), list(_survival_cases()))
def test_chi2_sf_matches_scipy(df: int, x: float) -> None:
    expected = float(scipy_stats.chi2.sf(x, df))
    got = chi2_sf(x, df)
    if expected < 1e-290:  # at the edge of the doubles: both underflow, neither may be large
        assert got < 1e-280
    else:
        assert got == pytest.approx(expected, rel=1e-9, abs=0)


def test_chi2_sf_at_its_ends() -> None:
    assert chi2_sf(0.0, 36) == 1.0
    assert chi2_sf(-1.0, 36) == 1.0
    assert chi2_sf(math.inf, 36) == 0.0
    assert math.isnan(chi2_sf(math.nan, 36))
    with pytest.raises(ValueError, match="degrees of freedom"):
        chi2_sf(1.0, 0)


# -- the chi-squared test over the counts per number -----------------------------------------


def _scipy_chisquare(numbers: list[str], pockets: int) -> tuple[float, float]:
    order = layout_for(pockets).order
    observed = [numbers.count(number) for number in order]
    value, p_value = scipy_stats.chisquare(observed)
    return float(value), float(p_value)


def _check_against_scipy(numbers: list[str], pockets: int) -> ChiSquared:
    chi = Statistics.from_events(results(numbers), pockets).chi_squared
    value, p_value = _scipy_chisquare(numbers, pockets)
    assert chi.df == pockets - 1 and chi.games == len(numbers) and chi.reason is None
    assert chi.value == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert chi.p_value is not None
    if p_value < 1e-290:
        assert chi.p_value < 1e-280
    else:
        assert chi.p_value == pytest.approx(p_value, rel=1e-9, abs=1e-15)
    return chi


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("pockets", [37, 38])
def test_random_series_match_scipy(seed: int, pockets: int) -> None:
    rng = random.Random(seed)
    order = layout_for(pockets).order
    size = rng.choice([5 * pockets, 500, 1000, 3700, 20000])
    _check_against_scipy([rng.choice(order) for _ in range(size)], pockets)


@pytest.mark.parametrize("pockets", [37, 38])
def test_a_biased_series_is_a_deviation(pockets: int) -> None:
    rng = random.Random(7)
    order = layout_for(pockets).order
    # One sector a third more likely: what a worn pocket divider looks like.
    weights = [4 if index < 5 else 3 for index in range(pockets)]
    chi = _check_against_scipy(rng.choices(order, weights, k=10000), pockets)
    assert chi.p_value is not None and chi.p_value < 1e-6


@pytest.mark.parametrize("pockets", [37, 38])
def test_adversarial_series_match_scipy(pockets: int) -> None:
    order = list(layout_for(pockets).order)
    exactly_even = order * 5  # the smallest sample reported: every expected count is 5
    assert _check_against_scipy(exactly_even, pockets).p_value == 1.0
    all_one = [order[3]] * (5 * pockets)
    _check_against_scipy(all_one, pockets)
    one_off = order * 5
    one_off[0] = order[1]
    _check_against_scipy(one_off, pockets)
    mostly_zero = [order[0]] * 5 * pockets + order * 5
    _check_against_scipy(mostly_zero, pockets)


def test_double_zero_counts_00_as_its_own_pocket() -> None:
    numbers = ["00"] * 40 + list(DOUBLE_ZERO_ORDER) * 5
    statistics = Statistics.from_events(results(numbers))  # 00 drawn: a 38-pocket wheel
    assert statistics.layout.pockets == 38 and statistics.counts["00"] == 45
    _check_against_scipy(numbers, 38)
    # On a single-zero wheel 00 is no pocket: not counted, and said so.
    single = Statistics.from_events(results(numbers), pockets=37)
    assert single.ignored == 45 and "00" not in single.counts


@pytest.mark.parametrize(("pockets", "needed"), [(37, 185), (38, 190)])
def test_too_small_a_sample_is_not_tested(pockets: int, needed: int) -> None:
    order = layout_for(pockets).order
    for size in (0, 1, 4, needed - 1):
        chi = Statistics.from_events(results([order[0]] * size), pockets).chi_squared.to_json()
        assert chi["value"] is None and chi["p_value"] is None
        assert chi["df"] == pockets - 1 and chi["games"] == size
        assert f"needs {needed}" in chi["reason"]
    chi = Statistics.from_events(results([order[0]] * needed), pockets).chi_squared.to_json()
    assert chi["value"] is not None and "reason" not in chi


# -- the rest of the figures -----------------------------------------------------------------


def test_even_chances_sectors_repeats_and_distances() -> None:
    numbers = ["0", "32", "32", "26", "17"]
    directions: list[str | None] = ["cw", "cw", "ccw", "ccw", None]
    data = Statistics.from_events(results(numbers, directions)).to_json()
    assert data["chances"]["color"] == {
        "red": {"count": 2, "percent": 40.0},
        "black": {"count": 2, "percent": 40.0},
        "green": {"count": 1, "percent": 20.0},
    }
    assert data["chances"]["dozen"]["zero"]["count"] == 1
    assert data["sectors"]["jeu_zero"] == {"all": 4, "cw": 2, "ccw": 2, "unknown": 0}
    assert data["sectors"]["orphelins"] == {"all": 1, "cw": 0, "ccw": 0, "unknown": 1}
    assert data["repeats"] == {"count": 1, "pairs": 4, "expected_rate": round(1 / 37, 6)}
    # 0 -> 32 is one pocket clockwise; the rotor turning cw, +1; 32 -> 32 is 0;
    # 32 -> 26 is two pockets anticlockwise, which is +2 the way a ccw rotor turns.
    assert data["distance"]["cw"] == {"1": 1}
    assert data["distance"]["ccw"] == {"0": 1, "2": 1}
    steps = SINGLE_ZERO_ORDER.index("17") - SINGLE_ZERO_ORDER.index("26")
    assert data["distance"]["unknown"] == {str((steps + 18) % 37 - 18): 1}


def test_no_spins_per_reason_and_games_per_hour() -> None:
    events: list[dict[str, Any]] = list(results(["1", "2", "3"]))
    events.insert(1, {"event": "spinning", "ts": "2025-01-01T00:00:30.000Z"})
    events.append({"event": "no_spin", "reason": "foreign_object", "ts": "2025-01-01T00:03:00Z"})
    data = Statistics.from_events(events).to_json()
    assert data["games"] == 4 and data["results"] == 3
    assert data["no_spins"] == {
        "count": 1,
        "by_reason": {"foreign_object": {"count": 1, "rate": 0.25}},
    }
    # Four games, three minutes apart first to last: 60 games an hour.
    recent = {"games": 4, "hours": 0.05, "rate": None}  # fewer than RECENT_GAMES
    assert data["games_per_hour"] == {"games": 4, "hours": 0.05, "rate": 60.0, "recent": recent}


def test_malformed_payloads_are_not_invented_results() -> None:
    events: list[dict[str, Any]] = [
        {"event": "result", "number": 7},
        {"event": "result"},
        {"event": "result", "number": "37", "ts": "not a time"},
        {"event": "result", "number": "7", "ts": "yesterday"},
        {"unexpected": True},
    ]
    statistics = Statistics.from_events(events)
    assert statistics.results == 1 and statistics.ignored == 3
    rate = statistics.to_json()["games_per_hour"]
    assert rate == {
        "games": 0,
        "hours": None,
        "rate": None,
        "recent": {"games": 0, "hours": 0.0, "rate": None},
    }


# -- the rolling windows ---------------------------------------------------------------------

_WINDOWED = (
    "results",
    "counts",
    "chi_squared",
    "chances",
    "sectors",
    "repeats",
    "distance",
    "arcs",
    "serial",
)


@settings(max_examples=60, deadline=None)
@given(
    numbers=st.lists(st.sampled_from(SINGLE_ZERO_ORDER), max_size=400),
    directions=st.lists(st.sampled_from(["cw", "ccw", None]), min_size=400, max_size=400),
    windows=st.lists(st.integers(1, 450), min_size=1, max_size=3),
)
def test_a_window_is_a_fresh_statistics_over_its_results(
    numbers: list[str], directions: list[str | None], windows: list[int]
) -> None:
    directions = directions[: len(numbers)]
    statistics = Statistics.from_events(results(numbers, directions), 37, windows)
    data = statistics.to_json()
    for size in windows:
        tail = list(results(numbers, directions))[-size:] if numbers else []
        fresh = Statistics.from_events(tail, 37).to_json()
        assert data["windows"][str(size)] == {key: fresh[key] for key in _WINDOWED}
    if max(windows) >= len(numbers):  # a window longer than the series is the series
        whole = data["windows"][str(max(windows))]
        assert whole == {key: data[key] for key in _WINDOWED}


def test_windows_must_hold_a_result() -> None:
    with pytest.raises(ValueError, match="at least one result"):
        Statistics(37, [0])


# -- wheeld stats ----------------------------------------------------------------------------


def stats(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["stats", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _capture_payloads(path: Path) -> list[str]:
    config = Config()
    settings_ = TableSettings(
        table=config.table.id,
        base_topic=config.base_topic,
        driver="wrp",
        port=str(path),
        rules=config.rules,
        history_length=config.mqtt.history_length,
    )
    pipeline = TablePipeline(settings_, driver_named("wrp").decoder())
    return [
        message.payload
        for message in replay(capture_format.read(path), pipeline)
        if message.topic == f"{config.base_topic}/game"
    ]


def _journal(state_dir: Path, payloads: list[str]) -> None:
    journal = Journal(state_dir / JOURNAL_FILE)
    try:
        for payload in payloads:
            event = json.loads(payload)
            record = GameRecord(event["game_id"], event["event"], payload, event.get("number"))
            journal.record([record], [], EngineState(next_game_id=event["game_id"] + 1))
    finally:
        journal.close()


def test_stats_over_a_golden_capture(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = stats(capsys, "--json", NORMAL_GAMES)
    assert (status, err) == (0, "")
    data = json.loads(out)
    expected = [
        json.loads(line)
        for line in (CAPTURES / "normal-games.expected.jsonl").read_text().splitlines()
    ]
    drawn = [event["number"] for event in expected if event["event"] == "result"]
    assert data["pockets"] == 37 and data["results"] == len(drawn) == 4
    assert {number for number, count in data["counts"].items() if count} == set(drawn)
    assert data["chi_squared"]["value"] is None and data["chi_squared"]["df"] == 36
    assert data["chi_squared"]["games"] == 4 and "185" in data["chi_squared"]["reason"]


def test_stats_over_a_journal_built_by_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _journal(tmp_path, _capture_payloads(NORMAL_GAMES))
    status, out, err = stats(capsys, "--json", "--state-dir", tmp_path)
    assert (status, err) == (0, "")
    _, from_capture, _ = stats(capsys, "--json", NORMAL_GAMES)
    assert json.loads(out) == json.loads(from_capture)


def test_stats_over_a_long_journal_matches_scipy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(12)
    numbers = [rng.choice(DOUBLE_ZERO_ORDER) for _ in range(600)]
    _journal(tmp_path, [json.dumps(event) for event in results(numbers)])
    status, out, _ = stats(capsys, "--json", "--window", "200", "--state-dir", tmp_path)
    assert status == 0
    data = json.loads(out)
    value, p_value = _scipy_chisquare(numbers, 38)
    assert data["pockets"] == 38 and data["chi_squared"]["games"] == 600
    assert data["chi_squared"]["value"] == pytest.approx(value, rel=1e-12)
    assert data["chi_squared"]["p_value"] == pytest.approx(p_value, rel=1e-9)
    assert data["windows"]["200"]["chi_squared"]["games"] == 200
    status, text, _ = stats(capsys, "--state-dir", tmp_path)
    assert status == 0
    assert text.splitlines()[0] == "38-pocket wheel: 600 games, 600 results"
    assert "defective" not in text and "deviation" in text


def test_stats_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = stats(capsys, "--state-dir", tmp_path)
    assert (status, out) == (2, "")
    assert err.strip() == f"wheeld stats: {tmp_path / JOURNAL_FILE}: no journal there"
    status, out, err = stats(capsys, tmp_path / "missing.cap")
    assert status == 1 and out == "" and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exited:
        main(["stats", "--state-dir", str(tmp_path), str(NORMAL_GAMES)])
    assert exited.value.code == 2
    # Found by an attack: a window past a C ssize_t was an OverflowError traceback.
    capsys.readouterr()
    for window in ("99999999999999999999", "10000001", "0"):
        with pytest.raises(SystemExit) as exited:
            main(["stats", "--window", window, str(NORMAL_GAMES)])
        assert exited.value.code == 2
        assert "is not a whole number from 1 to 10,000,000" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(
    pockets=st.sampled_from([37, 38]),
    windows=st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True),
    series=st.lists(
        st.tuples(st.integers(0, 37), st.sampled_from(["cw", "ccw", None])), max_size=60
    ),
)
def test_sliding_windows_equal_a_recount_of_their_results(
    pockets: int, windows: list[int], series: list[tuple[int, str | None]]
) -> None:
    """Windows slide by one result (add the new, take the oldest out): always what a
    recount of the window's results gives, repeats and clusters included."""
    statistics = Statistics(pockets, windows)
    drawn: list[dict[str, Any]] = []
    for game_id, (label, direction) in enumerate(series, 1):
        number = "00" if label == 37 and pockets == 38 else str(label % 37)
        event = {"event": "result", "game_id": game_id, "number": number}
        event["rotor_direction"] = direction
        statistics.add(event)
        drawn.append(event)
        for size in windows:
            recount = Statistics(pockets, [size], statistics.arcs)
            for earlier in drawn[-size:]:
                recount.add(earlier)
            assert statistics.window(size) == recount.window(size)
