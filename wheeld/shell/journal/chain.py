"""The journal's hash chains: each kept row linked to the one before it.

Every chained table (decisions, operator commands, alarms, frame blocks, and
the per-line frames an older wheeld kept) carries in ``hash`` the SHA-256 of
the previous row's hash and the row itself: an edited, deleted or reordered
row breaks the chain from there on, even where what it held was never signed.

A chain's head (its last row's id and hash) is stored with every write
(``journal_heads``), so a deleted last row is told too; a ``checked`` mark
says how far the chain was last walked and found whole, so a start-up walks
only what was written since (``wheeld verify`` walks everything). Rows that
retention deleted leave an anchor, the id and hash of the last one gone,
where the chain kept goes on from.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from wheeld.core.signing import canonical
from wheeld.shell.journal.codec import unpack_payload

#: The chained tables, each with the columns a row's hash covers, in order.
#: ``frame_blocks`` is hashed over its stored data instead (``block_hash``).
CHAINED: dict[str, tuple[str, ...]] = {
    "decisions": ("id", "game_id", "event", "payload"),
    "commands": ("id", "at", "name", "sender", "payload", "accepted", "outcome"),
    "alarms": ("id", "at", "code", "state", "payload"),
    "frame_blocks": ("id", "game_id", "lead", "dropped", "lines", "first_t", "last_t", "data"),
    "frames": ("id", "t", "dir", "line", "game_id"),
}
#: Anchor reasons: rows deleted by retention, or a segment begun after a break found at open.
RETENTION = "retention"
BROKEN = "broken"
#: The anchor of the ``messages`` chain where it went on past another journal's message.
FLOOR = "floor"
#: The anchors a table's own chain goes on from.
ANCHORED = (RETENTION, BROKEN)
#: Where a chain begins: no row yet, and the empty string as the previous hash.
GENESIS: tuple[int, str] = (0, "")


def link_hash(previous: str, row: Sequence[Any]) -> str:
    """A chained row's hash: SHA-256, hex, of the previous row's hash then the row.

    The row is the JSON array of its chained columns (``CHAINED``) in RFC 8785
    canonical form; the first row's previous hash is the empty string.
    """
    return hashlib.sha256(previous.encode("ascii") + canonical(list(row))).hexdigest()


def block_hash(previous: str, block: Sequence[Any]) -> str:
    """A frame block's hash: SHA-256, hex, of the previous hash, its header and its data.

    ``block`` is its ``CHAINED`` columns. The header is its id, game (``-``
    for none), lines before the game, noise lines dropped, lines, first and
    last time (``repr``), space-separated, and a newline; the data is the block
    as stored (``codec.encode_block``): walking a year of blocks hashes them
    without decompressing one.
    """
    block_id, game_id, lead, dropped, lines, first_t, last_t, data = block
    if not isinstance(data, bytes):
        raise ValueError("a frame block that is not a blob")
    game = "-" if game_id is None else game_id
    header = f"{block_id} {game} {lead} {dropped} {lines} {first_t!r} {last_t!r}\n"
    return hashlib.sha256(previous.encode("ascii") + header.encode("ascii") + data).hexdigest()


def stored_hash(link: str) -> bytes:
    """A hash as a row keeps it: its 32 bytes (an older wheeld kept the 64 hex digits)."""
    return bytes.fromhex(link)


def hex_hash(stored: object) -> str:
    """A row's hash as the chain links it: hex, whether kept as bytes or as text."""
    if isinstance(stored, bytes):
        return stored.hex()
    return stored if isinstance(stored, str) else ""


def row_hash(table: str, previous: str, row: Sequence[Any]) -> str:
    """The hash a stored row of ``table`` must carry (its ``CHAINED`` columns, as stored)."""
    if table == "frame_blocks":
        return block_hash(previous, row)
    if table == "decisions":
        row = (*row[:3], unpack_payload(row[3]))
    return link_hash(previous, row)


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
    """A chained table walked: its breaks and the id and hash the next row links to."""

    breaks: list[ChainBreak]
    end: tuple[int, str]


def stored_heads(db: sqlite3.Connection, key: str = "journal_heads") -> dict[str, tuple[int, str]]:
    """Each chain's last id and hash as stored under ``key`` (``checked`` for the walked mark)."""
    row = db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
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


def put_heads(
    db: sqlite3.Connection, heads: dict[str, tuple[int, str]], key: str = "journal_heads"
) -> None:
    """Store each chain's last id and hash: a deleted last row is told by them."""
    db.execute(
        "INSERT INTO state (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, json.dumps({table: list(head) for table, head in sorted(heads.items())})),
    )


