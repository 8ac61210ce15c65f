"""The journal: every decision and the engine's state, durable before publication.

SQLite in WAL mode. A game's end (a result, a no-spin), operator commands,
alarms and the table's state are committed with ``synchronous=FULL``: on disk
(fsync'd) when the call returns. What needs no fsync of its own is committed
with NORMAL and made durable by the next FULL commit: a game's start
(``spinning``, ``no_more_bets``), wheel state, acknowledgements, frames. A
NORMAL commit survives the daemon's crash (it is in the write-ahead log) but
not a power cut; what a power cut may take is found at the next open (below).
The ``outbox`` table is the publisher's queue: an entry leaves it only once the
broker has acknowledged it, so nothing decided is lost to a broker outage or a
crash, and no result to a power cut.

Beside the database, in the same state directory:

- ``lock``: held with ``flock`` while a journal is open, so two daemons never
  share one state directory; it holds the owner's pid for the error message.
- ``game-ids``: the highest game id reserved and the message seq reserved,
  one line, replaced atomically (fsync'd) whenever either grows: game ids
  ``GAME_ID_RESERVE`` at a time, seqs ``SEQ_RESERVE`` at a time, before any of
  them is journalled. A clean close brings the game-id mark back down to the
  last id used. Game ids and seqs are never reused: a journal that is deleted,
  emptied or older than ``game-ids`` does not restart them; they continue past
  the reserved block.

The journal's ``state`` table also keeps the mark it last wrote into
``game-ids`` (``game_ids``) and how the last run ended (``run``: the kernel's
boot id and whether it closed cleanly). A journal whose last run did not close
cleanly, opened after the machine restarted, may have lost its last NORMAL
commits (a game announced but forgotten): game ids and seqs then continue past
the reserved blocks too, with a warning.

A journal that is not an SQLite database, fails ``PRAGMA quick_check`` or does
not hold wheeld's tables is refused at open with one line saying so: a daemon
that decided games it could not journal would never publish them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rfc8785

from wheeld.capture import escape
from wheeld.effects import GameRecord, Outgoing
from wheeld.engine import EngineState
from wheeld.signing import ChainState, digest

if TYPE_CHECKING:
    from wheeld.effects import AlarmRecord, CommandRecord, FrameRecord, TableState

#: Files the journal keeps beside its database, in the state directory.
JOURNAL_FILE = "journal.sqlite3"
GAME_IDS_FILE = "game-ids"
LOCK_FILE = "lock"

#: wheeld's tables, each with the statement that creates it.
_TABLES: dict[str, str] = {
    "decisions": """
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    game_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    hash TEXT
)
""",
    "results": """
CREATE TABLE results (
    game_id INTEGER PRIMARY KEY,
    number TEXT NOT NULL
)
""",
    "outbox": """
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    payload TEXT NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL
)
""",
    "retained": """
CREATE TABLE retained (
    topic TEXT PRIMARY KEY,
    payload TEXT NOT NULL
)
""",
    "state": """
CREATE TABLE state (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
)
""",
    "commands": """
CREATE TABLE commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    name TEXT NOT NULL,
    sender TEXT,
    payload TEXT NOT NULL,
    accepted INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    hash TEXT
)
""",
    "frames": """
CREATE TABLE frames (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    dir TEXT NOT NULL,
    line TEXT NOT NULL,
    game_id INTEGER,
    hash TEXT
)
""",
    "anchors": """
CREATE TABLE anchors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    chain TEXT NOT NULL,
    after_id INTEGER NOT NULL,
    hash TEXT NOT NULL,
    reason TEXT NOT NULL,
    problem TEXT
)
""",
    "alarms": """
CREATE TABLE alarms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    code TEXT NOT NULL,
    state TEXT NOT NULL,
    payload TEXT NOT NULL,
    hash TEXT
)
""",
}
#: Tables added after the first journals were written: created when missing.
_ADDED_TABLES = ("commands", "frames", "anchors", "alarms")
#: The hash-chained tables, each with the columns a row's hash covers, in order.
CHAINED: dict[str, tuple[str, ...]] = {
    "decisions": ("id", "game_id", "event", "payload"),
    "commands": ("id", "at", "name", "sender", "payload", "accepted", "outcome"),
    "frames": ("id", "t", "dir", "line", "game_id"),
    "alarms": ("id", "at", "code", "state", "payload"),
}
#: The chains walked at every open. Not ``frames``: hundreds of thousands of rows
#: would make every start slow; ``wheeld verify --state-dir`` walks that chain.
WALKED_AT_OPEN = ("decisions", "commands", "alarms")
#: Anchor reasons: rows deleted by retention, or a segment begun after a break found at open.
RETENTION = "retention"
BROKEN = "broken"

#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Same bound as the engine's stored integers: exact in every JSON reader.
_GAME_ID_LIMIT = 1 << 53
_GAME_IDS_LINE = re.compile(r"\s*([0-9]{1,16})(?:[ \t]+([0-9]{1,16}))?\s*", re.ASCII)
#: ``game-ids`` also reserves message ``seq`` numbers this many at a time: a lost
#: or older journal restarts the chain past every seq ever reserved, never at
#: one already published, at the cost of one more small fsync per block.
SEQ_RESERVE = 1000
#: ``game-ids`` reserves game ids this many at a time: one fsync'd write of the
#: file per block of games, none for the games within it.
GAME_ID_RESERVE = 100
#: Decisions that start a game: committed without an fsync of their own.
#: Should a power cut take them, the next open skips past the reserved ids.
UNHURRIED_EVENTS = frozenset({"Spinning", "NoMoreBets"})
#: Where the kernel says which boot this is: a new id after every restart.
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")

_Columns = list[tuple[str, str, int, int]]


class JournalError(Exception):
    """The journal cannot be opened or read; the message is one line naming the file."""


class JournalWriteError(JournalError):
    """A write failed (disk full, I/O error): nothing of it was kept.

    The database is as it was before the write and the journal stays open;
    ``Journal.writable()`` says when writing works again.
    """


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A message waiting for the broker's acknowledgement."""

    id: int
    message: Outgoing


