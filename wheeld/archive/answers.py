"""What ``wheeld archive verify | gaps | report | game`` ask of the database (psycopg 3).

Each reads in a read-only transaction and streams what may be long (verify
walks every message with a server-side cursor: memory does not grow with the
archive).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from cryptography.hazmat.primitives import serialization

from wheeld.archive.audit import EpochAudit, StoredMessage
from wheeld.archive.records import public_key_from_pem
from wheeld.archive.schema import MIGRATIONS
from wheeld.archive.store import connect_args, one_line
from wheeld.core.signing import key_id, load_public_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from wheeld.config import ArchiveConfig


class AnswerError(Exception):
    """The question cannot be answered (no database, no such game); one line says why."""


#: What the database may raise in the middle of an answer (the CLI says it in one line).
DatabaseError = psycopg.Error


def said(exc: BaseException) -> str:
    """The database's error in one line."""
    return one_line(exc)


def connect(config: ArchiveConfig) -> psycopg.Connection[Any]:
    try:
        conn = psycopg.connect(**connect_args(config), autocommit=True)
        conn.read_only = True
    except psycopg.Error as exc:
        raise AnswerError(one_line(exc)) from None
    except OSError as exc:
        raise AnswerError(f"archive.password_file: {exc.strerror or exc}") from None
    try:
        row = conn.execute("SELECT array_agg(version) FROM archive_migrations").fetchone()
    except psycopg.Error:
        conn.close()
        raise AnswerError(
            "the database holds no archive (run `wheeld archive` once to create it)"
        ) from None
    applied = set(row[0] or []) if row is not None else set()
    missing = [version for version, _, _ in MIGRATIONS if version not in applied]
    if missing:
        conn.close()
        raise AnswerError(
            f"the archive's schema lacks migration(s) {', '.join(map(str, missing))}"
            " (run `wheeld archive` once to bring it up to date)"
        )
    return conn


def _keys(
    conn: psycopg.Connection[Any], config: ArchiveConfig
) -> dict[str, list[Ed25519PublicKey]]:
    keys: dict[str, list[Ed25519PublicKey]] = {
        table: [load_public_key(path) for path in files]
        for table, files in config.trusted_keys.items()
    }
    for table, pem in conn.execute("SELECT table_id, public_key FROM pinned_keys").fetchall():
        key = public_key_from_pem(pem)
        if key is not None:
            keys.setdefault(table, []).append(key)
    return keys


#: Stored messages are checked this many at a time, their signatures in worker processes
#: (as ``wheeld verify`` checks a journal): years of a casino's tables are tens of millions.
VERIFY_BATCH = 500

_Row = tuple[str, str, int, int, str, str | None, str]


def verify(config: ArchiveConfig) -> Iterator[EpochAudit]:
    """Every epoch of every table checked again, in order, streamed: each epoch's audit."""
    with connect(config) as conn:
        keys = _keys(conn, config)
        kids = {table: {key_id(key) for key in table_keys} for table, table_keys in keys.items()}
        gaps: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for table, epoch, first, last in conn.execute(
            "SELECT table_id, epoch, first_seq, last_seq FROM gaps"
        ).fetchall():
            gaps.setdefault((table, epoch), []).append((first, last))
        raw = [
            key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            for table_keys in keys.values()
            for key in table_keys
        ]
        audit: EpochAudit | None = None
        with conn.transaction(), conn.cursor(name="archive_verify") as cursor:
            cursor.itersize = 5000
            cursor.execute(
                "SELECT table_id, epoch, id, seq, verdict::text, kid, payload FROM messages"
                " WHERE verdict IN ('verified', 'chain_break') ORDER BY table_id, epoch, seq, id"
            )
            for rows, verdicts in _judged(_batches(cursor), raw):
                for row, (checked, judged) in zip(rows, verdicts, strict=True):
                    table, epoch, row_id, seq, verdict, kid, payload = row
                    signed = checked
                    if not checked.startswith("!") and kid not in kids.get(table, ()):
                        # Every table's keys are in the workers: the key must be this one's.
                        signed = f"!signed with a key not trusted for table {table} (kid {kid!r})"
                    if audit is None or (audit.table, audit.epoch) != (table, epoch):
                        if audit is not None:
                            yield audit
                        audit = EpochAudit(
                            table, epoch, keys.get(table, []), gaps.get((table, epoch), [])
                        )
                    audit.feed(StoredMessage(row_id, seq, verdict, payload), judged, signed)
        if audit is not None:
            yield audit


def _batches(rows: Iterable[_Row]) -> Iterator[list[_Row]]:
    iterator = iter(rows)
    while batch := list(itertools.islice(iterator, VERIFY_BATCH)):
        yield batch


def _judged(
    batches: Iterator[list[_Row]], raw: list[bytes]
) -> Iterator[tuple[list[_Row], list[tuple[str, dict[str, Any]]]]]:
    """Each batch with its verdicts (a digest, or ``!`` and why), in order; in worker
    processes when there is more than a batch, a few batches in flight."""
    from wheeld.audit.verify import _judge_batch, _worker_keys, in_order

    first = next(batches, None)
    if first is None:
        return
    second = next(batches, None)
    workers = min(4, os.cpu_count() or 1)
    if second is None or workers < 2:
        _worker_keys(raw)
        for batch in itertools.chain([first], [second] if second else [], batches):
            yield batch, _judge_batch([row[6] for row in batch])
        return
    with ProcessPoolExecutor(workers, initializer=_worker_keys, initargs=(raw,)) as pool:
        yield from in_order(
            itertools.chain([first, second], batches),
            lambda batch: pool.submit(_judge_batch, [row[6] for row in batch]),
            2 * workers,
        )


