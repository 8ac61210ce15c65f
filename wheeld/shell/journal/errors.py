"""What the journal raises: one line each, naming the file, SQLite's words made the operator's."""

from __future__ import annotations

import resource
import sqlite3
from pathlib import Path


class JournalError(Exception):
    """The journal cannot be opened or read; the message is one line naming the file."""


class JournalCorrupt(JournalError):
    """The journal, or its ``game-ids`` mark, is damaged or another table's: a restart
    cannot mend it, an operator must (``wheeld run`` exits 65 and systemd leaves it)."""


class JournalWriteError(JournalError):
    """A write failed (disk full, I/O error): nothing of it was kept.

    The database is as it was before the write and the journal stays open;
    ``Journal.writable()`` says when writing works again.
    """


def another_table(path: object, owner: str, table: str) -> str:
    """Why a journal is refused to a table it is not: the one line run and check-config say."""
    return (
        f"{path}: this journal is table {owner}'s, not {table}'s: each table"
        f" needs its own state.dir (move this one back, or start {table} afresh)"
    )


def unreadable(path: Path, error: sqlite3.Error) -> JournalError:
    """A failed read of the journal at ``path``, said as the operator can act on it."""
    return JournalError(f"{path}: cannot read the journal: {in_words(error, path)}")


def in_words(error: sqlite3.Error, path: Path) -> str:
    """SQLite's error, with what it cannot say: an I/O error or a full disk under a
    file-size limit (``ulimit -f``, which SQLite only sees as "disk I/O error") names
    the limit and the file that outgrew it."""
    code = getattr(error, "sqlite_errorcode", None) or 0
    if code & 0xFF not in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL):
        return str(error)
    limit = file_size_limit()
    if limit is None:
        return str(error)
    grown = (
        f"{path.name}-shm beside it needs 32 KiB"
        if code == sqlite3.SQLITE_IOERR_SHMSIZE
        else (f"{path.name} or its -wal beside it outgrew it")
    )
    return f"{limit}: {grown}; raise the limit (SQLite said: {error})"


def file_size_limit() -> str | None:
    """This process's file-size limit (RLIMIT_FSIZE) in words, or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return None
    size = f"{soft // 1024:,} KiB" if soft % 1024 == 0 else f"{soft:,} bytes"
    return f"this process may write no file past {size} (ulimit -f)"
