"""What the board shows, folded from the table's MQTT messages. Pure: no I/O.

``Board.apply(message)`` takes each checked message (``wheeld.consumer``),
``Board.feed(up)`` the state of the broker connection; ``snapshot()`` is the
JSON the page renders. Starts from the retained ``history``, ``result`` and
``status``, then follows ``game`` live.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from wheeld.consumer import (
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
from wheeld.layout import DOUBLE_ZERO
from wheeld.marquee.labels import LABELS, REASONS


def _color(number: str) -> str:
    return DOUBLE_ZERO.facts(number).color if DOUBLE_ZERO.has_pocket(number) else "green"


@dataclass
class Board:
    """The marquee's state for one table."""

    base: str
    language: str = "es"
    shown: int = 20
    stats_games: int = 100
    table: dict[str, Any] = field(default_factory=dict)
    #: What ``<base>/status`` said; None until it says anything.
    online: bool | None = None
    #: Whether the broker connection is up: without it nothing shown is current.
    connected: bool = True
    closed: bool = False
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
            case LatestResult(number=number, game_id=game_id):
                # The history list comes with its own topic.
                self.last = number
                self._seen.first_time(game_id)
            case TableMessage(state=state):
                self.closed = state == "closed"
            case SpinningMessage():
                self.phase = "spinning"
                self.no_spin = None
            case NoMoreBetsMessage():
                self.phase = "no_more_bets"
            case ResultMessage(number=number, game_id=game_id) if self._seen.first_time(game_id):
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
        """Percentages and hot/cold numbers over the last ``stats_games`` results."""
        window = self.history[: self.stats_games]
        total = len(window)
        if not total:
            return {"games": 0}

        def pct(count: int) -> int:
            return round(100 * count / total)

        colours = Counter(_color(n) for n in window)
        numbered = [int(n) for n in window if n not in ("0", "00")]
        frequency = Counter(window)
        pockets = [str(n) for n in range(37)] + (["00"] if "00" in window else [])
        by_heat = sorted(pockets, key=lambda p: (-frequency[p], int(p) if p != "00" else -1))
        by_cold = sorted(pockets, key=lambda p: (frequency[p], int(p) if p != "00" else -1))
        return {
            "games": total,
            "red": pct(colours["red"]),
            "black": pct(colours["black"]),
            "green": pct(colours["green"]),
            "odd": pct(sum(1 for n in numbered if n % 2)),
            "even": pct(sum(1 for n in numbered if not n % 2)),
            "dozens": [pct(sum(1 for n in numbered if (n - 1) // 12 == d)) for d in range(3)],
            "hot": [{"number": p, "color": _color(p)} for p in by_heat[:5]],
            "cold": [{"number": p, "color": _color(p)} for p in by_cold[:5]],
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything the page needs, as JSON-ready data."""
        language = self.language if self.language in LABELS else "es"
        return {
            "table": self.table,
            "labels": LABELS[language],
            # False, not None, without a broker: the page shows "offline".
            "online": self.online if self.connected else False,
            "closed": self.closed,
            "phase": self.phase,
            "last": None
            if self.last is None
            else {"number": self.last, "color": _color(self.last)},
            "history": [{"number": n, "color": _color(n)} for n in self.history[: self.shown]],
            "no_spin": None
            if self.no_spin is None
            else {
                "reason": self.no_spin,
                "text": REASONS[language].get(self.no_spin, self.no_spin),
            },
            "stats": self.stats(),
        }