def gaps(config: ArchiveConfig) -> list[dict[str, Any]]:
    with connect(config) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute(
            "SELECT table_id AS table, epoch, first_seq, last_seq, last_seq - first_seq + 1"
            " AS missing, before_game, after_game, state, attempts, why, found FROM gaps"
            " ORDER BY table_id, epoch, first_seq"
        )
        return list(cursor.fetchall())


def report(config: ArchiveConfig, table: str, first: date, last: date) -> list[dict[str, Any]]:
    """Per day: games, results (and each number's count), no-spins by reason, flagged
    messages, the table's alarms and the archive's, and the gaps found."""
    with connect(config) as conn:
        _known(conn, table)
        days: dict[date, dict[str, Any]] = {}

        def day(at: date) -> dict[str, Any]:
            return days.setdefault(
                at,
                {
                    "table": table,
                    "day": at.isoformat(),
                    "games": 0,
                    "results": 0,
                    "numbers": {},
                    "no_spins": 0,
                    "no_spin_reasons": {},
                    "messages": 0,
                    "flagged": {},
                    "table_alarms": {},
                    "archive_alarms": {},
                },
            )

        params = (table, first, last)
        for at, games, messages in conn.execute(
            "SELECT day, count(DISTINCT (epoch, game_id)), count(*) FROM messages"
            " WHERE table_id = %s AND day BETWEEN %s AND %s GROUP BY day",
            params,
        ):
            day(at).update(games=games, messages=messages)
        for at, event, value, count in conn.execute(
            "SELECT day, event, coalesce(CASE event WHEN 'result' THEN number ELSE reason END,"
            " '?'), count(*) FROM messages WHERE table_id = %s AND day BETWEEN %s AND %s"
            " AND verdict = 'verified' AND event IN ('result', 'no_spin')"
            " GROUP BY day, event, 3",
            params,
        ):
            entry = day(at)
            if event == "result":
                entry["results"] += count
                entry["numbers"][value] = count
            else:
                entry["no_spins"] += count
                entry["no_spin_reasons"][value] = count
        for at, verdict, count in conn.execute(
            "SELECT day, verdict::text, count(*) FROM messages WHERE table_id = %s"
            " AND day BETWEEN %s AND %s AND verdict <> 'verified' GROUP BY day, verdict",
            params,
        ):
            day(at)["flagged"][verdict] = count
        for at, code, count in conn.execute(
            "SELECT day, coalesce(code, '?'), count(*) FROM table_alarms WHERE table_id = %s"
            " AND day BETWEEN %s AND %s GROUP BY day, code",
            params,
        ):
            day(at)["table_alarms"][code] = count
        for at, code, count in conn.execute(
            "SELECT (at AT TIME ZONE 'UTC')::date, code, count(*) FROM archive_alarms"
            " WHERE table_id = %s AND at >= %s::date AND at < %s::date + 1 GROUP BY 1, code",
            params,
        ):
            day(at)["archive_alarms"][code] = count
        return [days[at] for at in sorted(days)]


def _known(conn: psycopg.Connection[Any], table: str) -> None:
    """``AnswerError`` naming the tables held when ``table`` is none of them (a typo must
    not read as a table with nothing to report)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM archive_tables WHERE table_id = %s)"
        " OR EXISTS (SELECT 1 FROM messages WHERE table_id = %s)"
        " OR EXISTS (SELECT 1 FROM table_alarms WHERE table_id = %s)",
        (table, table, table),
    ).fetchone()
    if row is not None and row[0]:
        return
    held = [
        name
        for (name,) in conn.execute(
            "SELECT table_id FROM archive_tables ORDER BY table_id LIMIT 11"
        ).fetchall()
    ]
    listed = ", ".join(held[:10]) + (", ..." if len(held) > 10 else "")
    raise AnswerError(
        f"no table {table!r} in the archive" + (f" (tables: {listed})" if held else "")
    )


def report_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    columns = ["table", "day", "games", "results", "no_spins", "messages"]
    nested = ["numbers", "no_spin_reasons", "flagged", "table_alarms", "archive_alarms"]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns + nested)
    for row in rows:
        writer.writerow(
            [row[c] for c in columns]
            + [" ".join(f"{k}:{v}" for k, v in sorted(row[n].items())) for n in nested]
        )
    return out.getvalue()


def game(config: ArchiveConfig, table: str, game_id: int) -> list[dict[str, Any]]:
    """Every message of a game (of every epoch that has that id), with its verdict."""
    with connect(config) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute(
            "SELECT epoch, seq, event, verdict::text AS verdict, why, kid, source,"
            " received_at, payload FROM messages WHERE table_id = %s AND game_id = %s"
            " ORDER BY epoch, seq, id",
            (table, game_id),
        )
        rows = list(cursor.fetchall())
    if not rows:
        raise AnswerError(f"no message of game {game_id} of table {table!r} in the archive")
    for row in rows:
        row["payload"] = json.loads(row["payload"])
    return rows


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(type(value).__name__)
