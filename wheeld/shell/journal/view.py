"""A journal opened read-only: what recall, verify, export and stats read.

It takes no lock and writes nothing, so it works beside a running daemon
(which holds the lock) and with the daemon stopped; everything it reads comes
from one snapshot. Every reader streams: memory does not grow with the journal.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import repeat
from operator import truediv
from pathlib import Path
from typing import Any, NamedTuple

from wheeld.core.signing import ChainState
from wheeld.shell.journal.chain import BROKEN, CHAINED, ChainWalk, Walker, walk
from wheeld.shell.journal.codec import BlockLine, decode_columns, unpack_payload
from wheeld.shell.journal.errors import JournalError, unreadable
from wheeld.shell.journal.frames import JournalFrame, iter_blocks
from wheeld.shell.journal.schema import expected_tables, tables
from wheeld.shell.journal.superseded import SUPERSEDED_KEY, Ranges
from wheeld.shell.journal.superseded import parse as parse_ranges

#: Same bound as the engine's stored integers: exact in every JSON reader.
_GAME_ID_LIMIT = 1 << 53


class StoredLine(NamedTuple):
    """A serial line kept a row a line (the open block's tail, or an older wheeld's frames)."""

    t: float
    dir: str
    line: str


class StoredBlock(NamedTuple):
    """A game's sealed block as stored: decoded by whoever formats it (export, in a worker)."""

    id: int
    lead: int
    data: bytes


#: Where a game's lines are kept, in their order: rows and blocks as read, not yet decoded.
StoredFrames = list[StoredLine | StoredBlock]


