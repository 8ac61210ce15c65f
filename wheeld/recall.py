"""Recall and export: games from the journal with their events and the serial lines behind them.

Both read through ``JournalView``: read-only and without the state
directory's lock, so they work beside a running daemon, with the daemon
stopped or the wheel faulted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from wheeld.journal import JournalError
from wheeld.signing import ChainState, digest
from wheeld.verify import EXPORT_FORMAT

if TYPE_CHECKING:
    from wheeld.journal import JournalFrame, JournalView

#: Recall's default: the last game and the nine before it.
DEFAULT_LAST = 10


@dataclass(frozen=True, slots=True)
class RecalledGame:
    """One game: its published payloads and every line that crossed the link during it."""

    game_id: int
    events: list[dict[str, Any]]
    frames: list[JournalFrame]

    def to_json(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "events": self.events,
            "frames": [{"t": f.t, "dir": f.dir, "line": f.line} for f in self.frames],
        }

    def describe(self) -> Iterator[str]:
        """The game as readable lines: a heading, its events, then its frames."""
        yield f"game {self.game_id}: {_outcome(self.events)}"
        for event in self.events:
            details = ", ".join(
                f"{key} {value}"
                for key, value in event.items()
                if key not in _PLAIN and value is not None
            )
            yield f"  {event.get('ts', '?')}  {event.get('event', '?')}" + (
                f"  ({details})" if details else ""
            )
        for frame in self.frames:
            yield f"    {frame.t:.3f} {frame.dir} {frame.line}"


#: Members the readable recall leaves out: the same in every event, or the chain's.
_PLAIN = frozenset({"event", "game_id", "table", "ts", "seq", "prev", "kid", "sig"})


def _outcome(events: list[dict[str, Any]]) -> str:
    for event in events:
        if event.get("event") == "result":
            return f"result {event.get('number')} {event.get('color', '')}".rstrip()
        if event.get("event") == "no_spin":
            return f"no spin ({event.get('reason')})"
    return "in progress"


def _parsed(payload: str) -> dict[str, Any]:
    """A stored payload; one that does not read is shown as such, not dropped."""
    try:
        value = json.loads(payload)
    except ValueError:
        return {"unreadable": payload}
    return value if isinstance(value, dict) else {"unreadable": payload}


def recall(
    view: JournalView, last: int = DEFAULT_LAST, game_id: int | None = None
) -> list[RecalledGame]:
    """The last ``last`` games (ending with ``game_id`` when given), in play order."""
    ids = view.game_ids(last, game_id)
    if game_id is not None and game_id not in ids:
        raise JournalError(f"{view.path}: no game {game_id} in the journal")
    events = view.events(ids)
    frames = view.frames(ids)
    return [
        RecalledGame(gid, [_parsed(payload) for payload in events[gid]], frames[gid]) for gid in ids
    ]


class ExportError(Exception):
    """Nothing to export in the range asked for; the message says so in one line."""


def export_lines(
    view: JournalView,
    *,
    from_game: int | None = None,
    to_game: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    public_key_pem: str | None = None,
) -> list[str]:
    """An export: a header with the chain's anchor, then each game's payloads and frames.

    The payloads are every decision from the first game's first event to the
    last game's last one, unbroken, so ``wheeld verify --key PUB FILE`` checks
    every link between the anchor's start and end. A game is in a date range
    when its first event's ``ts`` is.
    """
    rows = view.decisions()
    games: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for row_id, gid, payload in rows:
        games.setdefault(gid, []).append((row_id, _parsed(payload)))
    chosen = [
        gid
        for gid, events in games.items()
        if (from_game is None or gid >= from_game)
        and (to_game is None or gid <= to_game)
        and _in_period(events[0][1].get("ts"), since, until)
    ]
    if not chosen:
        raise ExportError("no game in the journal is in that range")
    first_row = min(games[gid][0][0] for gid in chosen)
    last_row = max(games[gid][-1][0] for gid in chosen)
    # The stored text itself, not a re-serialisation: the file holds what was published.
    span = [(gid, payload) for row_id, gid, payload in rows if first_row <= row_id <= last_row]
    first, last = _parsed(span[0][1]), _parsed(span[-1][1])
    try:
        start = ChainState(first["seq"], first["prev"])
        end = ChainState(last["seq"] + 1, digest(last))
    except (KeyError, TypeError):
        raise ExportError(
            "the journal's payloads are not signed: nothing verifiable to export"
        ) from None
    ids = sorted({gid for gid, _ in span}, key=[gid for gid, _ in span].index)
    frames = view.frames(ids)
    header: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "table": first.get("table"),
        "kid": first.get("kid"),
        "games": [ids[0], ids[-1]],
        "anchor": {"start": start.to_dict(), "end": end.to_dict()},
    }
    if public_key_pem is not None:
        header["public_key"] = public_key_pem
    out = [json.dumps({"export": header})]
    written: set[int] = set()
    for gid, payload in span:
        if gid not in written:
            written.add(gid)
            out += [
                json.dumps({"frame": {"t": f.t, "dir": f.dir, "line": f.line, "game_id": gid}})
                for f in frames[gid]
            ]
        out.append(payload)
    return out


def _in_period(ts: Any, since: datetime | None, until: datetime | None) -> bool:
    if since is None and until is None:
        return True
    try:
        at = datetime.fromisoformat(str(ts))
    except ValueError:
        return False
    return (since is None or at >= since) and (until is None or at < until)
