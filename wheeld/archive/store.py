"""The archive's PostgreSQL, through psycopg 3 (async): migrations, the state at start,
and each batch of outcomes committed in one transaction.

Every insert is idempotent (``ON CONFLICT DO NOTHING`` on what identifies a
message), so a batch committed again after a lost connection, or a message
the broker delivers again, is kept once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from wheeld.archive.ledger import Ledger
from wheeld.archive.records import Epoch, Gap, Lookup, Outcome
from wheeld.archive.schema import ARCHIVE_LOCK, MIGRATION_LOCK, MIGRATIONS

if TYPE_CHECKING:
    from wheeld.config import ArchiveConfig

#: The errors that mean "the database is not there now": hold, reconnect and retry.
UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError)


class Unstorable(Exception):
    """The database refused what it was given (not its absence): one line says why."""


class StoreError(Exception):
    """The database cannot be used (unreachable, refused, not ours); one line says why."""


class Displaced(Exception):
    """Another archive holds the database: two would each write their own view of every
    epoch and gap over the other's (and take each other's broker session)."""


HELD_ELSEWHERE = (
    "another archive is running on this database (it holds the archive's advisory lock):"
    " one archive a database"
)


async def hold(conn: psycopg.AsyncConnection[Any]) -> None:
    """Take the archive's lock for this connection's life; ``Displaced`` when another has it."""
    for name, seconds in SERVER_KEEPALIVE:  # over TCP; a local socket ends with its peer
        await conn.execute("SELECT set_config(%s, %s, false)", (name, str(seconds)))
    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (ARCHIVE_LOCK,))
    row = await cursor.fetchone()
    if row is None or not row[0]:
        raise Displaced(HELD_ELSEWHERE)


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


#: libpq's keepalives (over TCP), unless the DSN names them.
CLIENT_KEEPALIVE = (
    ("keepalives", 1),
    ("keepalives_idle", 30),
    ("keepalives_interval", 10),
    ("keepalives_count", 3),
)
#: The server gives up a session whose client went silent after this many seconds (idle,
#: then probes): a session of this archive cut off by the network must not hold its lock
#: (and keep the archive out) for the system's default two hours.
SERVER_KEEPALIVE = (
    ("tcp_keepalives_idle", 30),
    ("tcp_keepalives_interval", 10),
    ("tcp_keepalives_count", 3),
)


def connect_args(config: ArchiveConfig) -> dict[str, Any]:
    """psycopg's ``connect`` arguments: the DSN and, from its file, the password."""
    args: dict[str, Any] = {"conninfo": config.dsn, "connect_timeout": 10}
    # The client, too, tells a server cut off by the network within a minute, not after
    # the system's retransmissions (some 15 minutes), unless the DSN says otherwise.
    try:
        named = psycopg.conninfo.conninfo_to_dict(config.dsn)
    except psycopg.Error:
        named = {}  # connect says what is wrong with it
    for name, seconds in CLIENT_KEEPALIVE:
        if name not in named:
            args[name] = seconds
    if config.password_file is not None:
        args["password"] = config.password_file.read_text(encoding="utf-8").strip()
    return args


