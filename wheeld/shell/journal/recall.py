"""Recall and export: games from the journal with their events and the serial lines behind them.

Both read through ``JournalView``: read-only and without the state
directory's lock, so they work beside a running daemon, with the daemon
stopped or the wheel faulted.
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from typing import TYPE_CHECKING, Any

from wheeld.core.commands import MAX_GAME_ID
from wheeld.core.messages import EXPORT_FORMAT, iso_utc
from wheeld.core.signing import ChainState, digest
from wheeld.shell.journal.errors import JournalError
from wheeld.shell.journal.superseded import holds
from wheeld.shell.journal.view import JournalView, StoredFrames, frame_columns, stored_payload

if TYPE_CHECKING:
    from pathlib import Path

    from wheeld.shell.journal import JournalFrame

#: Recall's default: the last game and the nine before it.
DEFAULT_LAST = 10


@dataclass(frozen=True, slots=True)
class RecalledGame:
    """One game: its published payloads and every line that crossed the link during it."""

    game_id: int
    events: list[dict[str, Any]]
    frames: list[JournalFrame]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The game's ``<base>/game`` payloads exactly as published (signed where the table
        signs), for a consumer to verify and keep: those the journal can read."""
        return [event for event in self.events if set(event) != {"unreadable"}]

    def to_json(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "events": self.events,
            "messages": self.messages,
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
            # Host time as the events' own: ISO 8601 UTC, to the millisecond.
            yield f"    {iso_utc(frame.t)} {frame.dir} {frame.line}"


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
    if game_id is not None and not 1 <= game_id <= MAX_GAME_ID:
        # No game has such an id, and SQLite could not even compare one past 2**63 - 1.
        raise JournalError(f"{view.path}: no game {game_id} in the journal")
    superseded = view.superseded()
    if game_id is not None and holds(superseded, game_id):
        raise JournalError(
            f"{view.path}: game {game_id} was superseded: decided here but never announced;"
            f" another controller's game {game_id} stands"
        )
    # Another controller's game of that id stands: this journal's is no result of the
    # table. Left out, and as many more asked for: ``--last N`` is N games still.
    hidden = sum(high - low + 1 for low, high in superseded)
    ids = view.game_ids(min(last + hidden, MAX_GAME_ID), game_id)
    if game_id is not None and game_id not in ids:
        raise JournalError(f"{view.path}: no game {game_id} in the journal")
    ids = [gid for gid in ids if not holds(superseded, gid)][-last:]
    events = view.events(ids)
    frames = view.frames(ids)
    return [
        RecalledGame(gid, [_parsed(payload) for payload in events[gid]], frames[gid]) for gid in ids
    ]


def recall_json(path: Path, last: int, game_id: int | None) -> str:
    """The games ``recall`` asks for as the reply's JSON array, read from the journal at
    ``path``: what the daemon's recall process hands back, one string (a game at a time
    written, so its memory is one game's objects and the text)."""
    with JournalView(path) as view:
        games = recall(view, last, game_id)
    return "[" + ",".join(json.dumps(game.to_json()) for game in games) + "]"


class ExportError(Exception):
    """Nothing to export in the range asked for; the message says so in one line."""


@dataclass(slots=True)
class ExportSummary:
    """What an export wrote, counted as it was written: for the line ``export`` prints."""

    lines: int = 0
    messages: int = 0
    frames: int = 0
    games: tuple[Any, Any] = (None, None)
    #: The first and last message's ``ts``.
    since: Any = None
    until: Any = None

    def describe(self) -> str:
        first, last = self.games
        span = f"game {first}" if first == last else f"games {first}-{last}"
        return (
            f"{self.lines} lines: {span}, {self.messages} messages and {self.frames} "
            f"serial lines, {self.since} to {self.until}"
        )


def export_text(
    view: JournalView,
    *,
    from_game: int | None = None,
    to_game: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    public_key_pem: str | None = None,
    summary: ExportSummary | None = None,
    workers: int | None = None,
) -> Iterator[str]:
    """An export: a header with the chain's anchor, then each game's frames and payloads,
    as pieces of text of whole lines (each ends with a newline), in order.

    The payloads are every decision from the first game's first event to the
    last game's last one, unbroken, so ``wheeld verify --key PUB FILE`` checks
    every link between the anchor's start and end. A game is in a date range
    when its first event's ``ts`` is. Two passes over the journal, streamed:
    the first finds the span (and raises ExportError when nothing is in it),
    the second yields the text; memory does not grow with the journal.
    ``summary`` counts what was yielded.

    A year is a hundred million lines, nearly all serial lines to decode from
    their blocks: this process reads the journal (one snapshot) a run of
    decisions at a time with their games' blocks as stored, and ``workers``
    processes (by default ``EXPORT_WORKERS``, or one a core where there are
    fewer; none for a short export) decode and write them, in order, a few runs
    in flight.
    """
    first_row, last_row = _span(view, from_game, to_game, since, until)
    first, last = _parsed(view.payload(first_row)), _parsed(view.payload(last_row))
    for row, end_of in ((first_row, first), (last_row, last)):
        if "unreadable" in end_of:
            raise ExportError(f"decision row {row} does not read: {end_of['unreadable'][:200]}")
    try:
        start = ChainState(first["seq"], first["prev"])
        end = ChainState(last["seq"] + 1, digest(last))
    except (KeyError, TypeError):
        raise ExportError(
            "the journal's payloads are not signed: nothing verifiable to export"
        ) from None
    header: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "table": first.get("table"),
        "kid": first.get("kid"),
        "games": [first.get("game_id"), last.get("game_id")],
        "anchor": {"start": start.to_dict(), "end": end.to_dict()},
    }
    # Where the chain went on past another controller's message inside the span (a
    # takeover): ``wheeld verify`` tells such a jump from a gap by these, as it does
    # with the journal's own (found by an attack: the journal verified, its export not).
    floors = {
        str(seq): link for seq, link in sorted(view.floors().items()) if start.seq <= seq < end.seq
    }
    if floors:
        header["floors"] = floors
    if public_key_pem is not None:
        header["public_key"] = public_key_pem
    summary = summary if summary is not None else ExportSummary()
    summary.games = (first.get("game_id"), last.get("game_id"))
    summary.since, summary.until = first.get("ts"), last.get("ts")
    summary.lines += 1
    yield json.dumps({"export": header}) + "\n"
    runs = _runs(view, first_row, last_row)
    if workers is None:
        workers = min(EXPORT_WORKERS, os.cpu_count() or 1)
    for text, frames, messages in _written(runs, workers, last_row - first_row + 1):
        summary.frames += frames
        summary.messages += messages
        summary.lines += frames + messages
        yield text


