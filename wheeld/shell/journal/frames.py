"""The serial lines in the journal: a tail of recent lines, sealed into compressed blocks.

Lines are kept as they cross the link (``frame_tail``, a row a line, no hash)
until their block is complete, then sealed, in one transaction, into one
``frame_blocks`` row, encoded and compressed (``codec``), hash-chained as
stored. A block is a game's: the traffic since the last game (``lead`` lines,
at most ``MAX_LEAD``) and the game's own lines, which share their shapes
(a heartbeat is a heartbeat, during a game or between two) and one row; or,
while the table is idle longer, the traffic alone. A block closes when its
game ends (the first line after it), at ``MAX_BLOCK_LINES`` lines or after
``MAX_BLOCK_SPAN_S``; a tail left by a crash is sealed at the next open.

Line noise (lines that were no frame of the wheel's protocol) is kept as a
sample, ``NOISE_SAMPLE`` lines a block, and counted beyond it (``dropped``):
garbage at full line speed costs a counter, not the disk.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wheeld.core.capture import escape
from wheeld.shell.journal.chain import GENESIS, Chains, Heads, block_hash, stored_hash
from wheeld.shell.journal.codec import BlockLine, decode_block, encode_block
from wheeld.shell.journal.errors import JournalWriteError

if TYPE_CHECKING:
    from wheeld.shell.journal.connection import Connection
    from wheeld.table.effects import FrameRecord

#: A block holds at most this many lines, and lines over at most this long.
MAX_BLOCK_LINES = 1024
MAX_BLOCK_SPAN_S = 600.0
#: Idle traffic longer than this when a game begins is a block of its own.
MAX_LEAD = 512
#: Noise lines kept per block; the rest are counted.
NOISE_SAMPLE = 16
_OPEN = "frame_tail"  # the state key that keeps the open block's noise count


@dataclass(frozen=True, slots=True)
class JournalFrame:
    """A journalled line: host time, direction and the line escaped as in the capture format."""

    t: float
    dir: str
    line: str
    game_id: int | None


class _Unset:
    pass


_NO_BLOCK = _Unset()


class FrameTail:
    """The open block's lines, and the sealing of blocks.

    ``keep`` and ``close_block`` are commits of their own, without an fsync
    (``durability``); ``append`` and ``seal`` work inside the journal's.
    """

    def __init__(self, sql: Connection, chains: Chains) -> None:
        self._db = sql.db
        self._chains = chains
        self._load()

    def keep(self, frames: Sequence[FrameRecord]) -> None:
        """Keep the lines that crossed the link, escaped as in the capture format.

        Several a second: the next durable commit, a decision's, makes them
        durable with it, since the write-ahead log is written in order.
        """
        if not frames:
            return
        try:
            with self._chains.extending(durable=False) as heads:
                self.append(frames, heads)
        except JournalWriteError:
            self.forget()
            raise

    def close_block(self) -> None:
        """Seal the open block now (a run that heard it ended)."""
        if not self.pending:
            return
        try:
            with self._chains.extending(durable=False) as heads:
                self.seal(heads)
        except JournalWriteError:
            self.forget()
            raise

    def _load(self) -> None:
        """The open block as the database has it (after a crash, or a failed transaction)."""
        db = self._db
        first = db.execute("SELECT t, game_id FROM frame_tail ORDER BY id LIMIT 1").fetchone()
        count = db.execute("SELECT COUNT(*), COALESCE(SUM(noise), 0) FROM frame_tail").fetchone()
        stored = db.execute("SELECT value FROM state WHERE key = ?", (_OPEN,)).fetchone()
        game = db.execute("SELECT game_id FROM frame_tail WHERE game_id IS NOT NULL LIMIT 1")
        found = game.fetchone()
        self._game: int | _Unset | None = _NO_BLOCK
        if first is not None:
            self._game = found[0] if found is not None else None
        self._first_t: float | None = None if first is None else first[0]
        self._lines, self._noise = int(count[0]), int(count[1])
        #: Lines before the game's first, in the open block (the traffic since the last).
        self._lead = 0
        if found is not None:
            self._lead = int(
                db.execute("SELECT COUNT(*) FROM frame_tail WHERE game_id IS NULL").fetchone()[0]
            )
        self._dropped = 0
        if stored is not None:
            try:
                opened = json.loads(stored[0])
                dropped, game, first_t = opened["dropped"], opened["game_id"], opened["first_t"]
                if type(dropped) is int and dropped >= 0:
                    self._dropped = dropped
                valid_game = game is None or (type(game) is int and game > 0)
                valid_time = type(first_t) is float and math.isfinite(first_t)
                if first is None and self._dropped and valid_game and valid_time:
                    self._game, self._first_t = game, first_t
            except (ValueError, TypeError, KeyError):
                pass  # a count lost: the next block starts afresh

    @property
    def pending(self) -> bool:
        """Whether an open block has anything in it (lines, or noise counted)."""
        return not isinstance(self._game, _Unset)

    def append(self, frames: Sequence[FrameRecord], heads: Heads) -> None:
        """Keep ``frames`` in the open block, sealing blocks as they complete (in a transaction)."""
        rows: list[tuple[float, str, str, int | None, int]] = []
        # Whether a block is open (``pending``), followed here: asked of every line.
        pending = self.pending
        for frame in frames:
            game = frame.game_id
            begins = self._game is None and game is not None  # a game after idle traffic
            if pending and (
                (game != self._game and not begins)
                or (begins and self._lines > MAX_LEAD)
                or self._lines >= MAX_BLOCK_LINES
                or self._first_t is None
                or not 0 <= frame.at - self._first_t <= MAX_BLOCK_SPAN_S
            ):
                self._insert(rows)
                rows = []
                self.seal(heads)
                pending = False
            if not pending:
                self._game, self._first_t, self._lead = game, frame.at, 0
                pending = True
            elif begins:
                self._game, self._lead = game, self._lines
            if frame.noise and self._noise >= NOISE_SAMPLE:
                self._dropped += 1
                continue
            rows.append((frame.at, frame.direction, escape(frame.line), game, frame.noise))
            self._lines += 1
            self._noise += frame.noise
        self._insert(rows)
        if self._dropped:
            self._db.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (
                    _OPEN,
                    json.dumps(
                        {"game_id": self._game, "first_t": self._first_t, "dropped": self._dropped}
                    ),
                ),
            )

    def _insert(self, rows: list[tuple[float, str, str, int | None, int]]) -> None:
        if rows:
            self._db.executemany(
                "INSERT INTO frame_tail (t, dir, line, game_id, noise) VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def seal(self, heads: Heads) -> None:
        """Close the open block: its lines become one chained ``frame_blocks`` row."""
        if not self.pending:
            return
        db = self._db
        tail = db.execute("SELECT t, dir, line FROM frame_tail ORDER BY id").fetchall()
        lines = [BlockLine(round(t * 1000), direction, line) for t, direction, line in tail]
        first_t = tail[0][0] if tail else self._first_t or 0.0
        last_t = tail[-1][0] if tail else first_t
        given = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'frame_blocks'").fetchone()
        head_id, previous = heads.get("frame_blocks", GENESIS)
        block_id = max(head_id, given[0] if given else 0) + 1
        game = None if isinstance(self._game, _Unset) else self._game
        lead = self._lead if game is not None else 0
        data = encode_block(lines)
        block = (block_id, game, lead, self._dropped, len(lines), first_t, last_t, data)
        link = block_hash(previous, block)
        db.execute(
            "INSERT INTO frame_blocks"
            " (id, game_id, first_t, last_t, lines, lead, dropped, data, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                block_id,
                game,
                first_t,
                last_t,
                len(lines),
                lead,
                self._dropped,
                data,
                stored_hash(link),
            ),
        )
        db.execute("DELETE FROM frame_tail")
        db.execute("DELETE FROM state WHERE key = ?", (_OPEN,))
        heads["frame_blocks"] = (block_id, link)
        self._game, self._first_t = _NO_BLOCK, None
        self._lines = self._noise = self._dropped = self._lead = 0

    def forget(self) -> None:
        """After a failed transaction: read the open block again from what the database kept."""
        self._load()


def iter_blocks(db: sqlite3.Connection) -> Iterator[list[tuple[BlockLine, int | None]]]:
    """Every sealed block's lines with the game each fell in, oldest first, a block at a time."""
    for game_id, lead, data in db.execute(
        "SELECT game_id, lead, data FROM frame_blocks ORDER BY id"
    ):
        yield [
            (line, game_id if index >= lead else None)
            for index, line in enumerate(decode_block(data))
        ]