async def connect(config: ArchiveConfig) -> psycopg.AsyncConnection[Any]:
    """A connection; ``StoreError`` with libpq's reason, in one line, when there is none."""
    try:
        # Autocommit: every unit of work is an explicit transaction, never an implicit one.
        return await psycopg.AsyncConnection.connect(**connect_args(config), autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(one_line(exc)) from None
    except OSError as exc:
        raise StoreError(f"archive.password_file: {exc.strerror or exc}") from None


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Apply the migrations not yet applied; the versions applied now."""
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS archive_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())"
        )
        cursor = await conn.execute("SELECT version FROM archive_migrations")
        done = {row[0] for row in await cursor.fetchall()}
        newer = sorted(done - {version for version, _, _ in MIGRATIONS})
        if newer:
            # A wheeld older than the schema would write rows the newer one cannot read.
            raise StoreError(
                f"the archive's schema has migration(s) {', '.join(map(str, newer))}, made by"
                " a newer wheeld than this one: run that one (or a newer)"
            )
        for version, name, sql in MIGRATIONS:
            if version in done:
                continue
            await conn.execute(sql.encode())
            await conn.execute(
                "INSERT INTO archive_migrations (version, name) VALUES (%s, %s)", (version, name)
            )
            applied.append(version)
    return applied


async def load(conn: psycopg.AsyncConnection[Any], ledger: Ledger) -> None:
    """The ledger's state from the database: epochs (with their last seqs), gaps, keys
    pinned, the tables' base topics. Never the whole of the messages."""
    async with conn.transaction():
        rows = await (
            await conn.execute(
                "SELECT table_id, epoch, first_seq, first_prev, first_game, head_seq,"
                " head_digest, head_game, after_epoch, after_seq FROM epochs ORDER BY updated"
            )
        ).fetchall()
        for row in rows:
            epoch = Epoch(*row)
            recent = await (
                await conn.execute(
                    "SELECT seq, digest FROM messages WHERE table_id = %s AND epoch = %s"
                    " AND seq > %s AND verdict IN ('verified', 'chain_break') ORDER BY seq",
                    (epoch.table, epoch.epoch, epoch.head - 1024),
                )
            ).fetchall()
            for seq, digest in recent:
                epoch.remember(seq, digest)
            ledger.restore_epoch(epoch)
            ledger.restore_latest(epoch.table, epoch.epoch)  # ordered by update: last wins
        for row in await (
            await conn.execute(
                "SELECT table_id, epoch, first_seq, last_seq, before_digest, before_game,"
                " after_prev, after_game, extract(epoch FROM found)::float8, state, attempts,"
                " why FROM gaps"
            )
        ).fetchall():
            ledger.restore_gap(Gap(*row))
        for table, kid, pem in await (
            await conn.execute("SELECT table_id, kid, public_key FROM pinned_keys")
        ).fetchall():
            ledger.restore_pin(table, kid, pem)
        for table, base in await (
            await conn.execute("SELECT table_id, base_topic FROM archive_tables")
        ).fetchall():
            ledger.bases[table] = base


async def lookup(conn: psycopg.AsyncConnection[Any], asked: Lookup) -> list[str]:
    """The digests of the chained messages kept at ``(table, epoch, seq)``."""
    async with conn.transaction():
        cursor = await conn.execute(
            "SELECT digest FROM messages WHERE table_id = %s AND epoch = %s AND seq = %s"
            " AND verdict IN ('verified', 'chain_break')",
            (asked.table, asked.epoch, asked.seq),
        )
        return [row[0] for row in await cursor.fetchall()]


async def awaiting_key(
    conn: psycopg.AsyncConnection[Any], table: str, kid: str
) -> list[tuple[int, str, str, float, str, str, int]]:
    """Messages of ``table`` kept as ``unknown_key`` under ``kid``: to judge again now that
    the key is trusted. (id, topic, payload, received, source, epoch, seq), each epoch
    from its end back."""
    async with conn.transaction():
        cursor = await conn.execute(
            "SELECT id, topic, payload, extract(epoch FROM received_at)::float8, source,"
            " epoch, seq"
            " FROM messages WHERE table_id = %s AND kid = %s AND verdict = 'unknown_key'"
            " ORDER BY epoch, seq DESC",
            (table, kid),
        )
        return list(await cursor.fetchall())


async def commit(conn: psycopg.AsyncConnection[Any], batch: Outcome, ledger: Ledger) -> None:
    """Keep one batch, whole or not at all; ``Unstorable`` when the database refuses it."""
    try:
        await _commit(conn, batch, ledger)
    except (
        psycopg.DataError,
        psycopg.IntegrityError,
        psycopg.ProgrammingError,
        # An OperationalError, but about what was given, not the database's absence (an
        # index row too large): retried, it would be refused for ever, and hold all behind it.
        psycopg.errors.ProgramLimitExceeded,
    ) as exc:
        raise Unstorable(one_line(exc)) from None


async def _commit(conn: psycopg.AsyncConnection[Any], batch: Outcome, ledger: Ledger) -> None:
    async with conn.transaction(), conn.cursor() as cur:
        new = [g for g in batch.games if g.stored_id is None]
        if new:
            await cur.executemany(
                "INSERT INTO messages (table_id, epoch, seq, game_id, event, kid, digest, prev,"
                " verdict, why, received_at, ts, day, number, reason, source, topic, payload)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                " %s) ON CONFLICT ON CONSTRAINT messages_once DO UPDATE"
                # Kept under a key unknown then, verified now (a recall, a redelivery):
                # the row is the same message, its verdict is now this one.
                " SET verdict = excluded.verdict, why = excluded.why"
                " WHERE messages.verdict = 'unknown_key'"
                " AND excluded.verdict IN ('verified', 'chain_break')",
                [
                    (
                        g.table,
                        g.epoch,
                        g.seq,
                        g.game_id,
                        g.event,
                        g.kid,
                        g.digest,
                        g.prev,
                        g.verdict,
                        g.why,
                        at(g.received),
                        g.ts,
                        g.day,
                        g.number,
                        g.reason,
                        g.source,
                        g.topic,
                        g.payload,
                    )
                    for g in new
                ],
            )
        again = [g for g in batch.games if g.stored_id is not None]
        if again:
            await cur.executemany(
                "UPDATE messages SET verdict = %s, why = %s, digest = %s WHERE id = %s",
                [(g.verdict, g.why, g.digest, g.stored_id) for g in again],
            )
        for kind, table in (("alarm", "table_alarms"), ("info", "table_info")):
            rows = [s for s in batch.sides if s.kind == kind]
            if not rows:
                continue
            code = ", code" if kind == "alarm" else ""
            await cur.executemany(
                f"INSERT INTO {table} (table_id, kid, verdict, why, received_at, digest, topic,"
                f" payload{', day' if kind == 'alarm' else ''}{code}) VALUES"
                f" (%s, %s, %s, %s, %s, %s, %s, %s{', %s, %s' if kind == 'alarm' else ''})"
                " ON CONFLICT (table_id, digest) DO NOTHING",
                [
                    (s.table, s.kid, s.verdict, s.why, at(s.received), s.digest, s.topic, s.payload)
                    + ((s.day, s.code) if kind == "alarm" else ())
                    for s in rows
                ],
            )
        stats = [s for s in batch.sides if s.kind == "stats"]
        if stats:
            await cur.executemany(
                "INSERT INTO table_stats (table_id, day, received_at, payload)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (table_id, day) DO UPDATE SET"
                " received_at = excluded.received_at, payload = excluded.payload"
                " WHERE table_stats.received_at <= excluded.received_at",
                [(s.table, s.day, at(s.received), s.payload) for s in stats],
            )
        if batch.rejects:
            await cur.executemany(
                "INSERT INTO rejected (received_at, topic, reason, payload, size)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(at(r.received), r.topic, r.reason, r.payload, r.size) for r in batch.rejects],
            )
        if batch.alarms:
            await cur.executemany(
                "INSERT INTO archive_alarms (at, code, table_id, payload) VALUES (%s, %s, %s, %s)",
                [(at(a.at), a.code, a.table, json.dumps(a.payload())) for a in batch.alarms],
            )
        if batch.pins:
            await cur.executemany(
                "INSERT INTO pinned_keys (table_id, kid, public_key, pinned) VALUES (%s, %s, %s,"
                " %s) ON CONFLICT DO NOTHING",
                [(p.table, p.kid, p.public_key, at(p.at)) for p in batch.pins],
            )
        if batch.bases:
            await cur.executemany(
                "INSERT INTO archive_tables (table_id, base_topic) VALUES (%s, %s)"
                " ON CONFLICT (table_id) DO UPDATE SET base_topic = excluded.base_topic,"
                " updated = now()",
                list(batch.bases.items()),
            )
        await _write_epochs(cur, sorted(batch.epochs), ledger)


