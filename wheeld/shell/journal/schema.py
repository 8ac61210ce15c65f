"""The journal's tables, and how a journal an older wheeld wrote is brought up to date.

The schema's version is SQLite's ``user_version``: 0 for a journal from before
versions were kept, ``SCHEMA_VERSION`` for today's. A new journal is made with
``auto_vacuum = INCREMENTAL``, so space that retention frees goes back to the
file system; a journal made before keeps its size and reuses the space.

Upgrading an older journal adds what it lacks (tables, hash columns, indexes):
the per-line ``frames`` an older wheeld kept stay as they are, read beside the
frame blocks, until retention takes them. One thing it rewrites: a decision's
``event`` is the contract's name of it (``result``, ``no_spin``, ``spinning``,
``no_more_bets``: what the payload's own ``event`` says), where an older wheeld
kept its Python class's (``Result``...), so that renaming a class changes
nothing on disk. The rows from the first renamed on are hashed into the chain
again as they now read, a batch a transaction (``EventNames``); a row whose
link did not hold before still does not. Indexing or renaming a large older
journal takes a while once: the daemon tells systemd (``EXTEND_TIMEOUT_USEC``)
before it starts.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from wheeld.shell.journal.chain import (
    CHAINED,
    GENESIS,
    hex_hash,
    link_hash,
    put_heads,
    stored_hash,
    stored_heads,
)
from wheeld.shell.journal.codec import unpack_payload
from wheeld.shell.journal.errors import JournalCorrupt, JournalError

#: 3: decisions' ``event`` by the contract's names. 2: frame blocks, hashes as bytes.
SCHEMA_VERSION = 3
#: The names a wheeld before schema 3 kept decisions' ``event`` by (its Python classes,
#: as they were then: fixed here, whatever the classes are called now), and the
#: contract's name of each.
LEGACY_EVENT_NAMES: dict[str, str] = {
    "Spinning": "spinning",
    "NoMoreBets": "no_more_bets",
    "Result": "result",
    "NoSpin": "no_spin",
}
#: Decisions renamed (and hashed again) a transaction at a time: neither the write-ahead
#: log nor a crash's loss grows with the journal.
RENAME_BATCH = 2000

#: wheeld's tables, each with the statement that creates it.
TABLES: dict[str, str] = {
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
    "frame_blocks": """
CREATE TABLE frame_blocks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    game_id INTEGER,
    first_t REAL NOT NULL,
    last_t REAL NOT NULL,
    lines INTEGER NOT NULL,
    lead INTEGER NOT NULL,
    dropped INTEGER NOT NULL,
    data BLOB NOT NULL,
    hash TEXT
)
""",
    "frame_tail": """
CREATE TABLE frame_tail (
    id INTEGER PRIMARY KEY,
    t REAL NOT NULL,
    dir TEXT NOT NULL,
    line TEXT NOT NULL,
    game_id INTEGER,
    noise INTEGER NOT NULL
)
""",
}
#: The per-line frames of a wheeld before frame blocks: read and pruned, never written.
LEGACY_TABLES: dict[str, str] = {
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
}
#: Every lookup by game is indexed: recall never scans a year.
INDEXES: dict[str, str] = {
    "decisions_by_game": "CREATE INDEX IF NOT EXISTS decisions_by_game ON decisions (game_id)",
    "frame_blocks_by_game": (
        "CREATE INDEX IF NOT EXISTS frame_blocks_by_game ON frame_blocks (game_id)"
    ),
}
LEGACY_INDEXES: dict[str, str] = {
    "frames_by_game": "CREATE INDEX IF NOT EXISTS frames_by_game ON frames (game_id)",
}
#: Tables an older journal may lack, made when missing (nothing was in them).
ADDED_TABLES = ("commands", "anchors", "alarms", "frame_blocks", "frame_tail")

Columns = list[tuple[str, str, int, int]]


def tables(db: sqlite3.Connection) -> dict[str, Columns]:
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


def expected_tables() -> dict[str, Columns]:
    """wheeld's tables (the legacy ones too) as SQLite describes them, from the schema itself."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        for statement in (*TABLES.values(), *LEGACY_TABLES.values()):
            db.execute(statement)
        return tables(db)