class Journal:
    """The daemon's durable memory: decisions, engine state and the outbox.

    ``warnings`` lists, one line each, what the operator should hear about
    from opening (a journal found missing, older than the game-id mark, or
    possibly missing its last commits after a power cut); the daemon raises
    them as alarms.

    ``boot_id`` names this boot of the machine (tests give their own);
    by default it is read from the kernel, None when it cannot be.
    """

    def __init__(self, path: Path, boot_id: str | None = None) -> None:
        self.path = path
        self.warnings: list[str] = []
        self._boot_id = boot_id if boot_id is not None else _read_boot_id()
        #: The highest game id handed to the journal, from the journal's own at open.
        self._given = 0
        #: Below this the game-id mark is never brought down (the mark found when
        #: the journal was lost: ids up to it may have been announced).
        self._floor = 0
        #: This run is recorded in the journal as open (not closed cleanly).
        self._run_marked = False
        state_dir = path.parent
        self._game_ids_path = state_dir / GAME_IDS_FILE
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(f"{state_dir}: cannot create the state directory: {exc}") from None
        self._opened = False
        self._lock_fd: int | None = _lock_state_dir(state_dir)
        try:
            self._high_water, self._seq_reserved = self._read_high_water()
            #: The journal was missing, emptied or older than ``game-ids``, or its last
            #: commits may have been lost to a power cut: ids continue past the blocks.
            self.lost = False
            self._db = self._connect()
            self._durable = True
            self._check_game_ids()
            self._heads: dict[str, tuple[int, str]] = {}
            #: The first break in the journal's hash chain found at this open, or None.
            #: The daemon raises it as a critical alarm; a new segment begins after it.
            self.chain_problem = self._check_chain()
        except BaseException:
            self.close()
            raise
        self._opened = True

    def close(self) -> None:
        """Close the database and release the state directory; safe to call twice.

        A clean close is written down (with an fsync, which makes every earlier
        commit durable too) and brings ``game-ids`` back to the last game id
        handed out: the next start continues from it, and an older journal
        swapped in meanwhile is found behind it.
        """
        db = getattr(self, "_db", None)
        if db is not None:
            # A journal found lost keeps saying so until a decision past the
            # reserved block is recorded: a clean close must not hide the loss.
            if self._opened and (self._run_marked or not self.lost):
                with contextlib.suppress(JournalError):
                    self._close_run()
            db.close()
            del self._db
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # -- opening -------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        try:
            fresh = not path.exists() or path.stat().st_size == 0
            if fresh:
                self._forget_stale_log()
            else:
                with path.open("rb") as file:
                    if file.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                        raise JournalError(
                            f"{path}: not an SQLite database; move it aside to start a new"
                            f" journal; {self._continuation()}"
                        )
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open journal: {exc}") from None
        try:
            self._check_integrity(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            db.close()
            raise self._corrupt(str(exc)) from None
        except JournalError:
            db.close()
            raise
        if fresh and (self._high_water > 0 or self._seq_reserved > 0):
            self.lost = True
            self._floor = self._high_water
            self.warnings.append(
                f"{path}: journal was missing or empty, a new one was started;"
                f" game ids continue from {self._high_water + 1} ({self._game_ids_path})"
            )
        return db

    def _forget_stale_log(self) -> None:
        """Remove the write-ahead log of a journal that is gone.

        Its pages belong to the old database: replayed into a new one they
        would corrupt it.
        """
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                self.path.with_name(self.path.name + suffix).unlink()

    def _check_integrity(self, db: sqlite3.Connection) -> None:
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise self._corrupt(f"quick_check: {problems[0]}")
        found = _tables(db)
        if not found:
            self._create(db)
            return
        expected = _expected_tables()
        if not found.keys() & expected.keys():
            raise JournalError(
                f"{self.path}: not a wheeld journal (it holds the tables"
                f" {', '.join(sorted(found))}); give wheeld its own state directory"
            )
        missing = [name for name in expected if name not in found]
        if missing and set(missing) <= set(_ADDED_TABLES):
            self._create(db, only=missing)
            found = _tables(db)
        unchained = [name for name in CHAINED if found.get(name) == expected[name][:-1]]
        if unchained:
            self._chain_older_rows(db, unchained)
            found = _tables(db)
        for name, columns in expected.items():
            if name not in found:
                raise self._corrupt(f"table {name} is missing")
            if found[name] != columns:
                raise self._corrupt(f"table {name} does not have wheeld's columns")
        for name in found.keys() - expected.keys():
            raise self._corrupt(f"unexpected table {name}")

    def _create(self, db: sqlite3.Connection, only: Sequence[str] = ()) -> None:
        """wheeld's tables (or ``only`` those) in one transaction: all or none."""
        try:
            with _transaction(db):
                for name, statement in _TABLES.items():
                    if not only or name in only:
                        db.execute(statement)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot create the journal: {exc}") from None

    def _chain_older_rows(self, db: sqlite3.Connection, tables: Sequence[str]) -> None:
        """Give a journal from before the hash chain its ``hash`` columns, chaining what it holds.

        The rows kept so far are chained as they are found: from here on an
        edit, a deletion or a reordering of any of them is detected.
        """
        try:
            with _transaction(db):
                heads = _stored_heads(db)
                for table in tables:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN hash TEXT")
                    head = _GENESIS
                    links: list[tuple[str, int]] = []
                    for row in db.execute(
                        f"SELECT {', '.join(CHAINED[table])} FROM {table} ORDER BY id"
                    ).fetchall():
                        head = (row[0], link_hash(head[1], row))
                        links.append((head[1], row[0]))
                    db.executemany(f"UPDATE {table} SET hash = ? WHERE id = ?", links)
                    heads[table] = head
                _put_heads(db, heads)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot upgrade the journal: {exc}") from None

    def _check_chain(self) -> str | None:
        """Walk the hash chains; on a new break, begin a new anchored segment after it.

        Nothing is repaired or deleted: the broken rows stay as found, for
        ``wheeld verify`` to name, and the problem is kept in the anchor.
        Returns the first new break, described, or None.
        """
        walks = {table: _walk(self._db, table) for table in WALKED_AT_OPEN}
        self._heads = {table: walk.end for table, walk in walks.items()}
        self._heads["frames"] = self._frames_head()
        fresh = [
            (table, brk)
            for table, walk in walks.items()
            for brk in walk.breaks
            if not brk.acknowledged
        ]
        if not fresh:
            return None
        at = time.time()
        try:
            with self._writing():
                for table, walk in walks.items():
                    first = next((b for b in walk.breaks if not b.acknowledged), None)
                    if first is not None:
                        self._db.execute(
                            "INSERT INTO anchors (at, chain, after_id, hash, reason, problem)"
                            " VALUES (?, ?, ?, ?, ?, ?)",
                            (at, table, walk.end[0], walk.end[1], BROKEN, first.describe()),
                        )
                _put_heads(self._db, self._heads)
        except JournalWriteError as exc:
            raise JournalError(str(exc)) from None
        return fresh[0][1].describe()

    def _frames_head(self) -> tuple[int, str]:
        """Where the frames chain goes on, without walking it: its stored head.

        Should the stored head be gone (it is then a break for the walks to
        report), the last row kept, found by its key.
        """
        stored = _stored_heads(self._db).get("frames")
        if stored is not None:
            return stored
        last = self._db.execute("SELECT id, hash FROM frames ORDER BY id DESC LIMIT 1").fetchone()
        return _GENESIS if last is None else (last[0], last[1] or "")

    def _corrupt(self, what: str) -> JournalError:
        return JournalError(
            f"{self.path}: journal is corrupt ({what}); move it aside to start a new one;"
            f" {self._continuation()}"
        )

    def _continuation(self) -> str:
        if self._high_water > 0:
            return f"game ids continue from {self._high_water + 1}"
        return (
            f"game ids would restart at 1: write the last game id used into"
            f" {self._game_ids_path} first"
        )

    # -- the game-id high-water mark -----------------------------------------------

    def _read_high_water(self) -> tuple[int, int]:
        """The highest game id ever used and the seq reserved, from ``game-ids``; 0 when none."""
        try:
            text = self._game_ids_path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return 0, 0
        except OSError as exc:
            raise JournalError(f"{self._game_ids_path}: cannot read: {exc}") from None
        match = _GAME_IDS_LINE.fullmatch(text)
        if match is None or int(match[1]) >= _GAME_ID_LIMIT:
            raise JournalError(
                f"{self._game_ids_path}: malformed: it must hold one number, the highest"
                f" game id ever used (0 for none)"
            )
        return int(match[1]), int(match[2] or 0)

    def _check_game_ids(self) -> None:
        """Reconcile the journal with ``game-ids``: warn, and skip ids, when it may miss games.

        Within the block it reserved, a journal behind the mark is normal. It
        is not complete when ``game-ids`` holds a mark it never wrote (an older
        journal, or one from before the mark was kept in it), nor when its last
        run did not close cleanly and the machine has restarted since (its
        last commits had no fsync). Ids then continue past the reserved block.
        """
        stored = self._stored_state()
        if stored is None:
            self._floor = self._high_water  # no game in it: ids continue past the mark
            return
        used = stored.next_game_id - 1
        self._given = used
        if used > self._high_water:
            # A journal from before game-ids existed, or game-ids was deleted.
            self._write_game_ids(used)
        elif used < self._high_water and self._stored_mark() != self._high_water:
            self._lose(
                f"{self.path}: the journal ends at game {used} but {self._game_ids_path}"
                f" reserves up to game {self._high_water} (an older journal?);"
                f" game ids continue from {self._high_water + 1}"
            )
            return
        run = self._stored_run()
        if run is not None and not run[1] and (run[0] is None or run[0] != self._boot_id):
            self._lose(
                f"{self.path}: the last run did not close cleanly and the machine restarted"
                f" since: its last commits, made without an fsync, may be lost;"
                f" game ids continue from {self._high_water + 1} ({self._game_ids_path})"
            )

    def _lose(self, warning: str) -> None:
        """The journal may miss games: ids (and seqs) continue past every reserved one."""
        self.lost = True
        self._floor = self._high_water
        self.warnings.append(warning)

    def _stored_mark(self) -> int | None:
        """The game-id mark this journal last wrote into ``game-ids``, or None if never."""
        rows = self._read("SELECT value FROM state WHERE key = 'game_ids'")
        value = str(rows[0][0]) if rows else ""
        if not (value.isascii() and value.isdigit()):
            return None  # an unreadable mark is no mark: the journal is taken as older
        return int(value)

    def _stored_run(self) -> tuple[str | None, bool] | None:
        """How the last run ended: (its boot id, closed cleanly), or None if never written."""
        rows = self._read("SELECT value FROM state WHERE key = 'run'")
        if not rows:
            return None
        try:
            run = json.loads(rows[0][0])
            boot, closed = run["boot_id"], run["closed"]
        except (ValueError, TypeError, KeyError):
            return None, False  # unreadable: taken as a run that did not close cleanly
        return (boot if isinstance(boot, str) else None), closed is True

    def _put_run(self, *, closed: bool) -> None:
        self._db.execute(
            "INSERT INTO state (key, value) VALUES ('run', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (json.dumps({"boot_id": self._boot_id, "closed": closed}, sort_keys=True),),
        )

    def _put_mark(self) -> None:
        self._db.execute(
            "INSERT INTO state (key, value) VALUES ('game_ids', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(self._high_water),),
        )

    def _close_run(self) -> None:
        """Write down a clean close (fsync'd), then bring the mark down to the last id given."""
        with self._writing():
            self._put_run(closed=True)
        last = max(self._given, self._floor)
        if last < self._high_water:
            # Safe only now: the commit above made every game up to ``last`` durable.
            self._write_game_ids(last)

    def _write_game_ids(self, used: int, seq_reserved: int | None = None) -> None:
        """Atomically replace ``game-ids``: the old or the new mark survives a crash."""
        reserved = self._seq_reserved if seq_reserved is None else seq_reserved
        target = self._game_ids_path
        temporary = target.with_name(target.name + ".tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, f"{used} {reserved}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, target)
            directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(directory)  # makes the rename itself durable
            finally:
                os.close(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise JournalWriteError(
                f"{target}: cannot record game id {used}: {exc}; nothing was recorded"
            ) from None
        self._high_water = used
        self._seq_reserved = reserved

    def _note_game_ids(
        self, games: list[GameRecord], state: EngineState, chain: ChainState | None = None
    ) -> None:
        """Reserve the next blocks of game ids and seqs, when these reach past the marks.

        Written before the decision is committed: a crash between the two
        skips ids, never reuses one. Only a game or a seq past its block pays
        for it, and both blocks are reserved in one write when both are due.
        """
        used = max([state.next_game_id - 1, *(game.game_id for game in games)])
        marks = self._high_water, self._seq_reserved
        if used > self._high_water:
            marks = used + GAME_ID_RESERVE - 1, marks[1]
        if chain is not None and chain.seq >= self._seq_reserved:
            marks = marks[0], chain.seq + SEQ_RESERVE
        if marks != (self._high_water, self._seq_reserved):
            self._write_game_ids(*marks)
        self._given = max(self._given, used)

    # -- state -------------------------------------------------------------

    def load_state(self) -> EngineState | None:
        """The engine state to resume from: the last run's, never behind ``game-ids``.

        None on a first start (no journal state and no game id ever used).
        """
        state = self._stored_state()
        lost = self.lost or state is None
        if state is None:
            if self._high_water == 0:
                return None
            state = EngineState()
        # A lost journal continues past the reserved block; a complete one from
        # the next id it has not handed out (a decision that failed to be written
        # included: it was never published, but it is not handed out twice).
        after = self._high_water if lost else self._given
        if state.next_game_id <= after:
            state = replace(state, next_game_id=after + 1)
        return state

    def _stored_state(self) -> EngineState | None:
        rows = self._read("SELECT value FROM state WHERE key = 'engine'")
        if not rows:
            return None
        try:
            return EngineState.from_dict(json.loads(rows[0][0]))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise self._corrupt(str(exc)) from None

    def save_state(self, state: EngineState) -> None:
        """Store the engine state on its own (no decision came with the change)."""
        self._note_game_ids([], state)
        with self._writing():
            self._put_state(state)
            self._put_mark()

    def _put_state(self, state: EngineState) -> None:
        self._db.execute(
            "INSERT INTO state (key, value) VALUES ('engine', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (json.dumps(state.to_dict(), sort_keys=True),),
        )

    def table_state(self) -> TableState:
        """Whether the operator last opened or closed the table; open until told."""
        rows = self._read("SELECT value FROM state WHERE key = 'table'")
        if not rows:
            return "open"
        if rows[0][0] == "closed":
            return "closed"
        if rows[0][0] != "open":
            raise self._corrupt(f"stored table state {rows[0][0]!r} is neither open nor closed")
        return "open"

    def claim_table(self, table: str) -> None:
        """Mark the journal as ``table``'s; refuse it when another table's it is.

        A journal carried into another table's state directory would go on with
        that table's game ids and chain: two tables, one chain, forked.
        """
        rows = self._read("SELECT value FROM state WHERE key = 'table_id'")
        if rows:
            owner = rows[0][0]
            if owner != table:
                # Not ours: closing must leave it as its table's last run left it.
                self._opened = False
                raise JournalError(
                    f"{self.path}: this journal is table {owner}'s, not {table}'s: each table"
                    f" needs its own state.dir (move this one back, or start {table} afresh)"
                )
            return
        with self._writing(durable=False):
            self._db.execute("INSERT INTO state (key, value) VALUES ('table_id', ?)", (table,))

    def save_table_state(self, state: TableState) -> None:
        """Store the table's open/closed state, durably: a restart must not reopen it."""
        with self._writing():
            self._db.execute(
                "INSERT INTO state (key, value) VALUES ('table', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (state,),
            )

    def record_commands(self, commands: Sequence[CommandRecord]) -> None:
        """Keep operator commands, accepted or refused, with who sent them (durably)."""
        heads = dict(self._heads)
        with self._writing():
            for c in commands:
                self._insert_chained(
                    heads,
                    "commands",
                    (c.at, c.name, c.sender, c.payload, int(c.accepted), c.outcome),
                )
            _put_heads(self._db, heads)
        self._heads = heads

    def commands(self) -> list[tuple[float, str, str | None, str, bool, str]]:
        """Every journalled operator command: (at, name, sender, payload, accepted, outcome)."""
        rows = self._read(
            "SELECT at, name, sender, payload, accepted, outcome FROM commands ORDER BY id"
        )
        return [(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]

    def record_alarms(
        self, alarms: Sequence[AlarmRecord], set_alerts: dict[str, dict[str, Any]] | None
    ) -> None:
        """Keep alarms raised, cleared and acknowledged (chained), and the alerts now set.

        No fsync of their own, like frames: alarms are no game decisions, and
        the next durable commit makes them durable with it.
        """
        heads = dict(self._heads)
        with self._writing(durable=False):
            for a in alarms:
                self._insert_chained(heads, "alarms", (a.at, a.code, a.state, a.payload))
            if alarms:
                _put_heads(self._db, heads)
            if set_alerts is not None:
                self._db.execute(
                    "INSERT INTO state (key, value) VALUES ('set_alerts', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (json.dumps(set_alerts, sort_keys=True),),
                )
        self._heads = heads

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        """The alerts and faults the last run left set (code -> since, detail, ack); {} if none.

        Unreadable, it is forgotten rather than refused: the alerts are judged afresh.
        """
        rows = self._read("SELECT value FROM state WHERE key = 'set_alerts'")
        if not rows:
            return {}
        try:
            stored = json.loads(rows[0][0])
        except ValueError:
            return {}
        if not isinstance(stored, dict):
            return {}
        return {code: value for code, value in stored.items() if isinstance(value, dict)}

    def alarms(self) -> list[tuple[float, str, str, str]]:
        """Every journalled alarm: (at, code, state, payload), oldest first."""
        rows = self._read("SELECT at, code, state, payload FROM alarms ORDER BY id")
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def writable(self) -> bool:
        """Whether durable writes work again: tries one tiny write of each kind.

        For the daemon to poll while writes are failing; the probe leaves only
        a ``write_probe`` row (the time of the last success) in the state table.
        """
        try:
            with self._writing():
                self._db.execute(
                    "INSERT INTO state (key, value) VALUES ('write_probe', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (repr(time.time()),),
                )
            self._write_game_ids(self._high_water)
        except JournalWriteError:
            return False
        return True

    # -- decisions -----------------------------------------------------------

    def record(
        self,
        games: list[GameRecord],
        messages: list[Outgoing],
        state: EngineState,
        chain: ChainState | None = None,
        *,
        durable: bool | None = None,
    ) -> list[int]:
        """Write decisions, their messages, the new state and chain in one commit.

        ``chain`` is where the signed message chain stands after these
        messages: stored with them, so a restart never reuses a ``seq`` nor
        skips one. Returns the outbox ids of the messages, in order. Raises
        JournalWriteError, with nothing recorded, when the disk refuses.

        The commit is fsync'd when ``durable``; by default (None) unless every
        game in it is one of ``UNHURRIED_EVENTS`` (the daemon says True for an
        alarm). The first commit of a run is fsync'd whatever it holds: it
        marks the run open, which a power cut's losses are told by.
        """
        if durable is None:
            durable = not games or any(g.event not in UNHURRIED_EVENTS for g in games)
        self._note_game_ids(games, state, chain)
        heads = dict(self._heads)
        marking = not self._run_marked
        with self._writing(durable=durable or marking):
            if marking:
                self._put_run(closed=False)
            self._put_mark()
            for game in games:
                self._insert_chained(heads, "decisions", (game.game_id, game.event, game.payload))
                if game.number is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO results (game_id, number) VALUES (?, ?)",
                        (game.game_id, game.number),
                    )
            ids = [self._enqueue(message) for message in messages]
            self._put_state(state)
            if chain is not None:
                self._db.execute(
                    "INSERT INTO state (key, value) VALUES ('chain', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (json.dumps(chain.to_dict(), sort_keys=True),),
                )
            if games:
                _put_heads(self._db, heads)
        # Only once committed: a failed write leaves the chain where it was.
        self._heads = heads
        self._run_marked = True
        return ids

    def _insert_chained(
        self, heads: dict[str, tuple[int, str]], table: str, values: tuple[Any, ...]
    ) -> None:
        """Insert a row of a chained table, linked to the one before it; advances ``heads``."""
        columns = CHAINED[table][1:]
        cursor = self._db.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            values,
        )
        row_id = cursor.lastrowid
        assert row_id is not None
        link = link_hash(heads.get(table, _GENESIS)[1], (row_id, *values))
        self._db.execute(f"UPDATE {table} SET hash = ? WHERE id = ?", (link, row_id))
        heads[table] = (row_id, link)

    def prune(self, keep_games: int) -> int:
        """Retention: delete the decisions and frames of all but the last ``keep_games`` games.

        One durable transaction that also writes a retention anchor: the id
        and hash of the last deleted decision, so the rows kept still verify
        from it. Results (one short row a game, the history) and operator
        commands are kept. Returns the number of decisions deleted.
        """
        if keep_games < 1:
            raise ValueError("keep_games must be at least 1")
        rows = self._read(
            "SELECT game_id FROM (SELECT DISTINCT game_id FROM decisions)"
            " ORDER BY game_id DESC LIMIT 1 OFFSET ?",
            (keep_games - 1,),
        )
        if not rows:
            return 0
        first_kept = rows[0][0]
        last = self._read(
            "SELECT id, hash FROM decisions WHERE id < "
            "(SELECT MIN(id) FROM decisions WHERE game_id >= ?) ORDER BY id DESC LIMIT 1",
            (first_kept,),
        )
        if not last:
            return 0
        last_id, last_hash = last[0]
        # Frames go as a prefix of the chain, as decisions do: every line before the
        # first of a kept game (or, when no kept game has a line yet, up to the last
        # line of a deleted game), so one anchor is where the kept frames start.
        last_frame = self._read(
            "SELECT id, hash FROM frames WHERE id < COALESCE("
            "(SELECT MIN(id) FROM frames WHERE game_id >= ?),"
            " (SELECT MAX(id) + 1 FROM frames WHERE game_id < ?), 0)"
            " ORDER BY id DESC LIMIT 1",
            (first_kept, first_kept),
        )
        at = time.time()
        with self._writing():
            deleted = self._db.execute("DELETE FROM decisions WHERE id <= ?", (last_id,)).rowcount
            anchors = [(at, "decisions", last_id, last_hash or "", RETENTION)]
            if last_frame:
                frame_id, frame_hash = last_frame[0]
                self._db.execute("DELETE FROM frames WHERE id <= ?", (frame_id,))
                anchors.append((at, "frames", frame_id, frame_hash or "", RETENTION))
            self._db.executemany(
                "INSERT INTO anchors (at, chain, after_id, hash, reason) VALUES (?, ?, ?, ?, ?)",
                anchors,
            )
        return deleted

    def load_chain(self) -> ChainState:
        """Where the message chain stands: the next ``seq`` and ``prev`` (a fresh chain if none).

        Never behind a message already published: the stored state, the last
        signed payload in the journal (should the state row be gone), and, when
        the journal was lost or is older than ``game-ids``, past every seq ever
        reserved there (a new segment: ``prev`` null, a gap a verifier shows).
        """
        chain = self._stored_chain()
        last = self._read(
            "SELECT payload FROM decisions WHERE payload LIKE '%\"seq\"%' ORDER BY id DESC LIMIT 1"
        )
        if last:
            try:
                payload = json.loads(last[0][0])
                seq = payload.get("seq") if isinstance(payload, dict) else None
                if type(seq) is int and (chain is None or chain.seq <= seq):
                    chain = ChainState(seq + 1, digest(payload))
            except ValueError:
                pass  # an unreadable payload is the hash chain's to report
        if self.lost and self._seq_reserved > (chain.seq if chain is not None else 1):
            return ChainState(self._seq_reserved, None)
        return chain if chain is not None else ChainState()

    def _stored_chain(self) -> ChainState | None:
        rows = self._read("SELECT value FROM state WHERE key = 'chain'")
        if not rows:
            return None
        try:
            stored = json.loads(rows[0][0])
            if not isinstance(stored, dict):
                raise ValueError("stored chain state is not an object")
            return ChainState.from_dict(stored)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise self._corrupt(str(exc)) from None

    def record_frames(self, frames: Sequence[FrameRecord]) -> None:
        """Keep the lines that crossed the link, escaped as in the capture format.

        No fsync of their own (several a second): the next durable commit, a
        decision's, makes them durable with it, since the write-ahead log is
        written in order.

        Chained like decisions, in one statement for the batch: the ids are
        taken after the highest ever given (``AUTOINCREMENT``'s own counter),
        as SQLite would, so each row's hash covers its id.
        """
        if not frames:
            return
        head_id, head_hash = self._heads.get("frames", _GENESIS)
        rows: list[tuple[int, float, str, str, int | None, str]] = []
        with self._writing(durable=False):
            given = self._db.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = 'frames'"
            ).fetchone()
            row_id = max(head_id, given[0] if given else 0)
            for f in frames:
                row_id += 1
                values = (row_id, f.at, f.direction, escape(f.line), f.game_id)
                head_hash = link_hash(head_hash, values)
                rows.append((*values, head_hash))
            self._db.executemany(
                "INSERT INTO frames (id, t, dir, line, game_id, hash) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            heads = {**self._heads, "frames": (row_id, head_hash)}
            _put_heads(self._db, heads)
        self._heads = heads

    def enqueue(self, messages: list[Outgoing]) -> None:
        """Queue messages that need no durability of their own (wheel state, table).

        Committed without an fsync: a crash of the daemon loses nothing (the
        commit is in the write-ahead log), but a power cut before the next
        durable commit can lose them. Anything that must survive that, alarms
        included, goes through ``record`` instead: the daemon journals the
        engine's alarms there, with the decisions they came with.
        """
        with self._writing(durable=False):
            for message in messages:
                self._enqueue(message)

    def _enqueue(self, message: Outgoing) -> int:
        cursor = self._db.execute(
            "INSERT INTO outbox (topic, payload, qos, retain) VALUES (?, ?, ?, ?)",
            (message.topic, message.payload, message.qos, int(message.retain)),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def history(self, length: int) -> list[str]:
        """The last ``length`` winning numbers, newest first."""
        rows = self._read("SELECT number FROM results ORDER BY game_id DESC LIMIT ?", (length,))
        return [row[0] for row in rows]

    def decisions(self) -> list[tuple[int, str, str]]:
        """Every journalled game decision: (game id, event, payload), oldest first."""
        return [
            (row[0], row[1], row[2])
            for row in self._read("SELECT game_id, event, payload FROM decisions ORDER BY id")
        ]

    # -- the outbox ------------------------------------------------------------

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacknowledged messages in the order they were decided."""
        rows = self._read(
            "SELECT id, topic, payload, qos, retain FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
            (after, limit),
        )
        return [OutboxEntry(r[0], Outgoing(r[1], r[2], r[3], bool(r[4]))) for r in rows]

    def acknowledge(self, entry: OutboxEntry) -> None:
        """The broker has it: drop it from the outbox (and remember retained state).

        No fsync: if a crash forgets the acknowledgement, the message is published
        again, and consumers drop repeats by game id.
        """
        with self._writing(durable=False):
            self._db.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
            if entry.message.retain:
                self._db.execute(
                    "INSERT INTO retained (topic, payload) VALUES (?, ?) "
                    "ON CONFLICT (topic) DO UPDATE SET payload = excluded.payload",
                    (entry.message.topic, entry.message.payload),
                )

    def pending_count(self) -> int:
        """How many messages wait for the broker's acknowledgement (the outbox's depth)."""
        return int(self._read("SELECT COUNT(*) FROM outbox")[0][0])

    def disk_bytes(self) -> int:
        """The journal's size on disk: the database and its write-ahead log."""
        size = 0
        for path in (self.path, self.path.with_name(f"{self.path.name}-wal")):
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        return size

    def retained(self) -> list[Outgoing]:
        """The last acknowledged payload of every retained topic, to republish."""
        rows = self._read("SELECT topic, payload FROM retained ORDER BY topic")
        return [Outgoing(topic, payload, 1, True) for topic, payload in rows]

    # -- plumbing ----------------------------------------------------------------

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    @contextlib.contextmanager
    def _writing(self, *, durable: bool = True) -> Iterator[None]:
        """One transaction; any failure to write becomes JournalWriteError."""
        try:
            if self._db.in_transaction:
                _rollback(self._db)  # a failed ROLLBACK earlier left one open
            if durable != self._durable:
                # In WAL mode FULL fsyncs the log at every commit, NORMAL leaves it to
                # the next FULL commit or checkpoint; a durable commit covers both.
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._durable = durable
            with _transaction(self._db):
                yield
        except (sqlite3.Error, OSError) as exc:
            raise JournalWriteError(
                f"{self.path}: cannot write to the journal ({exc}); nothing of this write was kept"
            ) from None


@dataclass(frozen=True, slots=True)
class JournalFrame:
    """A journalled line: host time, direction and the line escaped as in the capture format."""

    t: float
    dir: str
    line: str
    game_id: int | None


class JournalView:
    """A journal opened read-only and without the lock: recall, verify and export use it.

    It works beside a running daemon (which holds the lock) and with the
    daemon stopped; everything it reads comes from one snapshot.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise JournalError(f"{path}: no journal there")
        try:
            self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            self._db.isolation_level = None
            found = _tables(self._db)
            self._db.execute("BEGIN")  # one snapshot for every read that follows
        except sqlite3.Error as exc:
            raise JournalError(f"{path}: cannot read the journal: {exc}") from None
        expected = _expected_tables()
        if not found.keys() & expected.keys():
            raise JournalError(f"{path}: not a wheeld journal")
        #: A journal from before the alarms table reads as one without alarms.
        self._has_alarms = "alarms" in found
        if not self._has_alarms:
            del expected["alarms"]
        if any(found.get(name) != columns for name, columns in expected.items()):
            raise JournalError(
                f"{path}: written by an older wheeld: let the daemon open it once to upgrade it"
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JournalView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    def walks(self) -> dict[str, ChainWalk]:
        """Every hash chain walked, by table."""
        try:
            return {
                table: _walk(self._db, table)
                for table in CHAINED
                if table != "alarms" or self._has_alarms
            }
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    def broken_segments(self) -> list[str]:
        """The breaks start-ups found and began new segments after, one line each, oldest first."""
        rows = self._read(
            "SELECT at, after_id, problem FROM anchors WHERE reason = ? ORDER BY id", (BROKEN,)
        )
        return [
            f"{problem} (found at start-up at {_iso(at)}; a new segment began after row {after})"
            for at, after, problem in rows
        ]

    def decisions(self) -> list[tuple[int, int, str]]:
        """Every decision kept: (row id, game id, payload), in the order decided."""
        return [
            tuple(row)
            for row in self._read("SELECT id, game_id, payload FROM decisions ORDER BY id")
        ]

    def chain_state(self) -> ChainState | None:
        """Where the message chain stood at the last decision, or None when never stored."""
        rows = self._read("SELECT value FROM state WHERE key = 'chain'")
        if not rows:
            return None
        try:
            return ChainState.from_dict(json.loads(rows[0][0]))
        except (ValueError, AttributeError):
            raise JournalError(f"{self.path}: the stored chain state is malformed") from None

    def game_ids(self, last: int, game_id: int | None = None) -> list[int]:
        """The last ``last`` games (ending with ``game_id`` if given), in play order."""
        bound = (game_id,) if game_id is not None else (_GAME_ID_LIMIT,)
        rows = self._read(
            "SELECT game_id FROM (SELECT game_id, MIN(id) AS first FROM decisions"
            " WHERE game_id <= ? GROUP BY game_id) ORDER BY first DESC LIMIT ?",
            (*bound, last),
        )
        return [row[0] for row in reversed(rows)]

    def events(self, game_ids: Sequence[int]) -> dict[int, list[str]]:
        """Each game's published payloads, in order."""
        found: dict[int, list[str]] = {game_id: [] for game_id in game_ids}
        for game_id, payload in self._read(
            f"SELECT game_id, payload FROM decisions WHERE game_id IN ({_marks(game_ids)})"
            " ORDER BY id",
            tuple(game_ids),
        ):
            found[game_id].append(payload)
        return found

    def wheel_pockets(self) -> int | None:
        """The pockets the retained ``<base>/wheel`` message says (37 or 38), or None."""
        for (payload,) in self._read("SELECT payload FROM retained WHERE topic LIKE '%/wheel'"):
            try:
                value = json.loads(payload)
            except ValueError:
                continue
            pockets = value.get("pockets") if isinstance(value, dict) else None
            if pockets in (37, 38) and type(pockets) is int:
                return int(pockets)
        return None

    def alarms(self) -> list[tuple[int, float, str, str, str]]:
        """Every alarm kept: (row id, at, code, state, payload), oldest first."""
        if not self._has_alarms:
            return []
        return [
            tuple(row)
            for row in self._read("SELECT id, at, code, state, payload FROM alarms ORDER BY id")
        ]

    def frames(self, game_ids: Sequence[int]) -> dict[int, list[JournalFrame]]:
        """The lines that crossed the link during each game, in order."""
        found: dict[int, list[JournalFrame]] = {game_id: [] for game_id in game_ids}
        for row in self._read(
            f"SELECT t, dir, line, game_id FROM frames WHERE game_id IN ({_marks(game_ids)})"
            " ORDER BY id",
            tuple(game_ids),
        ):
            found[row[3]].append(JournalFrame(*row))
        return found


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


#: Where a chain begins: no row yet, and the empty string as the previous hash.
_GENESIS: tuple[int, str] = (0, "")


def link_hash(previous: str, row: Sequence[Any]) -> str:
    """A chained row's hash: SHA-256, hex, of the previous row's hash then the row.

    The row is the JSON array of its chained columns (``CHAINED``) in RFC 8785
    canonical form; the first row's previous hash is the empty string.
    """
    return hashlib.sha256(previous.encode("ascii") + rfc8785.dumps(list(row))).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """Where a journal's hash chain fails: the table, the row (and its game) and why."""

    table: str
    row_id: int
    game_id: int | None
    why: str
    #: Behind a segment begun at a start-up that found it already (it is still a break).
    acknowledged: bool = False

    def describe(self) -> str:
        game = f" (game {self.game_id})" if self.game_id is not None else ""
        return f"{self.table} row {self.row_id}{game}: {self.why}"


@dataclass(frozen=True, slots=True)
class ChainWalk:
    """A whole chained table walked: its breaks and the id and hash the next row links to."""

    breaks: list[ChainBreak]
    end: tuple[int, str]


def _stored_heads(db: sqlite3.Connection) -> dict[str, tuple[int, str]]:
    row = db.execute("SELECT value FROM state WHERE key = 'journal_heads'").fetchone()
    if row is None:
        return {}
    try:
        stored = json.loads(row[0])
        return {
            table: (int(stored[table][0]), str(stored[table][1]))
            for table in CHAINED
            if table in stored
        }
    except (ValueError, TypeError, KeyError, IndexError):
        return {}  # reported as a head that does not match


def _put_heads(db: sqlite3.Connection, heads: dict[str, tuple[int, str]]) -> None:
    """Store each chain's last id and hash: a deleted last row is told by them."""
    db.execute(
        "INSERT INTO state (key, value) VALUES ('journal_heads', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (json.dumps({table: list(head) for table, head in sorted(heads.items())}),),
    )


def _walk(db: sqlite3.Connection, table: str) -> ChainWalk:
    """Check every link of one chained table, its anchors and its stored head."""
    anchors = db.execute(
        "SELECT after_id, hash, reason FROM anchors WHERE chain = ? ORDER BY after_id, id",
        (table,),
    ).fetchall()
    segments = [after for after, _, reason in anchors if reason == BROKEN]
    pending = list(reversed(anchors))
    breaks: list[ChainBreak] = []
    last_id, previous = _GENESIS
    game_column = CHAINED[table].index("game_id") if "game_id" in CHAINED[table] else None
    cursor = db.execute(f"SELECT {', '.join(CHAINED[table])}, hash FROM {table} ORDER BY id")
    for row in cursor:
        row_id, stored = row[0], row[-1]
        while pending and pending[-1][0] < row_id:
            after, anchored, _ = pending.pop()
            if after >= last_id:  # an anchor behind rows still kept changes nothing
                last_id, previous = after, anchored
        why = None
        if row_id != last_id + 1:
            missing = (
                f"row {last_id + 1}"
                if row_id == last_id + 2
                else f"rows {last_id + 1}-{row_id - 1}"
            )
            why = f"{missing} before it missing (deleted)"
        elif stored != link_hash(previous, row[:-1]):
            why = "hash does not match: the row was edited, moved, or one before it changed"
        if why is not None:
            breaks.append(
                ChainBreak(
                    table,
                    row_id,
                    None if game_column is None else row[game_column],
                    why,
                    any(row_id <= after for after in segments),
                )
            )
        # Go on from what is stored: each independent edit is found, not only the first.
        last_id, previous = row_id, stored if isinstance(stored, str) else ""
    for after, anchored, _ in reversed(pending):
        if after >= last_id:
            last_id, previous = after, anchored
    head = _stored_heads(db).get(table, _GENESIS)
    if head != (last_id, previous):
        if head[0] > last_id:
            why = f"rows after {last_id} missing (deleted): the journal's head is row {head[0]}"
        else:
            why = f"the journal's head (row {head[0]}) does not match its last row"
        breaks.append(ChainBreak(table, last_id + 1 if head[0] > last_id else last_id, None, why))
    return ChainWalk(breaks, (last_id, previous))


def _read_boot_id() -> str | None:
    """This boot's id from the kernel, or None where there is none.

    Without one, every unclean close is taken as one a power cut may have followed.
    """
    try:
        return BOOT_ID_FILE.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _lock_state_dir(state_dir: Path) -> int:
    """Hold ``lock`` exclusively for as long as the journal is open.

    flock is released by the kernel when the descriptor closes, the process
    dies included: no stale lock to clean up after a crash.
    """
    lock_path = state_dir / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise JournalError(f"{lock_path}: cannot open the lock file: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise JournalError(f"{lock_path}: cannot lock: {exc}") from None
        who = f"another wheeld (pid {owner})" if owner.isdigit() else "another wheeld"
        raise JournalError(f"{state_dir}: {who} is using this state directory") from None
    # The pid is only for that message: a disk too full to hold it is no reason to stop.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error (the COMMIT's own included)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _rollback(db: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some errors (a full disk among them).
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _tables(db: sqlite3.Connection) -> dict[str, _Columns]:
    """Every table of a database but SQLite's own, with (name, type, notnull, pk) columns."""
    names = [
        row[0]
        for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        name: [
            (c[1], c[2], c[3], c[5])
            for c in db.execute("SELECT * FROM pragma_table_info(?)", (name,))
        ]
        for name in names
    }


def _expected_tables() -> dict[str, _Columns]:
    """wheeld's tables as SQLite describes them, from the schema itself."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        for statement in _TABLES.values():
            db.execute(statement)
        return _tables(db)