async def _write_epochs(
    cur: psycopg.AsyncCursor[Any], keys: Sequence[tuple[str, str]], ledger: Ledger
) -> None:
    """Each changed epoch's record and its gaps, as the ledger holds them now."""
    if not keys:
        return
    epochs = [ledger.epochs[key] for key in keys if key in ledger.epochs]
    await cur.executemany(
        "INSERT INTO epochs (table_id, epoch, first_seq, first_prev, first_game, head_seq,"
        " head_digest, head_game, after_epoch, after_seq, began, updated) VALUES (%s, %s, %s,"
        " %s, %s, %s, %s, %s, %s, %s, now(), clock_timestamp()) ON CONFLICT (table_id, epoch)"
        " DO UPDATE SET first_seq = excluded.first_seq, first_prev = excluded.first_prev,"
        " first_game = excluded.first_game, head_seq = excluded.head_seq,"
        " head_digest = excluded.head_digest, head_game = excluded.head_game,"
        " after_epoch = excluded.after_epoch, after_seq = excluded.after_seq,"
        " updated = excluded.updated",
        [
            (
                e.table,
                e.epoch,
                e.first,
                e.first_prev,
                e.first_game,
                e.head,
                e.head_digest,
                e.head_game,
                e.after_epoch,
                e.after_seq,
            )
            for e in epochs
        ],
    )
    await cur.executemany(
        "DELETE FROM gaps WHERE table_id = %s AND epoch = %s", [tuple(key) for key in keys]
    )
    gaps = [gap for key in keys for gap in ledger.gaps.get(key, [])]
    if gaps:
        await cur.executemany(
            "INSERT INTO gaps (table_id, epoch, first_seq, last_seq, before_digest, before_game,"
            " after_prev, after_game, state, attempts, why, found) VALUES (%s, %s, %s, %s, %s,"
            " %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    g.table,
                    g.epoch,
                    g.first,
                    g.last,
                    g.before,
                    g.before_game,
                    g.after_prev,
                    g.after_game,
                    g.state,
                    g.attempts,
                    g.why,
                    at(g.found),
                )
                for g in gaps
            ],
        )


async def unpublished_alarms(
    conn: psycopg.AsyncConnection[Any], limit: int = 100
) -> list[tuple[int, str]]:
    async with conn.transaction():
        cursor = await conn.execute(
            "SELECT id, payload FROM archive_alarms WHERE NOT published ORDER BY id LIMIT %s",
            (limit,),
        )
        return list(await cursor.fetchall())


async def mark_published(conn: psycopg.AsyncConnection[Any], ids: Sequence[int]) -> None:
    async with conn.transaction():
        await conn.execute(
            "UPDATE archive_alarms SET published = true WHERE id = ANY(%s)", (list(ids),)
        )
