"""The outbox: messages decided and journalled, waiting for the broker's acknowledgement.

An entry leaves it only once the broker has acknowledged it, so nothing
decided is lost to a broker outage or a crash. ``retained`` remembers the
last acknowledged payload of every retained topic, to say again after a
broker that forgot them comes back.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from wheeld.table.effects import Outgoing


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
