"""Statistics snapshots: ``restore(snapshot())`` goes on exactly as the statistics it was
taken of, the snapshot's size is bounded, and a snapshot that is not one is refused with
a ValueError of one line, never another exception (hypothesis)."""

from __future__ import annotations

import copy
import functools
import json
import math
import operator
import random
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st

from wheeld.core.layout import DOUBLE_ZERO_ORDER, SINGLE_ZERO_ORDER
from wheeld.core.stats import DEFAULT_ARCS, DEFAULT_WINDOWS, SNAPSHOT_VERSION, Statistics, describe

# -- game payloads, plausible and not -----------------------------------------------------------

_BASE = datetime(2025, 1, 1, tzinfo=UTC)
_ZONES = {
    "+02:00": timezone(timedelta(hours=2)),
    "-05:30": timezone(-timedelta(hours=5, minutes=30)),
    "+01:00:07": timezone(timedelta(hours=1, seconds=7)),
}

_FIELDS = st.fixed_dictionaries(
    {
        "event": st.sampled_from(
            ["spinning", "no_more_bets", "result", "result", "result", "no_spin", "other"]
        )
    },
    optional={
        "game_id": st.one_of(st.integers(1, 12), st.sampled_from(["4", True, None, -1])),
        "number": st.one_of(
            st.sampled_from(DOUBLE_ZERO_ORDER),
            st.sampled_from(["37", "-1", "", "7.0", " 7", 7, None]),
        ),
        "rotor_direction": st.sampled_from(["cw", "ccw", None, "sideways", 1]),
        "rotor_rpm": st.one_of(
            st.floats(0, 1e4),
            st.integers(-5, 100),
            st.sampled_from([math.nan, math.inf, -1.0, True, "25", None]),
        ),
        "revolutions": st.one_of(st.integers(-3, 40), st.sampled_from([None, True, 9.5, "9"])),
        "reason": st.sampled_from(["foreign_object", "ball_out_of_wheel", None, 7]),
    },
)
#: How far the table's clock moves before a payload, in milliseconds: mostly play,
#: sometimes a pause (over 15 minutes), sometimes backwards.
_STEP_MS = st.one_of(
    st.integers(0, 60_000), st.sampled_from([-5_000, 0, 901_000, 3_600_000, 86_400_000])
)
#: How a payload gives its time: in UTC, in another zone, or not readably.
_TS = st.sampled_from(["Z", "Z", "Z", "Z", *_ZONES, "missing", "garbage", "naive", "number"])
_UNREADABLE: dict[str, Any] = {"garbage": "yesterday", "naive": "2025-01-01T00:00:00", "number": 12}


@st.composite
def payloads(draw: st.DrawFn, max_size: int = 150) -> list[dict[str, Any]]:
    clock = _BASE
    events = []
    for fields in draw(st.lists(_FIELDS, max_size=max_size)):
        clock += timedelta(milliseconds=draw(_STEP_MS))
        style = draw(_TS)
        event: dict[str, Any] = dict(fields)
        if style == "Z":
            event["ts"] = clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        elif style in _ZONES:
            event["ts"] = clock.astimezone(_ZONES[style]).isoformat()
        elif style != "missing":
            event["ts"] = _UNREADABLE[style]
        events.append(event)
    return events


