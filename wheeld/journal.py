"""The journal: every decision and the engine's state, durable before publication.

SQLite in WAL mode with ``synchronous=FULL``: a commit is on disk (fsync'd)
when ``record`` returns. The ``outbox`` table is the publisher's queue: an
entry leaves it only once the broker has acknowledged it, so nothing decided
is lost to a broker outage, a crash or a power cut.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from wheeld.engine import EngineState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    game_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    game_id INTEGER PRIMARY KEY,
    number TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    payload TEXT NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS retained (
    topic TEXT PRIMARY KEY,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class JournalError(Exception):
    """The journal cannot be opened or read; the message names the file."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One MQTT message to publish."""

    topic: str
    payload: str
    qos: int = 1
    retain: bool = False


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A message waiting for the broker's acknowledgement."""

    id: int
    message: Outgoing


@dataclass(frozen=True, slots=True)
class GameRecord:
    """A game decision as journalled: its id, event name and published payload."""

    game_id: int
    event: str
    payload: str
    number: str | None = None


class Journal:
    """The daemon's durable memory: decisions, engine state and the outbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._durable = True
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open journal: {exc}") from None

    def close(self) -> None:
        """Checkpoint and close."""
        self._db.close()

    # -- state -------------------------------------------------------------

    def load_state(self) -> EngineState | None:
        """The engine state stored by the last run, if any."""
        row = self._db.execute("SELECT value FROM state WHERE key = 'engine'").fetchone()
        if row is None:
            return None
        try:
            return EngineState.from_dict(json.loads(row[0]))
        except (ValueError, TypeError) as exc:
            raise JournalError(f"{self.path}: {exc}") from None

    def save_state(self, state: EngineState) -> None:
        """Store the engine state on its own (no decision came with the change)."""
        with self._transaction():
            self._put_state(state)

    def _put_state(self, state: EngineState) -> None:
        self._db.execute(
            "INSERT INTO state (key, value) VALUES ('engine', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (json.dumps(state.to_dict(), sort_keys=True),),
        )

    # -- decisions -----------------------------------------------------------

    def record(
        self, games: list[GameRecord], messages: list[Outgoing], state: EngineState
    ) -> list[int]:
        """Write decisions, their messages and the new state in one durable commit.

        Returns the outbox ids of the messages, in order.
        """
        with self._transaction():
            for game in games:
                self._db.execute(
                    "INSERT INTO decisions (game_id, event, payload) VALUES (?, ?, ?)",
                    (game.game_id, game.event, game.payload),
                )
                if game.number is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO results (game_id, number) VALUES (?, ?)",
                        (game.game_id, game.number),
                    )
            ids = [self._enqueue(message) for message in messages]
            self._put_state(state)
        return ids

    def enqueue(self, messages: list[Outgoing]) -> None:
        """Queue messages that are not decisions (wheel state, alarms, announcements).

        Committed without an fsync of their own: they become durable with the
        next decision, and a crash before that loses nothing a game needs.
        """
        with self._transaction(durable=False):
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
        rows = self._db.execute(
            "SELECT number FROM results ORDER BY game_id DESC LIMIT ?", (length,)
        )
        return [row[0] for row in rows]

    def decisions(self) -> list[tuple[int, str, str]]:
        """Every journalled game decision: (game id, event, payload), oldest first."""
        return list(self._db.execute("SELECT game_id, event, payload FROM decisions ORDER BY id"))

    # -- the outbox ------------------------------------------------------------

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacknowledged messages in the order they were decided."""
        rows = self._db.execute(
            "SELECT id, topic, payload, qos, retain FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
            (after, limit),
        )
        return [OutboxEntry(r[0], Outgoing(r[1], r[2], r[3], bool(r[4]))) for r in rows]

    def acknowledge(self, entry: OutboxEntry) -> None:
        """The broker has it: drop it from the outbox (and remember retained state).

        No fsync: if a crash forgets the acknowledgement, the message is published
        again, and consumers drop repeats by game id.
        """
        with self._transaction(durable=False):
            self._db.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
            if entry.message.retain:
                self._db.execute(
                    "INSERT INTO retained (topic, payload) VALUES (?, ?) "
                    "ON CONFLICT (topic) DO UPDATE SET payload = excluded.payload",
                    (entry.message.topic, entry.message.payload),
                )

    def retained(self) -> list[Outgoing]:
        """The last acknowledged payload of every retained topic, to republish."""
        rows = self._db.execute("SELECT topic, payload FROM retained ORDER BY topic")
        return [Outgoing(topic, payload, 1, True) for topic, payload in rows]

    def _transaction(self, *, durable: bool = True) -> _Transaction:
        if durable != self._durable:
            # In WAL mode FULL fsyncs the log at every commit, NORMAL leaves it to
            # the next FULL commit or checkpoint; a durable commit covers both.
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
