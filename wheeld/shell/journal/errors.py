"""What the journal raises: one line each, naming the file."""

from __future__ import annotations


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
