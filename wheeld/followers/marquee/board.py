"""What the board shows, folded from the table's MQTT messages. Pure: no I/O.

``Board.apply(message)`` takes each checked message (``wheeld.followers.consumer``),
``Board.feed(up)`` the state of the broker connection; ``snapshot()`` is the
JSON the page renders. Starts from the retained ``history``, ``result`` and
``status``, then follows ``game`` live.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wheeld.core.layout import QUADRUPLE_ZERO, NumberFacts
from wheeld.core.rules import MIN_BALL_REVOLUTIONS_FLOOR
from wheeld.followers.consumer import (
    HistoryMessage,
    LatestResult,
    Message,
    NoMoreBetsMessage,
    NoSpinMessage,
    ResultMessage,
    SeenGames,
    SpinningMessage,
    StatusMessage,
    TableMessage,
)
from wheeld.followers.marquee.labels import LABELS, reason_text

#: How many hot and how many cold numbers the board names.
HEAT_SHOWN = 5


def _color(number: str) -> str:
    return QUADRUPLE_ZERO.facts(number).color if QUADRUPLE_ZERO.has_pocket(number) else "green"


def _percent(count: int, total: int) -> int:
    return round(100 * count / total)


def statistics(numbers: list[str], min_games: int) -> dict[str, Any]:
    """Percentages and hot/cold numbers over ``numbers``, newest first.

    Percentages are of all the games, zeros included, so red + black + zero
    (and odd + even + zero, low + high + zero) make 100 up to rounding.

    Hot and cold are named only from drawn numbers, each with its count, and
    only from ``min_games`` games on: before that ``hot`` and ``cold`` are
    empty and ``heat_after`` says how many games they wait for. Hot: the
    highest counts, a tie going to the more recently drawn. Cold: among the
    rest, only counts below every hot one (a number drawn as often as a hot
    one is not cold), lowest first, a tie going to the one drawn longest ago.
    So no number is ever both, and a never-drawn one is neither.
    """
    total = len(numbers)
    if not total:
        return {"games": 0, "hot": [], "cold": [], "heat_after": min_games}
    facts = [QUADRUPLE_ZERO.facts(n) for n in numbers if QUADRUPLE_ZERO.has_pocket(n)]

    def share(predicate: Callable[[NumberFacts], bool]) -> int:
        return _percent(sum(1 for f in facts if predicate(f)), total)

    dozens = Counter(f.dozen for f in facts)
    columns = Counter(f.column for f in facts)

    heat: dict[str, list[Any]] = {"hot": [], "cold": []}
    if total >= min_games:
        counts = Counter(numbers)
        # Index of the newest draw: history is newest first, and dicts keep
        # the first insertion.
        newest = {n: i for i, n in reversed(list(enumerate(numbers)))}
        hot = sorted(counts, key=lambda n: (-counts[n], newest[n]))[:HEAT_SHOWN]
        floor = min(counts[n] for n in hot)
        rest = [n for n in counts if counts[n] < floor]
        cold = sorted(rest, key=lambda n: (counts[n], -newest[n]))[:HEAT_SHOWN]
        heat = {
            key: [{"number": n, "color": _color(n), "count": counts[n]} for n in chosen]
            for key, chosen in (("hot", hot), ("cold", cold))
        }
    return {
        "games": total,
        "red": share(lambda f: f.color == "red"),
        "black": share(lambda f: f.color == "black"),
        "green": share(lambda f: f.color == "green"),
        "odd": share(lambda f: f.parity == "odd"),
        "even": share(lambda f: f.parity == "even"),
        "low": share(lambda f: f.half == "low"),
        "high": share(lambda f: f.half == "high"),
        "dozens": [_percent(dozens[d], total) for d in (1, 2, 3)],
        "columns": [_percent(columns[c], total) for c in (1, 2, 3)],
        **heat,
        "heat_after": None if total >= min_games else min_games,
    }


@dataclass
class Board:
    """The marquee's state for one table."""

    base: str
    language: str = "es"
    #: How many of the last numbers the strip holds (``marquee.history_shown``).
    shown: int = 18
    stats_games: int = 100
    #: Games before hot and cold numbers are shown (``marquee.stats_min_games``).
    stats_min_games: int = 37
    table: dict[str, Any] = field(default_factory=dict)
    #: ``rules.min_ball_revolutions``: the no-spin reason names the table's own minimum.
    min_ball_revolutions: int = MIN_BALL_REVOLUTIONS_FLOOR
    #: What ``<base>/status`` said; None until it says anything.
    online: bool | None = None
    #: Whether the broker connection is up: without it nothing shown is current.
    connected: bool = True
    closed: bool = False
    #: The last results ``<base>/table`` said, newest first: shown on the closed screen.
    closed_numbers: list[str] = field(default_factory=list)
    phase: str = "bets_open"
    last: str | None = None
    history: list[str] = field(default_factory=list)
    no_spin: str | None = None
    version: int = 0
    #: The results' game ids over the history window: a repeat is not a new number.
    _seen: SeenGames = field(init=False)

    def __post_init__(self) -> None:
        self._seen = SeenGames(self._window)

    @property
    def _window(self) -> int:
        """How many numbers the board keeps: for the list shown and for the statistics."""
        return max(self.stats_games, self.shown)

    def apply(self, message: Message) -> bool:
        """Fold one message in; True when the board changed."""
        before = self.snapshot()
        match message:
            case StatusMessage(state=state):
                self.online = state == "online"
            case HistoryMessage(numbers=numbers):
                self.history = numbers[: self._window]
                if self.history and self.last is None:
                    self.last = self.history[0]
            case LatestResult(number=number, game_id=game_id, epoch=epoch):
                # The history list comes with its own topic.
                self.last = number
                self._seen.first_time(game_id, epoch)
            case TableMessage(state=state, last_numbers=numbers):
                self.closed = state == "closed"
                self.closed_numbers = list(numbers[:3])
            case SpinningMessage():
                self.phase = "spinning"
                self.no_spin = None
            case NoMoreBetsMessage():
                self.phase = "no_more_bets"
            case ResultMessage(number=number, game_id=game_id, epoch=epoch) if (
                self._seen.first_time(game_id, epoch)
            ):
                # A game seen before is published again, not played again: it
                # changes nothing (not the last number, not the phase).
                self.phase = "bets_open"
                self.no_spin = None
                self.history.insert(0, number)
                del self.history[self._window :]
                self.last = number
            case NoSpinMessage(reason=reason):
                self.phase = "bets_open"
                self.no_spin = reason
        return self._changed(before)

    def feed(self, up: bool) -> bool:
        """The broker connection went (``up`` False) or came back; True when the board changed."""
        before = self.snapshot()
        self.connected = up
        if not up:
            # Whatever the daemon said is stale now: on reconnect the retained
            # status says it again.
            self.online = None
        return self._changed(before)

    def _changed(self, before: dict[str, Any]) -> bool:
        changed = self.snapshot() != before
        if changed:
            self.version += 1
        return changed

    def stats(self) -> dict[str, Any]:
        """The statistics over the last ``stats_games`` results (see ``statistics``)."""
        return statistics(
            self.history[: self.stats_games], min(self.stats_min_games, self.stats_games)
        )

    def snapshot(self) -> dict[str, Any]:
        """Everything the page needs, as JSON-ready data."""
        language = self.language if self.language in LABELS else "es"
        return {
            "table": self.table,
            "labels": LABELS[language],
            # False, not None, without a broker: the page shows "offline".
            "online": self.online if self.connected else False,
            "closed": self.closed,
            # "anunciar las tres (3) últimas lanzadas": the closed screen shows them.
            "closed_numbers": [{"number": n, "color": _color(n)} for n in self.closed_numbers],
            "phase": self.phase,
            "last": None
            if self.last is None
            else {"number": self.last, "color": _color(self.last)},
            "history": [{"number": n, "color": _color(n)} for n in self.history[: self.shown]],
            # The strip is cut into this many rows, so a short history does not
            # swell and a long one keeps its size.
            "history_shown": self.shown,
            "no_spin": None
            if self.no_spin is None
            else {
                "reason": self.no_spin,
                "text": reason_text(language, self.no_spin, self.min_ball_revolutions),
            },
            "stats": self.stats(),
        }
