"""A table's statistics over its result series (``docs/statistics.md``).

Pure: fed the published ``<base>/game`` payloads, from a replay, the journal
or (later) the pipeline after each decision. It reads no clock: games per
hour come from the payloads' own ``ts``.

The chi-squared test says how far the counts per number stand from an even
wheel; a small p-value is a *deviation* worth watching, never by itself proof
of a faulty wheel. It is reported only when every expected count is at least
5 (the usual condition for the chi-squared approximation to hold).

Beside it: sliding arcs of k pockets in wheel order (an exact binomial test of
the most-hit arc, Bonferroni-corrected), serial correlation (the lag-1 Pearson
correlation of the numbers and the chi-squared of the distances between
consecutive results), phase durations, ball revolutions and rotor speed.

The parts are modules beside this one: ``tally`` (the running figures over the
series and each window), ``judgements`` (the tests over them), ``distributions``
(their p-values), ``times`` (when the games were played) and ``stats_snapshot``
(the snapshot and its checks); this module puts them together and still exports
what it always did.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wheeld.core import stats_snapshot
from wheeld.core.distributions import beta_inc, binomial_sf, chi2_sf, pearson_p_value
from wheeld.core.judgements import DEFAULT_ARCS, MIN_EXPECTED, Arcs, ChiSquared, Concentration
from wheeld.core.layout import layout_for
from wheeld.core.stats_snapshot import SNAPSHOT_VERSION
from wheeld.core.tally import FAMILIES, CountedResult, Tally, object_text
from wheeld.core.times import PAUSE_S, PHASES, RECENT_GAMES, GameTimes, Summary

__all__ = [
    "DEFAULT_ARCS",
    "DEFAULT_WINDOWS",
    "MIN_EXPECTED",
    "PAUSE_S",
    "PHASES",
    "RECENT_GAMES",
    "SNAPSHOT_VERSION",
    "Arcs",
    "ChiSquared",
    "Concentration",
    "Statistics",
    "Summary",
    "beta_inc",
    "binomial_sf",
    "chi2_sf",
    "describe",
    "pearson_p_value",
]

#: Rolling windows (last N results) reported beside the whole series.
DEFAULT_WINDOWS: tuple[int, ...] = (500, 1000)


class Statistics:
    """A table's statistics: the whole result series, rolling windows, no-spins and game rate."""

    def __init__(
        self,
        pockets: int = 37,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> None:
        if any(size < 1 for size in windows):
            raise ValueError(f"a window is at least one result: {list(windows)}")
        # A custom pocket order (wheel.pocket_order) sets the pockets and their neighbours.
        self.layout = layout_for(len(order), order) if order else layout_for(pockets)
        if any(not 1 <= k < self.layout.pockets for k in arcs):
            raise ValueError(f"an arc is 1 to {self.layout.pockets - 1} pockets: {list(arcs)}")
        self.windows = tuple(sorted(set(windows)))
        self.arcs = tuple(sorted(set(arcs)))
        self._whole = Tally(self.layout, self.arcs)
        self._recent: deque[CountedResult] = deque(maxlen=max(self.windows, default=0))
        #: Each window's tally, slid by one result per result (not recounted).
        self._window_tallies = {size: Tally(self.layout, self.arcs) for size in self.windows}
        self.no_spins: Counter[str] = Counter()
        #: Results not counted: a number this wheel does not have.
        self.ignored = 0
        #: When the games were played: phases, revolutions, rotor speed, the rate of play.
        self.times = GameTimes()

    @classmethod
    def from_events(
        cls,
        events: Iterable[Mapping[str, Any]],
        pockets: int | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> Statistics:
        """Statistics over ``<base>/game`` payloads, in the order published.

        With ``pockets`` the events are counted as they come, one at a time:
        memory stays bounded whatever the series' length. Without, a series with
        a ``"00"`` is of a double-zero wheel, any other of a single-zero one, and
        the whole series is held in a list to look for it first: pass
        ``pockets`` for a long series.
        """
        if pockets is None:
            events = list(events)
            pockets = 38 if any(event.get("number") == "00" for event in events) else 37
        statistics = cls(pockets, windows, arcs, order)
        for event in events:
            statistics.add(event)
        return statistics

    def add(self, event: Mapping[str, Any]) -> None:
        """Count one ``<base>/game`` payload; only results and no-spins are outcomes,
        launches and no-more-bets are timed for the phases.

        A result whose number is not a pocket of this wheel is counted in
        ``ignored``, never guessed at.
        """
        kind = event.get("event")
        if kind in ("spinning", "no_more_bets"):
            self.times.note_phase(event, kind)
            return
        if kind == "result":
            number = event.get("number")
            if not isinstance(number, str) or not self.layout.has_pocket(number):
                self.ignored += 1
                return
            direction = event.get("rotor_direction")
            result = CountedResult(number, direction if isinstance(direction, str) else None)
            self._whole.add(result)
            self._slide_windows(result)
        elif kind == "no_spin":
            reason = event.get("reason")
            self.no_spins[reason if isinstance(reason, str) else "unknown"] += 1
        else:
            return  # not a game event
        self.times.note_outcome(event, kind == "result")

    def _slide_windows(self, result: CountedResult) -> None:
        recent = self._recent
        held = len(recent)
        for size, tally in self._window_tallies.items():
            if held >= size:  # full: the oldest of the last ``size`` leaves
                oldest = recent[held - size]
                following = recent[held - size + 1] if size > 1 else None
                tally.remove_oldest(oldest, following)
            tally.add(result)
        recent.append(result)

    @property
    def results(self) -> int:
        return self._whole.results

    @property
    def counts(self) -> dict[str, int]:
        """Results per number, every pocket of the wheel included."""
        return {number: self._whole.counts.get(number, 0) for number in self.layout.order}

    @property
    def chi_squared(self) -> ChiSquared:
        """The test over the whole series."""
        return self._whole.chi_squared()

    def arcs_of(self, k: int) -> dict[str, Arcs]:
        """The arcs of ``k`` pockets over the whole series: all results, cw and ccw."""
        whole = self._whole
        return {name: whole.family_arcs(name, k) for name in FAMILIES}

    def sector_concentration(self, min_results: int) -> Concentration | None:
        """The most concentrated arc over every arc size and rotor direction with at
        least ``min_results`` results, its p-value multiplied by how many such
        families were judged (Bonferroni again); None when none has enough."""
        judged = [
            (arcs, family)
            for k in self.arcs
            for family, arcs in self.arcs_of(k).items()
            if arcs.results >= min_results and arcs.p_value is not None
        ]
        if not judged:
            return None
        arcs, family = min(judged, key=lambda item: item[0].p_value or 0.0)
        assert arcs.p_value is not None
        p_value = min(1.0, arcs.p_value * len(judged))
        return Concentration(family, arcs.most_hit, arcs.count, arcs.results, p_value)

    def recent_rate(self) -> dict[str, Any]:
        """The rate of play over the last games (``GameTimes.recent_rate``)."""
        return self.times.recent_rate()

    def window(self, size: int) -> dict[str, Any]:
        """The tally over the last ``size`` results (fewer while the series is shorter)."""
        if size not in self.windows:
            raise ValueError(f"no window of {size} results: the windows are {list(self.windows)}")
        return self._window_tallies[size].to_json()

    def to_json(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.to_json_text())
        return loaded

    def to_json_text(self, **extra: Any) -> str:
        """``to_json`` as JSON text, as ``json.dumps`` writes it, with ``extra``'s members
        (new names) after the figures': what ``<base>/stats`` publishes.

        Each part is serialised once: an arc no outcome moved keeps its text, and
        nothing is encoded twice to put the whole together.
        """
        dumps = json.dumps
        games = self.results + sum(self.no_spins.values())
        whole = self._whole.json_members()
        members = [
            ("pockets", dumps(self.layout.pockets)),
            ("games", dumps(games)),
            *whole,
            ("windows", self._windows_text(whole)),
            (
                "no_spins",
                dumps(
                    {
                        "count": sum(self.no_spins.values()),
                        "by_reason": {
                            reason: {"count": count, "rate": round(count / games, 6)}
                            for reason, count in sorted(self.no_spins.items())
                        },
                    }
                ),
            ),
            *self.times.json_members(),
            ("ignored", dumps(self.ignored)),
        ]
        clash = extra.keys() & {name for name, _ in members}
        if clash:
            raise ValueError(f"already a member of the figures: {sorted(clash)}")
        return object_text([*members, *((name, dumps(value)) for name, value in extra.items())])

    def _windows_text(self, whole: list[tuple[str, str]]) -> str:
        """Each window's figures. A window not yet full holds every result counted, in
        the same order: its figures are the whole series', written once for both."""
        whole_text: str | None = None
        texts = []
        for size in self.windows:
            tally = self._window_tallies[size]
            if tally.results == self._whole.results:
                whole_text = whole_text or object_text(whole)
                texts.append((str(size), whole_text))
            else:
                texts.append((str(size), tally.to_json_text()))
        return object_text(texts)

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to go on exactly from here, in plain JSON values
        (``json.loads(json.dumps(...))`` gives it back equal), its size bounded by the
        wheel and the largest window: ``restore`` takes it up (``stats_snapshot``)."""
        return stats_snapshot.snapshot(self)

    @classmethod
    def restore(
        cls,
        snapshot: Any,
        *,
        pockets: int | None = None,
        windows: Sequence[int] = DEFAULT_WINDOWS,
        arcs: Sequence[int] = DEFAULT_ARCS,
        order: Sequence[str] | None = None,
    ) -> Statistics:
        """The statistics ``snapshot`` was taken of, exactly: the same figures now,
        and, fed the same events, the same figures and the same next snapshot.

        ``pockets`` (None: the snapshot's), ``windows`` and ``arcs`` are the ones
        wanted; a snapshot of others, of another version, malformed, or whose
        parts no one series gives, is refused with a ValueError of one line (and
        never another exception, whatever ``snapshot`` holds): count the series
        again then.
        """
        return stats_snapshot.restore(cls, snapshot, pockets, windows, arcs, order)


def describe(statistics: Statistics) -> list[str]:
    """The statistics as a readable table, a line per row."""
    data = statistics.to_json()
    lines = [f"{data['pockets']}-pocket wheel: {data['games']} games, {data['results']} results"]
    lines += _describe_chi(data["chi_squared"], "whole series")
    for size, window in data["windows"].items():
        lines += _describe_chi(window["chi_squared"], f"last {size}")
    lines.append("")
    lines.append("number  count")
    lines += [f"{number:>6}  {count:5}" for number, count in data["counts"].items()]
    lines.append("")
    for name, tally in data["chances"].items():
        parts = [
            f"{key} {value['count']} ({'-' if value['percent'] is None else value['percent']}%)"
            for key, value in tally.items()
        ]
        lines.append(f"{name:>8}: " + ", ".join(parts))
    if data["sectors"] is not None:
        lines.append("")
        lines.append("sector      all    cw   ccw")
        for name, tally in data["sectors"].items():
            lines.append(f"{name:<9} {tally['all']:5} {tally['cw']:5} {tally['ccw']:5}")
    repeats = data["repeats"]
    lines.append("")
    lines.append(
        f"repeats: {repeats['count']} of {repeats['pairs']} "
        f"(an even wheel: {repeats['expected_rate']:.4f} of them)"
    )
    for direction, histogram in data["distance"].items():
        top = sorted(histogram.items(), key=lambda item: -item[1])[:5]
        lines.append(
            f"distance from the previous result ({direction}), most frequent: "
            + ", ".join(f"{step} x{count}" for step, count in top)
        )
    lines += _describe_arcs(data["arcs"])
    lines += _describe_serial(data["serial"])
    lines.append("")
    spins = data["no_spins"]
    lines.append(f"no-spins: {spins['count']}")
    lines += [
        f"  {reason}: {value['count']} ({100 * value['rate']:.2f}% of games)"
        for reason, value in spins["by_reason"].items()
    ]
    rate = data["games_per_hour"]
    if rate["rate"] is not None:
        hours = f"{rate['hours']:.1f}"
        lines.append(f"games per hour: {rate['rate']} ({rate['games']} games in {hours} h)")
    recent = rate["recent"]
    if recent["rate"] is not None:
        lines.append(
            f"games per hour of play, last {recent['games']} games: {recent['rate']} "
            f"(pauses over {PAUSE_S / 60:.0f} min left out)"
        )
    lines.append("")
    lines.append("seconds                 games   mean median    min    max")
    for name, summary in data["phases"].items():
        lines.append(_describe_summary(name.replace("_", " "), summary))
    if data["pauses"]:
        lines.append(f"pauses before a launch (over {PAUSE_S / 60:.0f} min): {data['pauses']}")
    lines.append(_describe_summary("ball revolutions", data["revolutions"]))
    lines.append(_describe_summary("rotor rpm at launch", data["rotor_rpm"]))
    if data["ignored"]:
        lines.append(f"ignored: {data['ignored']} results with a number this wheel does not have")
    return lines


def _describe_summary(label: str, summary: dict[str, Any]) -> str:
    if not summary["count"]:
        return f"{label:<22} {0:6}  (not reported)"
    figures = " ".join(f"{summary[key]:6.1f}" for key in ("mean", "median", "min", "max"))
    return f"{label:<22} {summary['count']:6} {figures}"


def _describe_arcs(arcs: dict[str, dict[str, Any]]) -> list[str]:
    lines = [""]
    for k, families in arcs.items():
        for family, arc in families.items():
            top = arc["most_hit"]
            if not arc["results"]:
                continue
            verdict = (
                "a concentration worth watching"
                if top["p_value"] < 0.01
                else "no significant concentration"
            )
            lines.append(
                f"arcs of {k} ({family}): most hit {'-'.join(top['pockets'])}, {top['count']} "
                f"of {arc['results']} (expected {arc['expected']:.1f}), "
                f"p-value {top['p_value']:.4g}: {verdict}"
            )
    return lines


def _describe_serial(serial: dict[str, Any]) -> list[str]:
    correlation = serial["correlation"]
    if correlation["r"] is None:
        lines = [f"lag-1 correlation of the numbers: not reported: {correlation['reason']}"]
    else:
        lines = [
            f"lag-1 correlation of the numbers: r {correlation['r']:.4f}, "
            f"p-value {correlation['p_value']:.4g} over {serial['pairs']} pairs"
        ]
    return lines + _describe_chi(serial["distance_chi_squared"], "distances between results")


def _describe_chi(chi: dict[str, Any], label: str) -> list[str]:
    if chi["value"] is None:
        return [f"chi-squared ({label}): not reported: {chi['reason']}"]
    verdict = (
        "a deviation from an even wheel worth watching"
        if chi["p_value"] < 0.01
        else "no significant deviation"
    )
    return [
        f"chi-squared ({label}): {chi['value']:.3f}, df {chi['df']}, "
        f"p-value {chi['p_value']:.4g} over {chi['games']} games: {verdict}"
    ]