def walk(
    db: sqlite3.Connection,
    table: str,
    start: tuple[int, str] = GENESIS,
    *,
    head: tuple[int, str] | None = None,
) -> ChainWalk:
    """Check every link of ``table`` after ``start``, its anchors, and that it ends at ``head``.

    ``start`` is a row known good (the ``checked`` mark), GENESIS for the
    whole chain; ``head`` is where the chain must end, by default the stored
    head. Rows are read one at a time: memory does not grow with the table.
    """
    breaks: list[ChainBreak] = []
    anchors: list[tuple[int, str, str]] = []
    for anchor_id, after, anchored, reason in db.execute(
        "SELECT id, after_id, hash, reason FROM anchors WHERE chain = ? ORDER BY after_id, id",
        (table,),
    ):
        if type(after) is not int or not isinstance(anchored, str) or reason not in ANCHORED:
            breaks.append(ChainBreak(table, 0, None, f"anchor {anchor_id} is malformed"))
        elif after >= start[0]:
            anchors.append((after, anchored, reason))
    segments = [after for after, _, reason in anchors if reason == BROKEN]
    pending = list(reversed(anchors))
    kept = 0  # rows of this walk so far: retention only ever lets go of what precedes them all
    last_id, previous = start
    game_column = CHAINED[table].index("game_id") if "game_id" in CHAINED[table] else None
    # A block's data read as the bytes it is, even where an edit made it text.
    columns = ", ".join(CHAINED[table]).replace("data", "CAST(data AS BLOB)")
    cursor = db.execute(
        f"SELECT {columns}, hash FROM {table} WHERE id > ? ORDER BY id", (start[0],)
    )
    for row in cursor:
        row_id, stored = row[0], hex_hash(row[-1])
        while pending and pending[-1][0] < row_id:
            after, anchored, reason = pending.pop()
            # An anchor behind rows still kept changes nothing; nor does a retention
            # anchor after one (it would hide rows deleted from the middle).
            if after >= last_id and not (reason == RETENTION and kept):
                last_id, previous = after, anchored
        why = None
        if row_id != last_id + 1:
            missing = (
                f"row {last_id + 1}"
                if row_id == last_id + 2
                else f"rows {last_id + 1}-{row_id - 1}"
            )
            why = f"{missing} before it missing (deleted)"
        else:
            try:
                if stored != row_hash(table, previous, row[:-1]):
                    why = "hash does not match: the row was edited, moved, or one before it changed"
            except ValueError as exc:
                why = f"unreadable: {exc}"
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
        last_id, previous = row_id, stored
        kept += 1
    for after, anchored, reason in reversed(pending):
        if after >= last_id and not (reason == RETENTION and kept):
            last_id, previous = after, anchored
    expected = head if head is not None else stored_heads(db).get(table, GENESIS)
    if expected != (last_id, previous):
        if expected[0] > last_id:
            why = f"rows after {last_id} missing (deleted): the journal's head is row {expected[0]}"
        else:
            why = f"the journal's head (row {expected[0]}) does not match its last row"
        row_id = last_id + 1 if expected[0] > last_id else last_id
        breaks.append(ChainBreak(table, row_id, None, why))
    return ChainWalk(breaks, (last_id, previous))


def insert_chained(
    db: sqlite3.Connection, heads: dict[str, tuple[int, str]], table: str, values: Sequence[Any]
) -> int:
    """Insert a row of a chained table (but ``frame_blocks``), linked to the one before it.

    ``values`` are the ``CHAINED`` columns after ``id``, as the hash covers
    them; ``stored`` replaces the last of them on disk (a compressed payload).
    Advances ``heads``; returns the row's id.
    """
    return insert_stored(db, heads, table, values, values)


def insert_stored(
    db: sqlite3.Connection,
    heads: dict[str, tuple[int, str]],
    table: str,
    values: Sequence[Any],
    stored: Sequence[Any],
) -> int:
    """Insert ``stored`` (the row as kept on disk), hashed over ``values`` (as it reads)."""
    columns = CHAINED[table][1:]
    cursor = db.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        tuple(stored),
    )
    row_id = cursor.lastrowid
    assert row_id is not None
    link = link_hash(heads.get(table, GENESIS)[1], (row_id, *values))
    db.execute(f"UPDATE {table} SET hash = ? WHERE id = ?", (stored_hash(link), row_id))
    heads[table] = (row_id, link)
    return row_id


def iter_rows(db: sqlite3.Connection, sql: str, parameters: tuple[Any, ...] = ()) -> Iterator[Any]:
    """A query's rows one at a time (a cursor), for readers that must not hold them all."""
    yield from db.execute(sql, parameters)