class JournalView:
    """A journal opened read-only and without the lock, in one snapshot."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            if not path.is_file():
                raise JournalError(f"{path}: no journal there")
        except OSError as exc:  # a directory it may not enter, a name too long
            raise JournalError(f"{path}: cannot look at it: {exc.strerror or exc}") from None
        try:
            self._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            self._db.isolation_level = None
            found = tables(self._db)
            self._db.execute("BEGIN")  # one snapshot for every read that follows
        except sqlite3.Error as exc:
            raise unreadable(path, exc) from None
        expected = expected_tables()
        if not found.keys() & expected.keys():
            raise JournalError(f"{path}: not a wheeld journal")
        if "frame_blocks" not in found:
            raise JournalError(
                f"{path}: written by an older wheeld: let the daemon open it once to upgrade it"
            )
        #: The chains this journal has (an upgraded one may keep an older wheeld's frames).
        self.chains = [table for table in CHAINED if table in found]
        self._legacy = "frames" in found
        #: A journal from before the alarms table reads as one without alarms.
        self._has_alarms = "alarms" in found
        if any(found.get(name) != columns for name, columns in expected.items() if name in found):
            raise JournalError(f"{path}: not a wheeld journal of this version")

    def close(self) -> None:
        self._db.close()

    def interrupt(self) -> None:
        """Stop whatever read is under way, in any thread: it fails as one that cannot read."""
        self._db.interrupt()

    def __enter__(self) -> JournalView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def _get(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    def walks(self, tables: Sequence[str] | None = None) -> dict[str, ChainWalk]:
        """Every hash chain (or those of ``tables`` this journal has) walked whole, by
        table (each walk streams its rows)."""
        wanted = self.chains if tables is None else [t for t in self.chains if t in tables]
        with self.reading():
            return {table: walk(self._db, table) for table in wanted}

    def walker(self, table: str) -> Walker:
        """``table``'s chain to walk a row at a time, in this snapshot, its hashes checked
        by the caller; read it within ``reading``."""
        with self.reading():
            return Walker(self._db, table)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Around reads made through the view (a ``walker``'s rows): a database that
        cannot be read is a ``JournalError``, as from the view's own reads."""
        try:
            yield
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def broken_segments(self) -> list[str]:
        """The breaks start-ups found and began new segments after, one line each, oldest first."""
        rows = self._read(
            "SELECT at, after_id, problem FROM anchors WHERE reason = ? ORDER BY id", (BROKEN,)
        )
        return [
            f"{problem} (found at start-up at {_iso(at)}; a new segment began after row {after})"
            for at, after, problem in rows
        ]

    def decisions(
        self, first: int = 0, last: int = _GAME_ID_LIMIT
    ) -> Iterator[tuple[int, int, str]]:
        """The decisions kept (rows ``first`` to ``last``): (row id, game id, payload), in the
        order decided, streamed."""
        try:
            for row_id, game_id, payload in self._db.execute(
                "SELECT id, game_id, payload FROM decisions WHERE id BETWEEN ? AND ? ORDER BY id",
                (first, last),
            ):
                yield row_id, game_id, stored_payload(payload)
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def stored_decisions(
        self, first: int = 0, last: int = _GAME_ID_LIMIT
    ) -> Iterator[tuple[int, int, str | bytes]]:
        """The decisions of rows ``first`` to ``last`` as stored (a payload still compressed,
        for a worker to read), in the order decided, streamed."""
        try:
            yield from self._db.execute(
                "SELECT id, game_id, payload FROM decisions WHERE id BETWEEN ? AND ? ORDER BY id",
                (first, last),
            )
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def payload(self, row_id: int) -> str:
        """One decision's payload, by its row id."""
        rows = self._read("SELECT payload FROM decisions WHERE id = ?", (row_id,))
        if not rows:
            raise JournalError(f"{self.path}: no decision row {row_id}")
        return stored_payload(rows[0][0])

    def rows_of_games(
        self, first_game: int | None, last_game: int | None
    ) -> tuple[int | None, int | None]:
        """The first and last decision rows of the games in a range (indexed), or Nones."""
        row = self._read(
            "SELECT MIN(id), MAX(id) FROM decisions WHERE game_id BETWEEN ? AND ?",
            (first_game if first_game is not None else 0, last_game or _GAME_ID_LIMIT),
        )[0]
        return row[0], row[1]

    def epoch(self) -> str | None:
        """The journal's epoch (None for a journal no wheeld of this version has opened)."""
        return self._get("epoch")

    def chain_state(self) -> ChainState | None:
        """Where the message chain stood at the last decision, or None when never stored."""
        value = self._get("chain")
        if value is None:
            return None
        try:
            return ChainState.from_dict(json.loads(value))
        except (ValueError, AttributeError):
            raise JournalError(f"{self.path}: the stored chain state is malformed") from None

    def floors(self) -> dict[int, str]:
        """Where the chain was moved on past a seq another journal published: seq -> its digest."""
        rows = self._read("SELECT after_id, hash FROM anchors WHERE chain = 'messages'")
        return {seq: link for seq, link in rows if type(seq) is int and isinstance(link, str)}

    def superseded(self) -> Ranges:
        """The games decided here that another controller's went on past (``superseded``)."""
        return parse_ranges(self._get(SUPERSEDED_KEY))

    def game_ids(self, last: int, game_id: int | None = None) -> list[int]:
        """The last ``last`` games (ending with ``game_id`` if given), in play order."""
        bound = game_id if game_id is not None else _GAME_ID_LIMIT
        rows = self._read(
            "SELECT DISTINCT game_id FROM decisions WHERE game_id <= ?"
            " ORDER BY game_id DESC LIMIT ?",
            (bound, last),
        )
        return [row[0] for row in reversed(rows)]

    def events(self, game_ids: Sequence[int]) -> dict[int, list[str]]:
        """Each game's published payloads, in order."""
        found: dict[int, list[str]] = {game_id: [] for game_id in game_ids}
        if not game_ids:
            return found
        for game_id, payload in self._read(
            f"SELECT game_id, payload FROM decisions WHERE game_id IN ({_marks(game_ids)})"
            " ORDER BY id",
            tuple(game_ids),
        ):
            found[game_id].append(stored_payload(payload))
        return found

    def wheel_pockets(self) -> int | None:
        """The pockets the retained ``<base>/wheel`` message says, or None."""
        for (payload,) in self._read("SELECT payload FROM retained WHERE topic LIKE '%/wheel'"):
            try:
                value = json.loads(payload)
            except ValueError:
                continue
            pockets = value.get("pockets") if isinstance(value, dict) else None
            if type(pockets) is int and 37 <= pockets <= 40:
                return int(pockets)
        return None

    def statistics(self) -> tuple[dict[str, Any] | None, int]:
        """The statistics snapshot the daemon kept, and the last decision row it counts."""
        value = self._get("statistics")
        if value is None:
            return None, 0
        try:
            stored = json.loads(value)
            last = self._read("SELECT MAX(id) FROM decisions")[0][0] or 0
            after = stored["after"]
            if type(after) is int and 0 <= after <= last and isinstance(stored["snapshot"], dict):
                return stored["snapshot"], after
        except (ValueError, TypeError, KeyError):
            pass
        return None, 0

    def decision_payloads(self) -> Iterator[str]:
        """Every decision's payload, in the order decided, streamed: a long journal is
        never held whole in memory. Read it again for the same rows."""
        return self.decisions_after(0)

    def decisions_after(self, row_id: int) -> Iterator[str]:
        """The payloads of the decisions after row ``row_id``, oldest first, streamed."""
        try:
            for (payload,) in self._db.execute(
                "SELECT payload FROM decisions WHERE id > ? ORDER BY id", (row_id,)
            ):
                yield stored_payload(payload)
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def alarms(self) -> list[tuple[int, float, str, str, str]]:
        """Every alarm kept: (row id, at, code, state, payload), oldest first."""
        if not self._has_alarms:
            return []
        return [
            tuple(row)
            for row in self._read("SELECT id, at, code, state, payload FROM alarms ORDER BY id")
        ]

    def blocks(self) -> Iterator[list[tuple[BlockLine, int | None]]]:
        """Every sealed frame block's lines with their games, oldest first, a block at a time."""
        try:
            yield from iter_blocks(self._db)
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None
        except ValueError as exc:
            raise JournalError(f"{self.path}: a frame block does not read: {exc}") from None

    def frames(self, game_ids: Sequence[int]) -> dict[int, list[JournalFrame]]:
        """The lines that crossed the link during each game, in order."""
        return {
            game_id: journal_frames(stored, game_id)
            for game_id, stored in self.stored_frames(game_ids).items()
        }

    def stored_frames(self, game_ids: Sequence[int]) -> dict[int, StoredFrames]:
        """Where each game's lines are kept, in order: an older wheeld's rows, the game's
        blocks (as stored), then the open block's rows; read in one query each."""
        found: dict[int, StoredFrames] = {game_id: [] for game_id in game_ids}
        if not game_ids:
            return found
        marks, ids = _marks(game_ids), tuple(game_ids)
        if self._legacy:
            for t, direction, line, game_id in self._read(
                f"SELECT t, dir, line, game_id FROM frames WHERE game_id IN ({marks}) ORDER BY id",
                ids,
            ):
                found[game_id].append(StoredLine(t, direction, line))
        for block_id, game_id, lead, data in self._read(
            f"SELECT id, game_id, lead, data FROM frame_blocks WHERE game_id IN ({marks})"
            " ORDER BY id",
            ids,
        ):
            found[game_id].append(StoredBlock(block_id, lead, data))
        for t, direction, line, game_id in self._read(
            f"SELECT t, dir, line, game_id FROM frame_tail WHERE game_id IN ({marks}) ORDER BY id",
            ids,
        ):
            found[game_id].append(StoredLine(round(t, 3), direction, line))
        return found


