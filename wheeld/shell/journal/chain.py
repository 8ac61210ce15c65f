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

``Chains`` is the journal's hold on them while it runs: each head, moved on
only once the rows it names are committed, and the walk at open.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.core.signing import canonical
from wheeld.shell.journal.codec import unpack_payload
from wheeld.shell.journal.errors import JournalError, JournalWriteError

if TYPE_CHECKING:
    from wheeld.shell.journal.connection import Connection

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
#: The chains walked at open, from their ``checked`` mark. The frame blocks are
#: only checked against their head: walking one means decompressing it.
WALKED_AT_OPEN = ("decisions", "commands", "alarms")

Heads = dict[str, tuple[int, str]]


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


@dataclass(frozen=True, slots=True)
class Link:
    """A chained row as a walk reaches it: its ``CHAINED`` columns as stored, the hash it
    carries, the hash it must link to, and a break told without hashing (rows missing
    before it), if any."""

    row: tuple[Any, ...]
    stored: str
    previous: str
    missing: str | None

    def why(self, table: str) -> str | None:
        """Why the row breaks its chain, or None: its hash checked (unless rows before it
        are missing, which says it already)."""
        if self.missing is not None:
            return self.missing
        try:
            if self.stored != row_hash(table, self.previous, self.row):
                return "hash does not match: the row was edited, moved, or one before it changed"
        except ValueError as exc:
            return f"unreadable: {exc}"
        return None


class Walker:
    """One chain walked a row at a time: each row with the hash it must link to, its
    breaks as they are told, and where it ends.

    Which hash a row must link to depends only on the rows and anchors before
    it, never on whether their hashes held (a walk goes on from what is
    stored), so checking the hashes may be done elsewhere and later: ``walk``
    checks each as it comes; ``wheeld verify`` hands the decisions' to its
    worker processes beside their signatures. Rows are read one at a time:
    memory does not grow with the table.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        table: str,
        start: tuple[int, str] = GENESIS,
        *,
        head: tuple[int, str] | None = None,
    ) -> None:
        self.table = table
        self._db = db
        self._start = start
        self._head = head
        self.breaks: list[ChainBreak] = []
        anchors: list[tuple[int, str, str]] = []
        for anchor_id, after, anchored, reason in db.execute(
            "SELECT id, after_id, hash, reason FROM anchors WHERE chain = ? ORDER BY after_id, id",
            (table,),
        ):
            if type(after) is not int or not isinstance(anchored, str) or reason not in ANCHORED:
                self.breaks.append(ChainBreak(table, 0, None, f"anchor {anchor_id} is malformed"))
            elif after >= start[0]:
                anchors.append((after, anchored, reason))
        self._segments = [after for after, _, reason in anchors if reason == BROKEN]
        self._pending = list(reversed(anchors))
        self._kept = 0  # rows of this walk so far: retention only lets go of what precedes them
        self._last_id, self._previous = start
        self._game = CHAINED[table].index("game_id") if "game_id" in CHAINED[table] else None

    def links(self) -> Iterator[Link]:
        """Each row after ``start``, in order, with the hash it must link to."""
        # A block's data read as the bytes it is, even where an edit made it text.
        columns = ", ".join(CHAINED[self.table]).replace("data", "CAST(data AS BLOB)")
        pending = self._pending
        for row in self._db.execute(
            f"SELECT {columns}, hash FROM {self.table} WHERE id > ? ORDER BY id",
            (self._start[0],),
        ):
            row_id, stored = row[0], hex_hash(row[-1])
            while pending and pending[-1][0] < row_id:
                self._anchor(*pending.pop())
            last_id = self._last_id
            missing = None
            if row_id != last_id + 1:
                missing = (
                    f"row {last_id + 1}"
                    if row_id == last_id + 2
                    else f"rows {last_id + 1}-{row_id - 1}"
                )
                missing += " before it missing (deleted)"
            yield Link(row[:-1], stored, self._previous, missing)
            # Go on from what is stored: each independent edit is found, not only the first.
            self._last_id, self._previous = row_id, stored
            self._kept += 1

    def broke(self, link: Link, why: str) -> None:
        """``link``'s row breaks the chain, for ``why``."""
        row_id = link.row[0]
        game = None if self._game is None else link.row[self._game]
        behind = any(row_id <= after for after in self._segments)
        self.breaks.append(ChainBreak(self.table, row_id, game, why, behind))

    def finish(self) -> ChainWalk:
        """After the last row: the anchors past it, and the chain must end at the head."""
        for after, anchored, reason in reversed(self._pending):
            self._anchor(after, anchored, reason)
        self._pending = []
        last_id, previous = self._last_id, self._previous
        head = self._head
        expected = head if head is not None else stored_heads(self._db).get(self.table, GENESIS)
        if expected != (last_id, previous):
            if expected[0] > last_id:
                why = (
                    f"rows after {last_id} missing (deleted): the journal's head is row"
                    f" {expected[0]}"
                )
            else:
                why = f"the journal's head (row {expected[0]}) does not match its last row"
            row_id = last_id + 1 if expected[0] > last_id else last_id
            self.breaks.append(ChainBreak(self.table, row_id, None, why))
        return ChainWalk(self.breaks, (last_id, previous))

    def _anchor(self, after: int, anchored: str, reason: str) -> None:
        # An anchor behind rows still kept changes nothing; nor does a retention
        # anchor after one (it would hide rows deleted from the middle).
        if after >= self._last_id and not (reason == RETENTION and self._kept):
            self._last_id, self._previous = after, anchored


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
    walker = Walker(db, table, start, head=head)
    for link in walker.links():
        why = link.why(table)
        if why is not None:
            walker.broke(link, why)
    return walker.finish()


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


