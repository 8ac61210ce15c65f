"""Retention: what the journal lets go of, a small batch at a time.

Decisions (with their results), operator commands and alarms are kept for
``decisions_days``, the serial lines for ``frames_days`` (and, when
``keep_games`` is set, nothing of a game older than the last that many).
Each table is a hash chain, so what goes is always its oldest rows, a prefix,
and one retention anchor per chain (the id and hash of the last row gone)
is where what is kept verifies from. A game's decisions go together.

``Pruner.step`` deletes at most one batch of one table in one transaction,
then gives the freed pages back to the file system (a journal made with
``auto_vacuum = INCREMENTAL``), on a connection of its own. A step is two
halves: ``find`` reads what goes (most of its work: a few milliseconds, the
decisions' times read from their payloads), in a worker thread in the
daemon; ``delete`` deletes it (a fraction of a millisecond of CPU), on the
loop, the journal's one writer, so that no commit of the loop ever waits
for a lock held by a thread the machine has put aside. The delete's half is
paced by its wall time, not its row count: its cost is pages read, moved and
logged (I/O more than CPU), so a batch that held the loop past
``DELETE_BUDGET_S`` makes the next of its table smaller, and batches under
half of it grow back toward ``BATCH``; the pages given back after it are
paced the same way, on their own (``VACUUM_BUDGET_S``). What either half
will read, ``find`` has read first (the oldest rows' index pages, the file's
last pages that the vacuum moves): a page the loop reads from the disk holds
it for milliseconds. ``find`` also keeps the write-ahead log short (a
checkpoint of its own past ``WAL_LIMIT_BYTES``): the loop's commit that
starts the log over cuts the file back, and cutting back tens of megabytes
held it as long. A year's backlog never holds the watchdog.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from wheeld.shell.journal.chain import RETENTION, hex_hash
from wheeld.shell.journal.codec import unpack_payload
from wheeld.shell.journal.connection import WAL_LIMIT_BYTES, checkpoint_wal
from wheeld.shell.journal.errors import JournalError

if TYPE_CHECKING:
    from wheeld.shell.journal.connection import Connection
    from wheeld.shell.journal.rescue import JournalFile

DAY_S = 86_400.0
#: Rows deleted per step, by table, at most: each batch a few milliseconds.
BATCH: dict[str, int] = {
    "frames": 1000,
    "frame_blocks": 40,
    "decisions": 200,
    "commands": 500,
    "alarms": 500,
}
#: Free pages given back per step, at most: more than a batch frees, so the file
#: keeps up, few enough that moving them is a short write.
VACUUM_PAGES = 256
#: Pages a batch frees, about, beyond the free ones: the vacuum moves as many of the
#: file's last pages (a batch of decisions, 200 rows of 1-2 KiB, frees some 100).
BATCH_PAGES_FREED = 128
#: Pages a checkpoint may leave in the log and retention go on: the few a commit of the
#: loop made meanwhile; a reader's snapshot holds back thousands.
LEFT_IN_LOG_MAX = 256
#: The fewest a step gives back (paced by ``VACUUM_BUDGET_S``).
MIN_VACUUM_PAGES = 16
#: How long a step's delete may hold the loop, and then its pages given back: with the
#: machine's own pauses (a VM's reach 5-7 ms), the loop is never held 10 ms.
DELETE_BUDGET_S = 0.003
VACUUM_BUDGET_S = 0.002
#: The fewest rows a batch shrinks to (a game's decisions go together in any case).
MIN_BATCH = 4
#: The index by game of each table that has one (its pages change with the rows deleted).
_GAME_INDEX = {
    "decisions": "decisions_by_game",
    "frame_blocks": "frame_blocks_by_game",
    "frames": "frames_by_game",
}
#: Past every row id: with ``keep_games``, a table with no line of a kept game goes whole.
_AFTER_ALL = 1 << 62


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the journal keeps what it keeps (``[state]`` in the configuration)."""

    decisions_days: float = 400.0
    frames_days: float = 90.0
    keep_games: int | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """What a step deletes: ``table``'s rows up to ``last_id`` (whose hash is ``link``)."""

    table: str
    last_id: int
    link: str
    now: float


