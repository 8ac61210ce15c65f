"""The journal's tables, and how a journal an older wheeld wrote is brought up to date.

The schema's version is SQLite's ``user_version``: 0 for a journal from before
versions were kept, ``SCHEMA_VERSION`` for today's. A new journal is made with
``auto_vacuum = INCREMENTAL``, so space that retention frees goes back to the
file system; a journal made before keeps its size and reuses the space.

Upgrading an older journal adds what it lacks (tables, hash columns, indexes)
and rewrites nothing it holds: the per-line ``frames`` an older wheeld kept
stay as they are, read beside the frame blocks, until retention takes them.
Indexing a large older journal takes a while once: the daemon tells systemd
(``EXTEND_TIMEOUT_USEC``) before it starts.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from wheeld.shell.journal.chain import CHAINED, GENESIS, link_hash, put_heads, stored_heads
from wheeld.shell.journal.errors import JournalCorrupt, JournalError

SCHEMA_VERSION = 2

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