def journal_frames(stored: StoredFrames, game_id: int) -> list[JournalFrame]:
    """A game's lines from where they are kept."""
    return [
        JournalFrame(t, direction, line, game_id)
        for stamps, directions, lines in frame_columns(stored)
        for t, direction, line in zip(stamps, directions, lines, strict=True)
    ]


def frame_columns(stored: StoredFrames) -> Iterator[tuple[list[Any], list[str], list[str]]]:
    """Each piece of a game's lines (a row, or a block decoded but its lead) as columns:
    host times (s), directions, lines. A damaged block costs its own lines, said where
    they would be (direction ``!``), not the rest."""
    for kept in stored:
        if isinstance(kept, StoredLine):
            yield [kept.t], [kept.dir], [kept.line]
            continue
        try:
            times, directions, lines = decode_columns(kept.data, kept.lead)
        except ValueError as exc:
            yield [0.0], ["!"], [f"frame block {kept.id} does not read: {exc}"]
            continue
        yield list(map(truediv, times, repeat(1000))), list(directions), lines


def stored_payload(stored: str | bytes) -> str:
    """A stored payload as published; one that does not decompress is shown as such."""
    try:
        return unpack_payload(stored)
    except ValueError as exc:
        return json.dumps({"unreadable": str(exc)})


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
