"""A table's statistics as a snapshot, and read back trusting nothing (``docs/statistics.md``).

``snapshot`` gives everything ``Statistics`` needs to go on exactly, in plain JSON
values; ``restore`` takes one up, refusing (with a ValueError of one line) a
snapshot of another version or set-up, malformed, or whose parts no one series gives.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from wheeld.core.layout import WheelLayout
from wheeld.core.tally import DIRECTIONS, CountedResult, PairSums, Tally, number_label
from wheeld.core.times import OPEN_GAMES, PHASES, RECENT_GAMES, Summary, time_of

if TYPE_CHECKING:
    from wheeld.core.stats import Statistics

#: The layout of ``Statistics.snapshot``: ``Statistics.restore`` reads this version only.
SNAPSHOT_VERSION = 1

# -- snapshots: reading them back, trusting nothing ---------------------------------------------

_DISTANCE_KEYS = (*DIRECTIONS, "unknown")
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
    at = time_of(value) if type(value) is str else None
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


# -- the tallies ------------------------------------------------------------------------------


def tally_snapshot(tally: Tally) -> dict[str, Any]:
    """What the whole series' tally needs to go on: counts per pocket (all and by
    rotor direction) in wheel order, each direction's distance histogram from
    ``-(pockets // 2)`` on, the repeats, the lag-1 sums and the last result.

    The even chances and the sectors are sums of the counts: recounted, not kept.
    """
    order = tally.layout.order
    steps = _steps(tally.layout)
    return {
        "results": tally.results,
        "counts": [tally.counts.get(number, 0) for number in order],
        "by_direction": {
            key: [tally.by_direction[key].get(number, 0) for number in order] for key in DIRECTIONS
        },
        "repeats": tally.repeats,
        "distances": {
            key: [tally.distances.get(key, Counter()).get(step, 0) for step in steps]
            for key in _DISTANCE_KEYS
        },
        "pairs": tally._pairs.snapshot(),
        "previous": tally._previous,
    }


def load_tally(tally: Tally, snapshot: Any, where: str) -> None:
    """Take up ``snapshot`` in this fresh tally, checked to be one a series can give."""
    data = _fields(snapshot, where, _TALLY_MEMBERS)
    order = tally.layout.order
    counts = _counts(data["counts"], f"{where}.counts", len(order))
    results = _count(data["results"], f"{where}.results")
    if results != sum(counts):
        raise _malformed(f"{where}.results", "not the sum of the counts")
    directions = _fields(data["by_direction"], f"{where}.by_direction", DIRECTIONS)
    by_direction = {
        key: _counts(directions[key], f"{where}.by_direction.{key}", len(order))
        for key in DIRECTIONS
    }
    known = [cw + ccw for cw, ccw in zip(by_direction["cw"], by_direction["ccw"], strict=True)]
    if any(map(int.__gt__, known, counts)):
        raise _malformed(f"{where}.by_direction", "more results than the counts")
    _load_distances(tally, data["distances"], f"{where}.distances", by_direction, results)
    repeats = _count(data["repeats"], f"{where}.repeats")
    if repeats != sum(histogram[0] for histogram in tally.distances.values()):
        raise _malformed(f"{where}.repeats", "not the distances of 0")
    previous = data["previous"]
    if (previous is None) != (results == 0) or (
        previous is not None and not counts[_index(previous, tally.layout, f"{where}.previous")]
    ):
        raise _malformed(f"{where}.previous", "not a result counted")
    _load_pairs(tally._pairs, data["pairs"], f"{where}.pairs", counts, tally.layout, previous)
    tally.results, tally.repeats, tally._previous = results, repeats, previous
    for index, number in enumerate(order):
        _credit(tally.counts, number, counts[index])
        for key in DIRECTIONS:
            _credit(tally.by_direction[key], number, by_direction[key][index])
        facts = tally.layout.facts(number)
        for name, chance in tally.chances.items():
            value = getattr(facts, name)
            _credit(chance, str(value) if value is not None else "zero", counts[index])
        for sector in facts.sectors:
            _credit(tally.sectors[sector], "all", counts[index])
            for key in DIRECTIONS:
                _credit(tally.sectors[sector], key, by_direction[key][index])
            _credit(tally.sectors[sector], "unknown", counts[index] - known[index])
    tally.counts_loaded()


def _load_distances(
    tally: Tally, snapshot: Any, where: str, by_direction: dict[str, list[int]], results: int
) -> None:
    steps = _steps(tally.layout)
    data = _fields(snapshot, where, _DISTANCE_KEYS)
    histograms = {key: _counts(data[key], f"{where}.{key}", len(steps)) for key in _DISTANCE_KEYS}
    if sum(map(sum, histograms.values())) != max(0, results - 1):
        raise _malformed(where, "not one distance per pair of consecutive results")
    # A pair is counted by its later result's direction: no more pairs than such results.
    available = {key: sum(by_direction[key]) for key in DIRECTIONS}
    available["unknown"] = results - sum(available.values())
    for key, histogram in histograms.items():
        if sum(histogram) > available[key]:
            raise _malformed(f"{where}.{key}", "more pairs than results of that direction")
    # Half-way round a double-zero wheel is +19 clockwise: -19 only for a ccw game.
    if tally.layout.pockets % 2 == 0 and (
        histograms["ccw"][-1] or histograms["cw"][0] or histograms["unknown"][0]
    ):
        raise _malformed(where, "a distance half-way round counted the wrong way")
    for key, histogram in histograms.items():
        found = Counter(
            {step: count for step, count in zip(steps, histogram, strict=True) if count}
        )
        if found:
            tally.distances[key] = found


def _load_pairs(
    pairs: PairSums,
    snapshot: Any,
    where: str,
    counts: list[int],
    layout: WheelLayout,
    last: str | None,
) -> None:
    """Take up ``snapshot``, checked against the counts it was summed over.

    Every result but the last is an x, every one but the first a y: the x sums
    follow from the counts and the last result, and the y sums must name a
    first result that was counted.
    """
    sums = _counts(snapshot, where, 6)
    n, sx, sy, sxx, syy, sxy = sums
    labels = [number_label(number) for number in layout.order]
    total = sum(map(int.__mul__, labels, counts))
    squares = sum(label * label * count for label, count in zip(labels, counts, strict=True))
    results = sum(counts)
    if n != max(0, results - 1):
        raise _malformed(where, "not one pair per consecutive results")
    if last is None or n == 0:
        consistent = sums == [0] * 6
    else:
        x_out = number_label(last)
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
    pairs.n, pairs.sx, pairs.sy, pairs.sxx, pairs.syy, pairs.sxy = sums


# -- the statistics ---------------------------------------------------------------------------


def snapshot(statistics: Statistics) -> dict[str, Any]:
    """Everything needed to go on exactly from here, in plain JSON values
    (``json.loads(json.dumps(...))`` gives it back equal): ``restore`` takes it up.

    Its size is bounded by the wheel's size and the largest window, never by the
    number of games: counts per pocket, distance histograms and lag-1 sums of the
    whole series; the last ``max(windows)`` results with their rotor direction
    (the windows are recounted from them); the last ``RECENT_GAMES`` outcome
    times; at most ``OPEN_GAMES`` open games; no-spins by reason (a handful);
    and each ``Summary``'s histogram, an entry per step of its resolution seen
    (0.1 s, 0.1 rpm, a revolution), bounded by how far the values spread, not by
    how many there are. About 27 kB of JSON on a 37-pocket wheel with the default
    windows, half of it the last 1000 results.
    """
    times = statistics.times
    return {
        "version": SNAPSHOT_VERSION,
        "pockets": statistics.layout.pockets,
        "windows": list(statistics.windows),
        "arcs": list(statistics.arcs),
        "whole": tally_snapshot(statistics._whole),
        # Oldest first; a direction other than cw or ccw counts as unknown, as null.
        "recent": [
            [result.number, result.rotor_direction]
            if result.rotor_direction in DIRECTIONS
            else [result.number, None]
            for result in statistics._recent
        ],
        "no_spins": dict(sorted(statistics.no_spins.items())),
        "ignored": statistics.ignored,
        "timed_games": times.timed_games,
        "first_ts": None if times.first_ts is None else times.first_ts.isoformat(),
        "last_ts": None if times.last_ts is None else times.last_ts.isoformat(),
        # The last is the last outcome's time, which the next launch waits from.
        "recent_times": [at.isoformat() for at in times.recent_times],
        "open_games": [
            [game, {kind: at.isoformat() for kind, at in sorted(marks.items())}]
            for game, marks in sorted(times.marks.items())
        ],
        "phases": {name: summary_snapshot(summary) for name, summary in times.phases.items()},
        "pauses": times.pauses,
        "revolutions": summary_snapshot(times.revolutions),
        "rotor_rpm": summary_snapshot(times.rotor_rpm),
    }


def restore(
    cls: type[Statistics],
    snapshot: Any,
    pockets: int | None,
    windows: Sequence[int],
    arcs: Sequence[int],
    order: Sequence[str] | None,
) -> Statistics:
    """``Statistics.restore``: the statistics ``snapshot`` was taken of, or a ValueError
    of one line (never another exception, whatever ``snapshot`` holds)."""
    if order:
        # Snapshots keep counts in the standard order: a custom one is counted again.
        raise ValueError("statistics snapshot: a custom pocket order is counted again")
    try:
        return _restore(cls, snapshot, pockets, windows, arcs)
    except _Malformed:
        raise
    except Exception as exc:  # a check missed: still a refusal, never a crash at start
        raise ValueError(f"statistics snapshot: unreadable ({type(exc).__name__})") from exc


def _restore(
    cls: type[Statistics],
    snapshot: Any,
    pockets: int | None,
    windows: Sequence[int],
    arcs: Sequence[int],
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
    _load_series(statistics, data)
    _load_times(statistics, data)
    phases = _fields(data["phases"], "phases", PHASES)
    for name, summary in statistics.times.phases.items():
        load_summary(summary, phases[name], f"phases.{name}")
    load_summary(statistics.times.revolutions, data["revolutions"], "revolutions")
    load_summary(statistics.times.rotor_rpm, data["rotor_rpm"], "rotor_rpm")
    statistics.times.pauses = _count(data["pauses"], "pauses")
    return statistics


def _load_series(statistics: Statistics, data: dict[str, Any]) -> None:
    """The whole tally, the recent results (the windows recounted from them),
    no-spins and ignored results."""
    whole = statistics._whole
    load_tally(whole, data["whole"], "whole")
    held = min(whole.results, max(statistics.windows, default=0))
    recent = _items(data["recent"], "recent", held)
    seen: Counter[tuple[str, str | None]] = Counter()
    for index, entry in enumerate(recent):
        at = f"recent[{index}]"
        number, direction = _items(entry, at, 2)
        if direction not in (None, *DIRECTIONS):
            raise _malformed(at, "a rotor direction is cw, ccw or null")
        result = CountedResult(
            statistics.layout.order[_index(number, statistics.layout, at)], direction
        )
        seen[result.number, direction] += 1
        statistics._slide_windows(result)
    if recent and statistics._recent[-1].number != whole._previous:
        raise _malformed("recent", "not ending with the last result")
    for (number, direction), count in seen.items():
        if direction is None:  # of unknown direction: neither cw nor ccw
            counted = whole.counts[number] - sum(
                whole.by_direction[key][number] for key in DIRECTIONS
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
        statistics.no_spins[reason] = count
    statistics.ignored = _count(data["ignored"], "ignored")


def _load_times(statistics: Statistics, data: dict[str, Any]) -> None:
    """The times of the outcomes and of the open games."""
    kept = statistics.times
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
    kept.timed_games, kept.first_ts, kept.last_ts = (
        timed,
        first,
        last,
    )
    kept.recent_times.extend(times)
    kept.last_outcome = kept.recent_times[-1] if kept.recent_times else None
    game = None
    for index, entry in enumerate(_items(data["open_games"], "open_games")):
        at = f"open_games[{index}]"
        if index >= OPEN_GAMES:
            raise _malformed("open_games", f"more than {OPEN_GAMES}")
        pair = _items(entry, at, 2)
        if type(pair[0]) is not int or (game is not None and pair[0] <= game):
            raise _malformed(at, "game ids are whole numbers, ascending, each once")
        game = pair[0]
        marks = pair[1]
        if type(marks) is not dict or not marks or not marks.keys() <= {*_MARKS}:
            raise _malformed(at, "a launch or no-more-bets time expected")
        kept.marks[game] = {
            kind: _instant(marks[kind], f"{at}.{kind}") for kind in _MARKS if kind in marks
        }


# -- the summaries ----------------------------------------------------------------------------


def summary_snapshot(summary: Summary) -> dict[str, Any]:
    """Count, sum, min and max (null with no value) and the histogram, a
    ``[step, count]`` pair per step of the resolution seen, ascending."""
    return {
        "count": summary.count,
        "sum": summary._sum,
        "low": summary.low if summary.count else None,
        "high": summary.high if summary.count else None,
        "histogram": [[step, count] for step, count in sorted(summary._histogram.items())],
    }


def load_summary(summary: Summary, snapshot: Any, where: str) -> None:
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
    summary.count, summary._sum, summary.low, summary.high = count, total, low, high
    summary._histogram = histogram
    summary._figures = None