class Chains:
    """The journal's chains as this run extends them: each head, moved on once committed."""

    def __init__(self, sql: Connection) -> None:
        self._sql = sql
        #: Each chain's last row (id and hash), as committed.
        self.heads: Heads = {}

    def last(self, table: str) -> tuple[int, str]:
        return self.heads.get(table, GENESIS)

    @contextlib.contextmanager
    def extending(self, *, durable: bool) -> Iterator[Heads]:
        """A write that may add chained rows: the heads to move on (a copy), stored with
        the rows when they moved, and this run's once committed (a failed write leaves
        each chain where it was)."""
        heads = dict(self.heads)
        with self._sql.writing(durable=durable):
            yield heads
            if heads != self.heads:
                put_heads(self._sql.db, heads)
        self.heads = heads

    def append(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        """Add rows to a chained table (but ``frame_blocks``) in a commit of their own,
        without an fsync (see ``durability``)."""
        with self.extending(durable=False) as heads:
            for values in rows:
                insert_chained(self._sql.db, heads, table, values)

    def mark_checked(self) -> None:
        """The chains as they stand are ``checked``: the next open walks only what follows.

        Every row up to here was written by this run, linked as it was written.
        """
        with self._sql.writing(durable=False):
            put_heads(self._sql.db, self.heads, "checked")

    def check(self, at: float) -> str | None:
        """Walk what each chain gained since its ``checked`` mark; on a new break, a new segment.

        Nothing is repaired or deleted: the broken rows stay as found, for
        ``wheeld verify`` to name, and the problem is kept in the anchor.
        Returns the first new break, described, or None.
        """
        db = self._sql.db
        checked = {
            table: mark
            for table, mark in stored_heads(db, "checked").items()
            if self._holds(table, mark)  # else walked whole: a mark is no proof of itself
        }
        heads = stored_heads(db)
        walks = {
            table: walk(db, table, checked.get(table, GENESIS), head=heads.get(table, GENESIS))
            for table in WALKED_AT_OPEN
        }
        walks["frame_blocks"] = self._blocks_head(heads.get("frame_blocks", GENESIS))
        self.heads = {**heads, **{table: w.end for table, w in walks.items()}}
        fresh = [(t, b) for t, w in walks.items() for b in w.breaks if not b.acknowledged]
        if not fresh and checked == self.heads:
            return None
        try:
            with self._sql.writing():
                for table, brk in dict(reversed(fresh)).items():  # the first break of each
                    end = walks[table].end
                    db.execute(
                        "INSERT INTO anchors (at, chain, after_id, hash, reason, problem)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (at, table, end[0], end[1], BROKEN, brk.describe()),
                    )
                put_heads(db, self.heads)
                put_heads(db, self.heads, "checked")
        except JournalWriteError as exc:
            raise JournalError(str(exc)) from None
        return fresh[0][1].describe() if fresh else None

    def _holds(self, table: str, mark: tuple[int, str]) -> bool:
        """Whether the chain has the row ``mark`` names (or retention's anchor where it was)."""
        read = self._sql.read
        row = read(f"SELECT hash FROM {table} WHERE id = ?", (mark[0],))
        if row:
            return hex_hash(row[0][0]) == mark[1]
        return bool(
            read(
                "SELECT 1 FROM anchors WHERE chain = ? AND after_id = ? AND hash = ?",
                (table, mark[0], mark[1]),
            )
        )

    def _blocks_head(self, head: tuple[int, str]) -> ChainWalk:
        """The frame blocks' last row against their stored head (a deleted last block)."""
        read = self._sql.read
        last = read("SELECT id, hash FROM frame_blocks ORDER BY id DESC LIMIT 1")
        found = GENESIS if not last else (int(last[0][0]), hex_hash(last[0][1]))
        if found == head or (not last and head == GENESIS):
            return ChainWalk([], found)
        anchored = read(
            "SELECT after_id, hash FROM anchors WHERE chain = 'frame_blocks' ORDER BY id DESC"
            " LIMIT 1"
        )
        if not last and anchored and tuple(anchored[0]) == head:
            return ChainWalk([], head)  # every block kept was let go by retention
        why = (
            f"rows after {found[0]} missing (deleted): the journal's head is row {head[0]}"
            if head[0] > found[0]
            else f"the journal's head (row {head[0]}) does not match its last row"
        )
        return ChainWalk([ChainBreak("frame_blocks", found[0], None, why)], found)