#: Worker processes an export decodes in, at most: two keep a year within minutes, and
#: every worker is some 45 MiB more resident memory (the bound is 200 MB in all).
EXPORT_WORKERS = 2
#: Decisions a run of an export holds (some 170 games): what a worker is handed at once.
EXPORT_RUN = 512

#: A run: per decision, the game whose lines come first (or None) and the payload as
#: stored; and the lines of those games, as stored.
_Run = tuple[list[tuple[int | None, str | bytes]], dict[int, StoredFrames]]


def _runs(view: JournalView, first_row: int, last_row: int) -> Iterator[_Run]:
    """The decisions from ``first_row`` to ``last_row`` in runs, each game's lines before
    its first decision (the stored text itself, not a re-serialisation: the file holds
    what was published)."""
    written: set[int] = set()
    read = 0
    run: list[tuple[int | None, str | bytes]] = []
    games: list[int] = []
    for row_id, gid, stored in view.stored_decisions(first_row, last_row):
        read = row_id
        lines_of: int | None = None
        if gid not in written:
            if len(written) > 64:
                written.clear()  # games run in order: only the last few can come again
            written.add(gid)
            lines_of = gid
            games.append(gid)
        run.append((lines_of, stored))
        if len(run) >= EXPORT_RUN:
            yield run, view.stored_frames(games)
            run, games = [], []
    if run:
        yield run, view.stored_frames(games)
    if read != last_row:
        # A damaged page can end a read early without a word: an export is whole or fails.
        raise ExportError(f"the journal could not be read past decision row {read}")