def version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error (the COMMIT's own included)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


def rollback(db: sqlite3.Connection) -> None:
    # SQLite rolls back by itself after some errors (a full disk among them).
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


class Schema:
    """Checks a journal's tables and brings an older journal's up to date."""

    def __init__(
        self, db: sqlite3.Connection, path: Path, corrupt: Callable[[str], JournalError]
    ) -> None:
        self.db = db
        self.path = path
        #: The error for a journal that is damaged: names where game ids would continue.
        self.corrupt = corrupt

    def prepare(self) -> str | None:
        """Make, check or upgrade the tables; what was done ("created", "upgraded") or None.

        Raises JournalError when the file is not a wheeld journal or its tables are not wheeld's.
        """
        db = self.db
        found = tables(db)
        if not found:
            self._create()
            return "created"
        expected = expected_tables()
        if not found.keys() & expected.keys():
            raise JournalCorrupt(
                f"{self.path}: not a wheeld journal (it holds the tables"
                f" {', '.join(sorted(found))}); give wheeld its own state directory"
            )
        upgraded = version(db) < SCHEMA_VERSION
        missing = [name for name in TABLES if name not in found]
        if missing and set(missing) <= set(ADDED_TABLES):
            self._create(only=missing)
            upgraded = True
            found = tables(db)
        unchained = [
            name for name in CHAINED if name in found and found[name] == expected[name][:-1]
        ]
        if unchained:
            self._chain_older_rows(unchained)
            upgraded = True
            found = tables(db)
        for name, columns in expected.items():
            if name not in found:
                if name in LEGACY_TABLES:
                    continue
                raise self.corrupt(f"table {name} is missing")
            if found[name] != columns:
                raise self.corrupt(f"table {name} does not have wheeld's columns")
        for name in found.keys() - expected.keys():
            raise self.corrupt(f"unexpected table {name}")
        if upgraded or version(db) < SCHEMA_VERSION:
            EventNames(db, self.path).rename()
            self._index(found)
            return "upgraded"
        return None

    def _create(self, only: Sequence[str] = ()) -> None:
        """wheeld's tables (or ``only`` those) in one transaction: all or none."""
        db = self.db
        try:
            with transaction(db):
                for name, statement in TABLES.items():
                    if not only or name in only:
                        db.execute(statement)
                if not only:
                    for statement in INDEXES.values():
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot create the journal: {exc}") from None

    def _index(self, found: dict[str, Columns]) -> None:
        """The indexes every lookup by game needs, then today's version: one transaction."""
        db = self.db
        try:
            with transaction(db):
                for statement in INDEXES.values():
                    db.execute(statement)
                if "frames" in found:
                    for statement in LEGACY_INDEXES.values():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot upgrade the journal: {exc}") from None

    def _chain_older_rows(self, names: Sequence[str]) -> None:
        """Give a journal from before the hash chain its ``hash`` columns, chaining what it holds.

        The rows kept so far are chained as they are found: from here on an
        edit, a deletion or a reordering of any of them is detected.
        """
        db = self.db
        try:
            with transaction(db):
                heads = stored_heads(db)
                for table in names:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN hash TEXT")
                    head = GENESIS
                    links: list[tuple[str, int]] = []
                    for row in db.execute(
                        f"SELECT {', '.join(CHAINED[table])} FROM {table} ORDER BY id"
                    ).fetchall():
                        head = (row[0], link_hash(head[1], row))
                        links.append((head[1], row[0]))
                    db.executemany(f"UPDATE {table} SET hash = ? WHERE id = ?", links)
                    heads[table] = head
                put_heads(db, heads)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot upgrade the journal: {exc}") from None


class EventNames:
    """Decisions kept by an older wheeld's class names, renamed to the contract's.

    The ``event`` column is hashed into the decisions' chain, so every row
    from the first renamed one on is hashed again as it now reads, linked to
    the one before it as it was: a row whose link held still does (to the
    row or anchor it followed), one whose link did not still does not (its
    hash is left as found). The anchor of a segment and the chain's stored
    heads that name a row take its new hash.

    A batch of rows is one transaction, with where it got to (``_PROGRESS``
    in the state table): a crash goes on from there at the next open.
    """

    _PROGRESS = "renaming_events"

    def __init__(self, db: sqlite3.Connection, path: Path, batch: int = RENAME_BATCH) -> None:
        self.db = db
        self.path = path
        self.batch = batch

    def rename(self) -> int:
        """Rename what needs it; how many rows were read (from the first renamed on)."""
        try:
            start = self._start()
            if start is None:
                return 0
            after, previous = start
            anchors = self._anchors()
            done = 0
            while True:
                with transaction(self.db):
                    got = self._step(after, previous, anchors)
                if got is None:
                    return done
                after, previous, count = got
                done += count
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"{self.path}: cannot upgrade the journal: {exc!r}") from None

    def _start(self) -> tuple[int, tuple[str, str]] | None:
        """The row after which to go on, and its hash (as it was, as it is now)."""
        db = self.db
        stored = db.execute("SELECT value FROM state WHERE key = ?", (self._PROGRESS,)).fetchone()
        if stored is not None:
            progress = json.loads(stored[0])
            return int(progress["after"]), (str(progress["old"]), str(progress["new"]))
        marks = ", ".join("?" * len(LEGACY_EVENT_NAMES))
        first = db.execute(
            f"SELECT MIN(id) FROM decisions WHERE event IN ({marks})", tuple(LEGACY_EVENT_NAMES)
        ).fetchone()[0]
        if first is None:
            return None
        before = db.execute(
            "SELECT id, hash FROM decisions WHERE id < ? ORDER BY id DESC LIMIT 1", (first,)
        ).fetchone()
        if before is None:
            return first - 1, (GENESIS[1], GENESIS[1])
        kept = hex_hash(before[1])  # not renamed: the same before and after
        return int(before[0]), (kept, kept)

    def _anchors(self) -> dict[int, list[tuple[str, str]]]:
        """The decisions' anchors by the row they stand after, what a row may link to: their
        hash as it was and as it is (the same but where it names a row hashed again)."""
        found: dict[int, list[tuple[str, str]]] = {}
        for after, anchored in self.db.execute(
            "SELECT after_id, hash FROM anchors WHERE chain = 'decisions'"
        ):
            if type(after) is int and isinstance(anchored, str):
                found.setdefault(after, []).append((anchored, anchored))
        return found

    def _step(
        self, after: int, previous: tuple[str, str], anchors: dict[int, list[tuple[str, str]]]
    ) -> tuple[int, tuple[str, str], int] | None:
        """One batch of rows after ``after``, in the transaction open; None when none is left."""
        db = self.db
        rows = db.execute(
            "SELECT id, game_id, event, payload, hash FROM decisions WHERE id > ? ORDER BY id"
            " LIMIT ?",
            (after, self.batch),
        ).fetchall()
        if not rows:
            db.execute("DELETE FROM state WHERE key = ?", (self._PROGRESS,))
            return None
        heads = {key: stored_heads(db, key) for key in ("journal_heads", "checked")}
        updates: list[tuple[str, Any, int]] = []
        for row_id, game_id, event, payload, kept in rows:
            old = hex_hash(kept)
            name = LEGACY_EVENT_NAMES.get(event, event)
            new = self._relinked((row_id, game_id, event, payload), name, old, previous, anchors)
            if new != old:
                updates.append((name, stored_hash(new) if isinstance(kept, bytes) else new, row_id))
                if row_id in anchors:
                    anchors[row_id] = [
                        (was, new if was == old else now) for was, now in anchors[row_id]
                    ]
                    db.execute(
                        "UPDATE anchors SET hash = ? WHERE chain = 'decisions' AND after_id = ?"
                        " AND hash = ?",
                        (new, row_id, old),
                    )
                for key, chains in heads.items():
                    if chains.get("decisions") == (row_id, old):
                        chains["decisions"] = (row_id, new)
                        put_heads(db, chains, key)
            elif name != event:
                updates.append((name, kept, row_id))
            after, previous = row_id, (old, new)
        db.executemany("UPDATE decisions SET event = ?, hash = ? WHERE id = ?", updates)
        progress = {"after": after, "old": previous[0], "new": previous[1]}
        db.execute(
            "INSERT INTO state (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (self._PROGRESS, json.dumps(progress)),
        )
        return after, previous, len(rows)

    @staticmethod
    def _relinked(
        row: tuple[Any, ...],
        name: str,
        old: str,
        previous: tuple[str, str],
        anchors: dict[int, list[tuple[str, str]]],
    ) -> str:
        """The row's hash as it reads renamed, linked to what its old hash was linked to.

        What it may have followed: the row before it (``previous``: its hash as it
        was and as it is now), an anchor (a deleted row's hash, unchanged, or a
        segment's, which names a row), or the chain's start.
        """
        row_id, game_id, event, payload = row
        try:
            text = unpack_payload(payload)
        except ValueError:
            return old  # unreadable: a break the walk names, as it did
        candidates = [previous]
        candidates += [pair for at, pairs in anchors.items() if at < row_id for pair in pairs]
        candidates.append((GENESIS[1], GENESIS[1]))
        for was, now in candidates:
            if link_hash(was, (row_id, game_id, event, text)) == old:
                return link_hash(now, (row_id, game_id, name, text))
        return old  # its link did not hold: it still does not
