"""The outbox: messages decided and journalled, waiting for the broker's acknowledgement.

An entry leaves it only once the broker has acknowledged it, so nothing
decided is lost to a broker outage or a crash. ``retained`` remembers the
last acknowledged payload of every retained topic, to say again after a
broker that forgot them comes back.

``Outbox`` is the journal's hold on both: each of its writes is a commit
of its own, without an fsync (``durability``). A decision's messages are
queued in the decision's own commit instead (``enqueue``, by ``Journal.record``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wheeld.shell.journal.errors import unreadable
from wheeld.shell.journal.superseded import SUPERSEDED_KEY, game_ids_of, merged, parse
from wheeld.table.effects import Outgoing

if TYPE_CHECKING:
    from wheeld.shell.journal.connection import Connection


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A message waiting for the broker's acknowledgement."""

    id: int
    message: Outgoing


def enqueue(db: sqlite3.Connection, message: Outgoing) -> int:
    """Add ``message`` (inside a transaction); its entry's id."""
    cursor = db.execute(
        "INSERT INTO outbox (topic, payload, qos, retain) VALUES (?, ?, ?, ?)",
        (message.topic, message.payload, message.qos, int(message.retain)),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def pending(db: sqlite3.Connection, after: int, limit: int) -> list[OutboxEntry]:
    """Unacknowledged entries after ``after``, in the order they were decided."""
    rows = db.execute(
        "SELECT id, topic, payload, qos, retain FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
        (after, limit),
    ).fetchall()
    return [OutboxEntry(r[0], Outgoing(r[1], r[2], r[3], bool(r[4]))) for r in rows]


def acknowledge(db: sqlite3.Connection, entry: OutboxEntry) -> None:
    """Drop ``entry`` and remember it when retained (inside a transaction)."""
    db.execute("DELETE FROM outbox WHERE id = ?", (entry.id,))
    if entry.message.retain:
        db.execute(
            "INSERT INTO retained (topic, payload) VALUES (?, ?) "
            "ON CONFLICT (topic) DO UPDATE SET payload = excluded.payload",
            (entry.message.topic, entry.message.payload),
        )


def retained(db: sqlite3.Connection) -> list[Outgoing]:
    """The last acknowledged payload of every retained topic, to republish."""
    rows = db.execute("SELECT topic, payload FROM retained ORDER BY topic").fetchall()
    return [Outgoing(topic, payload, 1, True) for topic, payload in rows]


class Outbox:
    """The publisher's queue in the journal, and the retained state it acknowledged."""

    def __init__(self, sql: Connection) -> None:
        self._sql = sql

    def enqueue(self, messages: Sequence[Outgoing]) -> None:
        """Queue messages that need no durability of their own (wheel state, table).

        A crash of the daemon loses nothing (the commit is in the write-ahead
        log), but a power cut before the next durable commit can lose them.
        Anything that must survive that, alarms included, goes through
        ``Journal.record`` instead, with the decisions it came with.
        """
        with self._sql.writing(durable=False):
            for message in messages:
                enqueue(self._sql.db, message)

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacknowledged messages in the order they were decided."""
        try:
            return pending(self._sql.db, after, limit)
        except sqlite3.Error as exc:
            raise unreadable(self._sql.path, exc) from None

    def acknowledge(self, *entries: OutboxEntry) -> None:
        """The broker has them: drop them from the outbox (and remember retained state),
        in one commit.

        If a crash forgets the acknowledgement, the message is published again,
        and consumers drop repeats by game id.
        """
        with self._sql.writing(durable=False):
            for entry in entries:
                acknowledge(self._sql.db, entry)

    def supersede(self, topics: Sequence[str]) -> int:
        """Let go of what waits on ``topics``, and of their retained state; the entries dropped.

        For a journal another has gone on past (``Effects.superseded``): its
        game messages never went out and must not now; its retained game state
        is behind the broker's and must not be said again. The games they were
        of are kept as superseded (``superseded``): recall never serves them.
        """
        marks = ", ".join("?" * len(topics))
        db = self._sql.db
        with self._sql.writing(durable=False):
            # The games whose own messages (``<base>/game``) never went out: decided here,
            # announced by the other. (A game whose events went out and only its retained
            # copies did not, was this table's announcement.)
            games_topics = [topic for topic in topics if topic.endswith("/game")]
            payloads = db.execute(  # read a row at a time: an outbox after a long outage
                f"SELECT payload FROM outbox WHERE topic IN ({', '.join('?' * len(games_topics))})",
                tuple(games_topics),
            )
            games = game_ids_of(payload for (payload,) in payloads)
            if games:
                kept = parse(self._sql.get(SUPERSEDED_KEY))
                ranges = merged(kept, games)
                self._sql.put(SUPERSEDED_KEY, json.dumps(ranges))
            dropped: int = db.execute(
                f"DELETE FROM outbox WHERE topic IN ({marks})", tuple(topics)
            ).rowcount
            db.execute(f"DELETE FROM retained WHERE topic IN ({marks})", tuple(topics))
        return dropped

    def depth(self) -> int:
        """How many messages wait for the broker's acknowledgement."""
        return int(self._sql.read("SELECT COUNT(*) FROM outbox")[0][0])

    def retained(self) -> list[Outgoing]:
        """The last acknowledged payload of every retained topic, to republish."""
        try:
            return retained(self._sql.db)
        except sqlite3.Error as exc:
            raise unreadable(self._sql.path, exc) from None