def _plain(value: Any) -> None:
    """Only what JSON has: objects with string keys, lists, strings, numbers, null."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            _plain(item)
    elif isinstance(value, list):
        for item in value:
            _plain(item)
    else:
        assert value is None or type(value) in (str, int, float), type(value)


def _through_json(snapshot: dict[str, Any]) -> Any:
    """The snapshot as the journal keeps it: JSON text, strict (no NaN or infinity)."""
    _plain(snapshot)
    text = json.dumps(snapshot, allow_nan=False)
    back = json.loads(text)
    assert back == snapshot and json.dumps(back, allow_nan=False) == text
    return back


def _figures(statistics: Statistics) -> tuple[Any, ...]:
    """Everything read off the statistics, as text so that 5 and 5.0 differ."""
    return (
        json.dumps(statistics.to_json()),
        statistics.chi_squared,
        [statistics.sector_concentration(least) for least in (0, 5, 40)],
        statistics.recent_rate(),
        describe(statistics),
        json.dumps(statistics.snapshot()),
    )


# -- restore(snapshot()) goes on exactly ----------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pockets=st.sampled_from([37, 38]),
    windows=st.lists(st.integers(1, 40), max_size=3),
    arcs=st.lists(st.integers(1, 36), max_size=3),
    played=st.tuples(st.integers(0, 120), st.integers(0, 40)),
    odd=payloads(),
    cuts=st.lists(st.integers(0, 10_000), max_size=3),
)
def test_a_restored_statistics_goes_on_exactly_as_one_never_stopped(
    pockets: int,
    windows: list[int],
    arcs: list[int],
    played: tuple[int, int],
    odd: list[dict[str, Any]],
    cuts: list[int],
) -> None:
    """Cut the series anywhere (several times): snapshot, through JSON, restore, go on.
    Every figure, the text and the next snapshot are those of one object fed it all.
    The series: a table's games, payloads plausible and not, and games again."""
    before, after = played
    events = [
        *_table(before, seed=before, double_zero=pockets == 38),
        *odd,
        *_table(after, seed=after + 1, double_zero=True),
    ]
    whole = Statistics(pockets, windows, arcs)
    for event in events:
        whole.add(event)
    pieces = Statistics(pockets, windows, arcs)
    start = 0
    for cut in [*sorted(cut % (len(events) + 1) for cut in cuts), len(events)]:
        for event in events[start:cut]:
            pieces.add(event)
        start = cut
        snapshot = _through_json(pieces.snapshot())
        restored = Statistics.restore(snapshot, pockets=pockets, windows=windows, arcs=arcs)
        assert _figures(restored) == _figures(pieces)
        pieces = restored
    assert _figures(pieces) == _figures(whole)


def test_a_restore_without_pockets_takes_the_snapshots() -> None:
    statistics = Statistics.from_events(_table(300, seed=3, double_zero=True), 38)
    restored = Statistics.restore(statistics.snapshot())
    assert restored.layout.pockets == 38
    assert _figures(restored) == _figures(statistics)


# -- its size ------------------------------------------------------------------------------------


def _table(games: int, seed: int, double_zero: bool = False) -> Iterator[dict[str, Any]]:
    """A table's payloads: launch, no more bets, a result (a no-spin now and then)."""
    rng = random.Random(seed)
    order = DOUBLE_ZERO_ORDER if double_zero else SINGLE_ZERO_ORDER
    clock = _BASE

    def ts() -> str:
        return clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    for game in range(1, games + 1):
        direction = ("cw", "ccw")[game % 2]
        clock += timedelta(seconds=rng.uniform(15, 60) if game % 500 else 3600)
        rpm = round(rng.uniform(20, 30), 1)
        yield {"event": "spinning", "game_id": game, "ts": ts(), "rotor_rpm": rpm}
        clock += timedelta(seconds=rng.uniform(8, 12))
        yield {"event": "no_more_bets", "game_id": game, "ts": ts()}
        clock += timedelta(seconds=rng.uniform(12, 25))
        if rng.random() < 0.02:
            reason = rng.choice(["foreign_object", "ball_out_of_wheel", "misfire"])
            yield {"event": "no_spin", "game_id": game, "ts": ts(), "reason": reason}
            continue
        yield {
            "event": "result",
            "game_id": game,
            "ts": ts(),
            "number": rng.choice(order),
            "rotor_direction": direction,
            "revolutions": rng.randint(8, 16),
        }