def _written(runs: Iterator[_Run], workers: int, rows: int) -> Iterator[tuple[str, int, int]]:
    """Each run as text, in order, with its counts of frame lines and messages: in
    ``workers`` processes when there are two or more and more than one run."""
    if workers < 2 or rows <= EXPORT_RUN:
        yield from map(_run_text, runs)
        return
    # Imported here: multiprocessing is an export's, never the daemon's (its recalls
    # read in a thread), and costs start-up and memory.
    from concurrent.futures import ProcessPoolExecutor

    try:
        pool = ProcessPoolExecutor(workers)
    except OSError:  # no shared memory for the pool's locks (a read-only /dev/shm): here
        yield from map(_run_text, runs)
        return
    in_flight: deque[Future[tuple[str, int, int]]] = deque()
    with pool:
        for run in runs:
            in_flight.append(pool.submit(_run_text, run))
            if len(in_flight) > workers:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()


def _run_text(run: _Run) -> tuple[str, int, int]:
    """A run's lines (each game's serial lines, then its payload), and how many of each."""
    decisions, stored = run
    out: list[str] = []
    for gid, payload in decisions:
        if gid is not None:
            out += frame_lines(stored[gid], gid)
        out.append(stored_payload(payload))
    out.append("")
    return "\n".join(out), len(out) - 1 - len(decisions), len(decisions)


def frame_lines(stored: StoredFrames, game_id: int) -> list[str]:
    """A game's serial lines as an export's frame lines (``frame_line`` each)."""
    out: list[str] = []
    for stamps, directions, lines in frame_columns(stored):
        joined = "".join(lines)
        if len(lines) == 1 or '"' in joined or "\\" in joined:
            out += map(frame_line, stamps, directions, lines, repeat(game_id))
            continue
        # frame_line's own text for a decoded block (its times floats, nothing to escape).
        out += [
            f'{{"frame": {{"t": {t!r}, "dir": "{way}", "line": "{line}", "game_id": {game_id}}}}}'
            for t, way, line in zip(stamps, directions, lines, strict=True)
        ]
    return out


def frame_line(t: float, direction: str, line: str, game_id: int) -> str:
    """An export's frame line: ``json.dumps`` of ``{"frame": {...}}``, byte for byte.

    Written by hand because a year's export has a hundred million of them and
    ``json.dumps`` was a sixth of its time; ``json`` still writes any text that
    needs escaping (a capture line is printable ASCII, so only ``"`` and ``\\``).
    """
    if '"' in line or "\\" in line or '"' in direction:
        text = json.dumps(line)
        way = json.dumps(direction)
    else:
        text = f'"{line}"'
        way = f'"{direction}"'
    stamp = repr(t) if type(t) is float and math.isfinite(t) else json.dumps(t)
    return f'{{"frame": {{"t": {stamp}, "dir": {way}, "line": {text}, "game_id": {game_id}}}}}'


def _span(
    view: JournalView,
    from_game: int | None,
    to_game: int | None,
    since: datetime | None,
    until: datetime | None,
) -> tuple[int, int]:
    """The first and last decision rows of the games chosen."""
    first_row = last_row = None
    if from_game is not None and from_game > MAX_GAME_ID:
        # No game has such an id, and SQLite could not even compare one past 2**63 - 1.
        raise ExportError("no game in the journal is in that range")
    if to_game is not None:
        to_game = min(to_game, MAX_GAME_ID)  # every game is at or below it
    if since is None and until is None:
        first_row, last_row = view.rows_of_games(from_game, to_game)
    else:
        game: int | None = None
        chosen = False
        # Only a game's first payload is read (its ts): the others stay compressed.
        for row_id, gid, stored in view.stored_decisions():
            if gid != game:
                game = gid
                chosen = (from_game is None or gid >= from_game) and (
                    to_game is None or gid <= to_game
                )
                if chosen:
                    ts = _parsed(stored_payload(stored)).get("ts")
                    chosen = _in_period(ts, since, until)
            if chosen:
                first_row = row_id if first_row is None else first_row
                last_row = row_id
    if first_row is None or last_row is None:
        raise ExportError("no game in the journal is in that range")
    return first_row, last_row


def _in_period(ts: Any, since: datetime | None, until: datetime | None) -> bool:
    if since is None and until is None:
        return True
    try:
        at = datetime.fromisoformat(str(ts))
    except ValueError:
        return False
    return (since is None or at >= since) and (until is None or at < until)