class Pruner:
    """One batch at a time: ``step`` until it returns 0; ``close`` at the end.

    Its connection is its own, opened (by ``connect``) at the first step, in
    the thread that steps; one thread steps at a time.
    """

    def __init__(
        self,
        connect: Callable[[], Connection],
        retention: Retention,
        legacy_frames: bool,
        file: JournalFile | None = None,
    ) -> None:
        self._connect = connect
        #: The daemon's journal file: a run stops once the path names another.
        self._file = file
        self._sql: Connection | None = None
        self._retention = retention
        #: Rows the next batch of each table takes: paced by ``delete``'s wall time.
        self._rows = dict(BATCH)
        #: Free pages the next step gives back: paced by their own wall time.
        self._vacuum_pages = VACUUM_PAGES
        self._tables = (("frames",) if legacy_frames else ()) + (
            "frame_blocks",
            "decisions",
            "commands",
            "alarms",
        )

    def _connection(self) -> Connection:
        if self._sql is None:
            self._sql = self._connect()
        return self._sql

    @property
    def _db(self) -> sqlite3.Connection:
        return self._connection().db

    def _write(self) -> AbstractContextManager[None]:
        """A transaction, not fsync'd; a failure becomes JournalWriteError."""
        return self._connection().writing(durable=False)

    def close(self) -> None:
        sql, self._sql = self._sql, None
        if sql is not None:
            sql.db.close()

    def step(self, now: float) -> int:
        """Delete one batch of the first table with something to let go; rows deleted
        (``find`` then ``delete``, in one thread)."""
        return self.delete(self.find(now))

    def find(self, now: float) -> Batch | None:
        """The next batch: the first table with something to let go, and its last row to
        go. Reads only, most of a step's work (the decisions' times read from their
        payloads): for a worker thread.

        Ages are counted to ``now``, or to the newest thing the journal holds when the
        clock says later than that: a daemon back after a long stop, or a clock set a
        year ahead, takes nothing before the wheel has said a word in its time.
        """
        if self._file is not None and self._file.lost() is not None:
            return None  # the WAL job stops the daemon: nothing here touches another file
        if not self._keep_log_short():
            return None  # a reader holds the log: deleting more would only grow it
        try:
            now = min(now, self._newest() or now)
            for table in self._tables:
                last = self._last_to_go(table, now)
                if last is not None:
                    with contextlib.suppress(sqlite3.Error, OSError):  # a help, never a failure
                        self._warm(table, last[0])
                        self._warm_tail()
                    return Batch(table, last[0], last[1], now)
        except sqlite3.Error as exc:  # a damaged page among the oldest rows, say
            raise JournalError(f"retention cannot read the journal: {exc}") from None
        return None

    def delete(self, batch: Batch | None) -> int:
        """Delete ``batch`` (one short write transaction; its anchor moved), then give the
        freed pages back: a fraction of a millisecond of CPU, for the thread that writes
        the journal (the daemon's loop: no lock to wait for); rows deleted."""
        if batch is None:
            return 0
        try:
            started = time.perf_counter()
            deleted = self._delete(batch)
            deleted_at = time.perf_counter()
            self._rows[batch.table] = _paced(
                self._rows[batch.table],
                deleted_at - started,
                DELETE_BUDGET_S,
                MIN_BATCH,
                BATCH[batch.table],
            )
            if deleted:
                self._give_back()
                self._vacuum_pages = _paced(
                    self._vacuum_pages,
                    time.perf_counter() - deleted_at,
                    VACUUM_BUDGET_S,
                    MIN_VACUUM_PAGES,
                    VACUUM_PAGES,
                )
        except sqlite3.Error as exc:
            raise JournalError(f"retention cannot write the journal: {exc}") from None
        return deleted

    def _last_to_go(self, table: str, now: float) -> tuple[int, str] | None:
        """The id and hash of the last row of ``table``'s next batch, if any goes."""
        db = self._db
        days = self._retention.frames_days if table in ("frames", "frame_blocks") else None
        cutoff = now - DAY_S * (days if days is not None else self._retention.decisions_days)
        first_kept_game = self._first_kept_game(now)
        batch = self._rows[table]
        if table == "decisions":
            while True:
                last, one_game = self._last_old_decision(cutoff, first_kept_game, batch)
                if not one_game:
                    break
                batch *= 2  # a game with more decisions than the batch goes whole, in a larger
        else:
            time_column = {"frames": "t", "frame_blocks": "last_t"}.get(table, "at")
            bound = None
            if first_kept_game is not None and table in ("frames", "frame_blocks"):
                # Everything before the first line of the first game kept goes.
                found = db.execute(
                    f"SELECT MIN(id) FROM {table} WHERE game_id >= ?", (first_kept_game,)
                ).fetchone()[0]
                bound = found if found is not None else _AFTER_ALL
            rows = db.execute(
                f"SELECT id, {time_column}, hash FROM {table} ORDER BY id LIMIT {batch}"
            ).fetchall()
            last = None
            for row_id, at, link in rows:
                if not (at < cutoff or (bound is not None and row_id < bound)):
                    break
                last = (row_id, hex_hash(link))
        return last

    def _delete(self, batch: Batch) -> int:
        db, table, last_id, link, now = self._db, batch.table, batch.last_id, batch.link, batch.now
        with self._write():
            deleted: int = db.execute(f"DELETE FROM {table} WHERE id <= ?", (last_id,)).rowcount
            if table == "decisions":
                kept = db.execute("SELECT MIN(game_id) FROM decisions").fetchone()[0]
                if kept is not None:
                    db.execute("DELETE FROM results WHERE game_id < ?", (kept,))
            db.execute("DELETE FROM anchors WHERE chain = ? AND reason = ?", (table, RETENTION))
            db.execute(
                "INSERT INTO anchors (at, chain, after_id, hash, reason) VALUES (?, ?, ?, ?, ?)",
                (now, table, last_id, link or "", RETENTION),
            )
        return deleted

    def _newest(self) -> float | None:
        """The time of the newest line or decision the journal holds, if any."""
        db = self._db
        times = [
            row[0]
            for row in (
                db.execute("SELECT MAX(t) FROM frame_tail").fetchone(),
                db.execute("SELECT last_t FROM frame_blocks ORDER BY id DESC LIMIT 1").fetchone(),
            )
            if row is not None and row[0] is not None
        ]
        last = db.execute("SELECT payload FROM decisions ORDER BY id DESC LIMIT 1").fetchone()
        decided = _decided_at(last[0]) if last is not None else None
        if decided is not None:
            times.append(decided)
        return max(times, default=None)

    def _first_kept_game(self, now: float) -> int | None:
        """With ``keep_games``: the oldest game kept; games before it go whatever their age."""
        keep = self._retention.keep_games
        if keep is None:
            return None
        row = self._db.execute(
            "SELECT game_id FROM results ORDER BY game_id DESC LIMIT 1 OFFSET ?", (keep - 1,)
        ).fetchone()
        if row is None:
            row = self._db.execute(
                "SELECT DISTINCT game_id FROM decisions ORDER BY game_id DESC LIMIT 1 OFFSET ?",
                (keep - 1,),
            ).fetchone()
        return None if row is None else int(row[0])

    def _last_old_decision(
        self, cutoff: float, first_kept_game: int | None, batch: int
    ) -> tuple[tuple[int, str] | None, bool]:
        """The last row of the oldest decisions to go: whole games, all of them past the
        cutoff; and whether nothing goes only because the batch holds one game's rows, all
        old (a larger batch takes that game).

        A decision's time is its payload's ``ts``; one that does not read is
        not old (kept, rather than guessed at).
        """
        rows = self._db.execute(
            f"SELECT id, game_id, payload, hash FROM decisions ORDER BY id LIMIT {batch + 1}"
        ).fetchall()
        old: list[tuple[int, int, str]] = []
        for row_id, game_id, payload, link in rows:
            if first_kept_game is None or game_id >= first_kept_game:
                at = _decided_at(payload)
                if at is None or at >= cutoff:
                    break
            old.append((row_id, game_id, link))
        # A game goes whole: the rows of the first game kept stay with it, and so do
        # those of the batch's last game when the batch may have cut it short.
        if len(old) < len(rows):
            boundary: int | None = rows[len(old)][1]
        else:
            boundary = rows[-1][1] if len(rows) > batch else None
        cut_short = boundary is not None and len(old) == len(rows)
        while old and old[-1][1] == boundary:
            old.pop()
        if not old:
            return None, cut_short
        return (old[-1][0], hex_hash(old[-1][2])), False

    def _warm(self, table: str, last_id: int) -> None:
        """Read here, in the worker thread, the index pages the delete will change: the
        oldest rows' pages are the journal's coldest, and a delete that reads them from
        the disk holds the loop for tens of milliseconds (its own rows ``find`` has read).
        A game's index entries are ordered by game id (the lines between games, with none,
        first, in row order)."""
        index = _GAME_INDEX.get(table)
        if index is None:
            return
        db = self._db
        low, high = db.execute(
            f"SELECT MIN(game_id), MAX(game_id) FROM {table} WHERE id <= ?", (last_id,)
        ).fetchone()
        db.execute(
            f"SELECT COUNT(*) FROM {table} INDEXED BY {index} WHERE game_id IS NULL AND id <= ?",
            (last_id,),
        ).fetchone()
        if low is not None:
            db.execute(
                f"SELECT COUNT(*) FROM {table} INDEXED BY {index} WHERE game_id BETWEEN ? AND ?",
                (low, high),
            ).fetchone()
            if table == "decisions":
                db.execute("SELECT COUNT(*) FROM results WHERE game_id <= ?", (high,)).fetchone()

    def _keep_log_short(self) -> bool:
        """Copy the write-ahead log back into the database here, in the worker thread, once
        it is past ``WAL_LIMIT_BYTES``, not at the WAL job's next turn: the writer that next
        starts the log over cuts the file back to that size, on the loop, and a first run's
        deletes grow it fast (cutting 60 MB back held the loop 13 ms). False when it stays
        long (a reader's snapshot, an export's, holds it): this run stops there, and the
        next tries again. A failure to checkpoint is no reason to stop: the WAL job's
        checkpoint says it."""
        path = self._connection().path
        try:
            if path.with_name(f"{path.name}-wal").stat().st_size <= WAL_LIMIT_BYTES:
                return True
            left = checkpoint_wal(path, self._connection().write_lock, self._file)
            return left < LEFT_IN_LOG_MAX
        except (OSError, sqlite3.Error):
            return True

    def _warm_tail(self) -> None:
        """Read here the database's last pages, those the vacuum moves into the free ones:
        at a table they are the newest and mostly in memory, but a page of them that is
        not would be read on the loop. The database's end is its page count, not the
        file's size: pages given back leave the file only at the log's next checkpoint."""
        db = self._db
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            return  # an older journal: nothing is given back, nothing to read first
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        pages = min(self._vacuum_pages, free + BATCH_PAGES_FREED)
        count = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
        first = max(0, count - pages)
        with open(self._connection().path, "rb", buffering=0) as file:
            os.pread(file.fileno(), (count - first) * size, first * size)

    def _give_back(self) -> None:
        """Return freed pages to the file system (a journal made with incremental auto-vacuum)."""
        db = self._db
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            # Through executescript: the pragma frees one page a step, and execute()
            # steps a statement that returns no row only once (one page, not 2,000).
            # The connection is in autocommit, so its implicit COMMIT commits nothing.
            with self._connection().write_lock:  # a write: the journal's turn waits
                db.executescript(f"PRAGMA incremental_vacuum({self._vacuum_pages});")


def _paced(now: int, took: float, budget: float, least: int, most: int) -> int:
    """How much the next step takes after one of ``now`` that took ``took``: less in
    proportion past ``budget``, half as much again under half of it, within bounds."""
    if took > budget:
        now = int(now * budget / took)
    elif took < budget / 2:
        now += now // 2 + 1
    return max(least, min(now, most))


def _decided_at(payload: str | bytes) -> float | None:
    """A stored decision's time (its payload's ``ts``), or None when it does not read."""
    try:
        value = json.loads(unpack_payload(payload))
        stamp = value.get("ts") if isinstance(value, dict) else None
        at = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return None
    if at is None or at.tzinfo is None:
        return None
    return at.timestamp()