def test_a_snapshots_size_is_bounded_by_the_wheel_and_the_largest_window() -> None:
    """Ten times the games, about the same size: 27 kB or so on a 37-pocket wheel with the
    default windows, half of it the last 1000 results."""
    sizes = []
    statistics = Statistics(37)
    played = 0
    for games in (5_000, 50_000):
        for event in _table(games - played, seed=games):
            statistics.add(event)
        played = games
        assert statistics.to_json()["games"] == games
        sizes.append(len(json.dumps(statistics.snapshot())))
    assert all(size < 40_000 for size in sizes), sizes
    assert max(sizes) < 1.2 * min(sizes), sizes


# -- a snapshot that is not one is refused ------------------------------------------------------


def _refused(snapshot: Any, **wanted: Any) -> str:
    with pytest.raises(ValueError) as refused:
        Statistics.restore(snapshot, **wanted)
    message = str(refused.value)
    assert message.startswith("statistics snapshot: ") and "\n" not in message
    assert "unreadable" not in message  # a check said why, not the last resort
    return message


def test_a_snapshot_of_other_statistics_or_another_version_is_refused() -> None:
    statistics = Statistics.from_events(_table(50, seed=1), 37)
    snapshot = statistics.snapshot()
    assert snapshot["version"] == SNAPSHOT_VERSION == 1
    assert snapshot["windows"] == list(DEFAULT_WINDOWS) and snapshot["arcs"] == list(DEFAULT_ARCS)
    assert _refused(snapshot, pockets=38) == ("statistics snapshot: taken with pockets 37, not 38")
    assert _refused(snapshot, windows=[200]) == (
        "statistics snapshot: taken with windows [500, 1000], not [200]"
    )
    assert _refused(snapshot, arcs=[3, 5]) == (
        "statistics snapshot: taken with arcs [3, 5, 9], not [3, 5]"
    )
    # The same windows and arcs asked in another order, or twice, are the same.
    again = Statistics.restore(snapshot, pockets=37, windows=[1000, 500, 500], arcs=[9, 3, 5])
    assert again.to_json() == statistics.to_json()
    assert _refused({**snapshot, "version": 2}) == (
        "statistics snapshot: version 2, this wheeld reads version 1"
    )
    assert "version" in _refused(
        {key: value for key, value in snapshot.items() if key != "version"}
    )
    assert (
        _refused([snapshot]) == "statistics snapshot: the snapshot: an object expected, not a list"
    )
    assert _refused({**snapshot, "extra": 1}).endswith("a member it should not have")


def _edited(snapshot: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    edited = copy.deepcopy(snapshot)
    *parents, last = path.split(".")
    here: Any = edited
    for key in parents:
        here = here[int(key)] if isinstance(here, list) else here[key]
    here[int(last) if isinstance(here, list) else last] = value
    return edited


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        ("whole.results", 999, "whole.results: not the sum of the counts"),
        ("whole.counts.0", -1, "whole.counts[0]: a count expected, not a number out of range"),
        ("whole.counts.0", 1.0, "whole.counts[0]: a count expected, not a number"),
        ("whole.counts.0", True, "whole.counts[0]: a count expected, not a boolean"),
        ("whole.counts", [1] * 36, "whole.counts: 37 items expected, not 36"),
        ("whole.by_direction.cw", [50] * 37, "more results than the counts"),
        ("whole.repeats", 10_000, "whole.repeats: not the distances of 0"),
        ("whole.distances.cw", [0] * 37, "not one distance per pair of consecutive results"),
        ("whole.pairs.3", 0, "whole.pairs: lag-1 sums no series of these counts gives"),
        ("whole.previous", "00", "whole.previous: not a pocket of a 37-pocket wheel"),
        ("recent.0", ["17", "left"], "recent[0]: a rotor direction is cw, ccw or null"),
        ("recent", [], "recent: 120 items expected, not 0"),
        ("no_spins", {"misfire": 0}, "no_spins: a count of at least 1 per reason"),
        ("first_ts", "2025-01-01T00:00:00", "first_ts: an ISO 8601 time with its zone expected"),
        ("last_ts", "2024-01-01T00:00:00Z", "timed_games: times not between the first and"),
        ("recent_times", [], "recent_times: 30 items expected, not 0"),
        ("open_games", [[1, {}]], "open_games[0]: a launch or no-more-bets time expected"),
        ("phases.launch_to_result.count", 3, "not as many values as the count"),
        ("rotor_rpm.low", math.nan, "rotor_rpm.low: a finite number expected, not a number"),
        ("rotor_rpm.sum", 5, "rotor_rpm.sum: a number with a point expected, not a whole number"),
        ("revolutions.histogram.0", [9, 0], "a step seen is seen at least once"),
        ("revolutions.low", 100, "revolutions: its min above its max"),
        ("windows", [1000, 500], "windows: whole numbers from 1 expected, ascending, each once"),
        ("arcs", [3, 37], "arcs: whole numbers from 1 to 36 expected, ascending, each once"),
        ("pockets", "37", "pockets: 37 to 40 expected"),
    ],
)
def test_an_inconsistent_snapshot_is_refused_saying_why(path: str, value: Any, why: str) -> None:
    """A snapshot whose parts no one series gives is refused, the part named."""
    snapshot = Statistics.from_events(_table(140, seed=2), 37, windows=[120]).snapshot()
    assert why in _refused(_edited(snapshot, path, value), windows=[120])


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 40),
    st.sampled_from([2**64 + 1, -(2**70), 10**400, 0.0, -0.0]),
    st.floats(),
    st.text(max_size=4),
    st.sampled_from(
        [
            "0",
            "00",
            "17",
            "cw",
            "ccw",
            "2025-01-01T00:00:00Z",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59-05:00",
            "2025-01-01T00:00:00",
        ]
    ),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)


