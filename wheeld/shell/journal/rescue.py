"""A journal deleted (or replaced) under the running daemon: noticed, and put back.

SQLite goes on writing to a database file whose name was taken away: the
daemon's descriptor keeps it, and every game recorded after the ``rm`` would
vanish at its close, the games before it with them. So the daemon keeps the
file's identity from its open (``FileIdentity``); a periodic job asks whether
the path still names it (``FileIdentity.lost``), and the daemon stops when it
does not (status 1: the unit starts it again). At its close the journal is
copied out of the open database through SQLite's backup (``copy_out``), every
commit of the deleted file included, and put back at its path (``put_back``)
once its connection is closed, or beside it when something else took the
name meanwhile: the start that follows opens the whole history, game ids
going on, and what the outbox had not delivered goes out then.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The copy's name while it is written: never opened as a journal.
_COPY_SUFFIX = ".rescue"
#: Pages copied between two words of progress (64 MiB of 4 KiB pages).
_COPY_PAGES = 16_384


class JournalFile:
    """The journal's file as the daemon opened it: whether its path still names it, and,
    at the close, the open database copied out and put back when it does not."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity = FileIdentity.of(path)
        self._copy: Path | None = None

    def lost(self) -> str | None:
        """Why the path no longer names the file the daemon writes, or None."""
        return None if self._identity is None else self._identity.lost(self.path)

    def copy_out_if_lost(
        self, db: sqlite3.Connection, tell: Callable[[str], None], working: Callable[[str], None]
    ) -> None:
        """Before the journal's connection closes: a copy of all it holds, if lost;
        ``working`` hears how far it is (a year's journal takes seconds: systemd's stop
        timeout is extended)."""
        if self.lost() is None:
            return
        try:
            self._copy = copy_out(db, self.path, working)
        except (OSError, sqlite3.Error) as exc:
            tell(f"the deleted journal could not be copied out: {exc}")

    def put_back(self, tell: Callable[[str], None]) -> None:
        """After it closed: the copy at the journal's path (or beside it), said."""
        copy, self._copy = self._copy, None
        if copy is None:
            return
        try:
            where = put_back(copy, self.path)
            tell(f"the journal, copied out of the open file, is back at {where}")
        except OSError as exc:
            tell(f"the journal's copy {copy} could not be put back: {exc}")


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """The journal file the daemon opened: its device and inode."""

    device: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        try:
            found = path.stat()
        except OSError:
            return None
        return cls(found.st_dev, found.st_ino)

    def lost(self, path: Path) -> str | None:
        """What became of the file, when ``path`` no longer names it; None while it does.
        An error other than a missing file (a directory unreadable for a moment) is no
        proof: None."""
        try:
            found = path.stat()
        except FileNotFoundError:
            return f"{path} was deleted under the running daemon"
        except OSError:
            return None
        if (found.st_dev, found.st_ino) != (self.device, self.inode):
            return f"{path} was replaced by another file under the running daemon"
        return None


def copy_out(
    db: sqlite3.Connection, path: Path, working: Callable[[str], None] = lambda status: None
) -> Path:
    """Copy the open journal, everything it has committed, beside ``path``; fsync'd.
    ``working`` hears, every ``_COPY_PAGES`` pages, how far the copy is."""
    copy = path.with_name(path.name + _COPY_SUFFIX)
    for stale in (copy, copy.with_name(copy.name + "-journal")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    target = sqlite3.connect(copy, isolation_level=None)
    try:
        db.backup(
            target,
            pages=_COPY_PAGES,
            progress=lambda _, left, total: working(
                f"copying the deleted journal back: {total - left} of {total} pages"
            ),
        )
    finally:
        target.close()
    with open(copy, "rb") as file:
        os.fsync(file.fileno())
    return copy


def put_back(copy: Path, path: Path) -> Path:
    """Give ``copy`` the journal's name (its deleted log and index first removed: their
    pages are the old file's), or, when another file has the name now, a name beside
    it that says when: where it went."""
    if path.exists():
        where = path.with_name(f"{path.name}.rescued-{time.strftime('%Y%m%dT%H%M%S')}")
    else:
        where = path
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                path.with_name(path.name + suffix).unlink()
    os.link(copy, where)  # never over a file that came meanwhile
    copy.unlink()
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return where