def _places(value: Any, into: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in a snapshot."""
    if isinstance(value, dict):
        for key in value:
            into.append((value, key))
            _places(value[key], into)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            into.append((value, index))
            _places(item, into)
    return into


def _mutate(snapshot: Any, data: st.DataObject) -> Any:
    """One change anywhere: a member first (each as likely), then a place in it."""
    if not isinstance(snapshot, dict) or not snapshot:
        return data.draw(_JUNK)
    member = data.draw(st.sampled_from(sorted(snapshot)), label="member")
    places = [(snapshot, member), *_places(snapshot[member], [])]
    container, key = places[data.draw(st.integers(0, len(places) - 1), label="place")]
    action = data.draw(st.sampled_from(["replace", "nudge", "nudge", "delete", "add"]))
    value = container[key]
    if action == "replace":
        container[key] = data.draw(_JUNK)
    elif action == "nudge":  # near the truth: what a consistency check must catch
        if type(value) is int:
            container[key] = value + data.draw(st.sampled_from([-1, 1, 37]))
        elif type(value) is float:
            container[key] = value + data.draw(st.sampled_from([-0.5, 0.1, 1e308]))
        elif type(value) is str:
            container[key] = data.draw(st.sampled_from([value + "0", value[:-1], "00", "0"]))
        elif isinstance(value, list) and value:
            container[key] = value[:-1] if data.draw(st.booleans()) else [*value, value[-1]]
        else:
            container[key] = data.draw(_JUNK)
    elif action == "delete":
        del container[key]
    elif isinstance(container, dict):
        container[data.draw(st.sampled_from(["extra", "results", "0"]))] = data.draw(_JUNK)
    else:
        container.insert(key, copy.deepcopy(value))
    return snapshot


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pockets=st.sampled_from([37, 38]),
    played=st.integers(0, 40),
    events=payloads(max_size=40),
    mutations=st.integers(1, 3),
    data=st.data(),
)
def test_a_mutated_snapshot_is_refused_with_a_value_error_or_restored_usable(
    pockets: int, played: int, events: list[dict[str, Any]], mutations: int, data: st.DataObject
) -> None:
    """Never trust a snapshot: whatever was changed in it, restore raises a ValueError of
    one line (a check naming the part) or gives statistics that work: figures, text,
    snapshot, and more games."""
    statistics = Statistics(pockets, [3, 7], [3])
    for event in [*_table(played, seed=played, double_zero=pockets == 38), *events]:
        statistics.add(event)
    snapshot: Any = json.loads(json.dumps(statistics.snapshot()))
    for _ in range(mutations):
        snapshot = _mutate(snapshot, data)
    try:
        restored = Statistics.restore(snapshot, pockets=pockets, windows=[3, 7], arcs=[3])
    except ValueError as refused:
        message = str(refused)
        assert message.startswith("statistics snapshot: ") and "\n" not in message
        assert "unreadable" not in message, refused.__cause__
        note("refused: " + message.split(":")[1].strip().split("[")[0].split(".")[0])
        return
    note("restored")
    describe(restored)
    json.dumps(restored.snapshot())
    for event in events[:20]:
        restored.add(event)
    json.dumps(restored.to_json())
    restored.sector_concentration(0)
    restored.recent_rate()


# -- from_events streams when it knows the wheel ------------------------------------------------


class _Payload(dict[str, Any]):
    """A payload that can be watched for (a plain dict cannot be weakly referenced)."""


def test_from_events_counts_as_the_events_come_when_given_the_pockets() -> None:
    """With the pockets given, no event is held once counted (a year of games fits in
    memory); without, the series is listed first, to look for a 00."""
    alive = most = 0

    def gone() -> None:
        nonlocal alive
        alive -= 1

    def watched(games: int) -> Iterator[_Payload]:
        nonlocal alive, most
        for event in _table(games, seed=5):
            payload = _Payload(event)
            weakref.finalize(payload, gone)
            alive += 1
            most = max(most, alive)
            yield payload
            del payload

    statistics = Statistics.from_events(watched(400), 37)
    assert statistics.to_json()["games"] == 400 and most <= 3
    most = 0
    listed = Statistics.from_events(watched(400))
    assert listed.layout.pockets == 37 and most > 1000  # every payload held at once
    assert listed.to_json() == statistics.to_json()


# -- wheeld stats: the series counted as it is read ---------------------------------------------


def test_stats_over_a_journal_never_list_its_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal is read a batch at a time, twice: for a 00 (written plainly or with
    JSON escapes, it is a double-zero wheel's), then to count."""
    from tests.test_stats import _journal, results, stats
    from wheeld.shell.journal import JournalView

    rng = random.Random(4)
    numbers = [rng.choice(SINGLE_ZERO_ORDER) for _ in range(300)]
    numbers[150] = "00"
    payloads = [json.dumps(event) for event in results(numbers)]
    payloads[150] = payloads[150].replace('"00"', '"\\u0030\\u0030"')
    _journal(tmp_path, payloads)

    def listed(self: JournalView) -> None:
        raise AssertionError("the whole series listed")

    monkeypatch.setattr(JournalView, "decisions", listed)
    status, out, err = stats(capsys, "--json", "--window", "100", "--state-dir", tmp_path)
    assert (status, err) == (0, "")
    expected = Statistics.from_events(results(numbers), windows=[100]).to_json()
    assert expected["pockets"] == 38 and json.loads(out) == {**expected, "schema_version": 1}


def test_stats_of_a_capture_whose_wheel_changed_after_its_games_count_them_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Counted as the replay goes against the wheel of the first game; a hello of another
    wheel after it (none configured): the capture is replayed again to count against it."""
    from tests.test_stats import NORMAL_GAMES, _capture_payloads, stats

    body = "WRHEL,399,77000,38,RefWheel,1.0.0,SN0001"
    checksum = functools.reduce(operator.xor, body.encode(), 0)
    capture = tmp_path / "changed.cap"
    capture.write_text(f"{NORMAL_GAMES.read_text()}1760000077.002 < ${body}*{checksum:02X}\n")
    status, out, err = stats(capsys, "--json", capture)
    assert (status, err) == (0, "")
    data = json.loads(out)
    events = [json.loads(payload) for payload in _capture_payloads(capture)]
    assert data["pockets"] == 38 and data["results"] == 4
    assert data == {**Statistics.from_events(events, 38).to_json(), "schema_version": 1}
