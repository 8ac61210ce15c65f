"""A journal deleted (or replaced, or emptied) under the running daemon: noticed, and put back.

SQLite goes on writing to a database file whose name was taken away: the
daemon's descriptor keeps it, and every game recorded after the ``rm`` would
vanish at its close, the games before it with them. So the daemon keeps the
file's identity from its open (``FileIdentity``); a periodic job asks whether
the path still names it (``FileIdentity.lost``), and the daemon stops when it
does not (status 1: the unit starts it again). At its close the journal is
copied out of the open database through SQLite's backup (``copy_out``), every
commit of the deleted file included, under a name that says it is whole only
once it is (``journal.sqlite3.rescued-<time>``; ``.rescue`` while written),
and given the journal's name back once the connection is closed
(``put_back``), or left beside a file that took the name meanwhile: the start
that follows opens the whole history, game ids going on, and what the outbox
had not delivered goes out then. The deleted file's log and index, which
SQLite would replay into whatever next bears the name, are removed: they are
told from another file's by the descriptors the daemon had open.

A journal emptied in place (``: > journal.sqlite3``) keeps its inode and
loses its pages: nothing can be copied out of it. It is noticed all the same
(and no checkpoint runs on it: SQLite deletes the log of an empty database),
and the daemon stops saying so.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: The copy's name while it is written: never opened as a journal, never whole.
_COPY_SUFFIX = ".rescue"
#: Pages copied between two words of progress (64 MiB of 4 KiB pages).
_COPY_PAGES = 16_384
#: The smallest SQLite database: one page of the smallest size.
_SMALLEST_DATABASE = 512
#: What the kernel adds to an open file's name once the name is gone.
_DELETED_MARK = " (deleted)"
#: The files beside the journal that are its own: the log and its index.
_LOG_SUFFIXES = ("-wal", "-shm")


class JournalFile:
    """The journal's file as the daemon opened it: whether its path still names it, and,
    at the close, the open database copied out and put back when it does not."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity = FileIdentity.of(path)
        #: Where the file is, the path's symbolic links followed: SQLite names the log
        #: after it, and a file deleted there is put back there.
        self._real = self._identity.real if self._identity is not None else path
        self._copy: Path | None = None
        #: The copy goes over the file at the path (its log was lost, the file is ours).
        self._replace = False
        #: The log and index files the daemon had open when the journal was found lost.
        self._own_logs: set[tuple[int, int]] = set()
        #: The log the daemon has open (found once it is: SQLite opens it at the first read).
        self._own_log: set[tuple[int, int]] = set()

    def lost(self) -> str | None:
        """Why the path no longer names the file the daemon writes (or its log), or None."""
        if self._identity is None:
            return None
        lost = self._identity.lost(self.path)
        if lost is None:
            return self._log_lost()
        if lost.endswith(DELETED):
            moved_to = self._identity.still_at()
            if moved_to is not None:
                return f"{self.path} was moved to {moved_to} under the running daemon"
        return lost

    def _log_lost(self) -> str | None:
        """Why the log beside the file is not the one the daemon writes, or None: deleted
        alone, every commit since its last checkpoint would go at the close (and the
        next checkpoint opens a database without them)."""
        log = self._real.with_name(self._real.name + "-wal")
        if not self._own_log:
            self._own_log = _open_files_named(self._real, ("-wal",))
        if not self._own_log:
            return None  # not open yet (or not in this process): nothing to tell
        try:
            found = log.stat()
        except FileNotFoundError:
            return f"{log} was deleted under the running daemon"
        except OSError:
            return None
        if (found.st_dev, found.st_ino) not in self._own_log:
            return f"{log} was replaced by another file under the running daemon"
        return None

    def copy_out_if_lost(
        self, db: sqlite3.Connection, tell: Callable[[str], None], working: Callable[[str], None]
    ) -> None:
        """Before the journal's connection closes: a copy of all it holds, if lost;
        ``working`` hears how far it is (a year's journal takes seconds: systemd's stop
        timeout is extended)."""
        lost = self.lost()
        if lost is None or self._identity is None:
            return
        self._own_logs = _open_files_named(self._real, _LOG_SUFFIXES)
        if lost.endswith(EMPTIED):
            # SQLite writes the log back into it at the close all the same: whole if
            # the log held every page, damaged (and refused at the next start) if not.
            tell(
                f"{lost}: nothing to copy out; the log's pages are written back into it at"
                f" the close, and the next start opens it if that made it whole, else says"
                f" to move it aside (game ids going on from game-ids)"
            )
            return
        file_lost = self._identity.lost(self.path) is not None
        moved_to = self._identity.still_at() if file_lost else None
        if moved_to is not None:
            # Renamed, or its directory was: nothing is copied, the log's last pages go
            # into the file where it is now. Here, not at the close: SQLite does not
            # checkpoint a database that moved when it closes it, and the log, named
            # after where it was, would be left behind (and removed with the others).
            if not _copied_back_whole(db):
                self._own_logs = set()
                tell(
                    f"{lost}: its last pages are still in {self._real}-wal; stop wheeld and"
                    f" move both back to keep its games; else {_WHAT_NOW}"
                )
                return
            tell(
                f"{lost}: it is whole there; stop wheeld and move it back to {self._real}"
                f" to keep its games; else {_WHAT_NOW}"
            )
            return
        #: The file is still the journal's, its log is not: the copy replaces it.
        self._replace = not file_lost
        try:
            self._copy = copy_out(db, self._real, working)
        except (OSError, sqlite3.Error) as exc:
            tell(
                f"the deleted journal could not be copied out beside {self._real} ({exc}):"
                f" the games it held go with it; {_WHAT_NOW}"
            )

    def put_back(self, tell: Callable[[str], None]) -> None:
        """After it closed: the copy at the journal's path (or beside it), said; the
        deleted file's log and index gone either way."""
        copy, self._copy = self._copy, None
        for suffix in _LOG_SUFFIXES:
            stale = self._real.with_name(self._real.name + suffix)
            with contextlib.suppress(OSError):
                found = stale.stat()
                if (found.st_dev, found.st_ino) in self._own_logs:
                    stale.unlink()
        if copy is None:
            return
        try:
            if self._replace:
                os.replace(copy, self._real)  # the file without its log's last pages
                _sync_directory(self._real.parent)
                where = self._real
            else:
                where = put_back(copy, self._real)
        except OSError as exc:
            tell(f"the journal, copied out whole to {copy}, could not be put back: {exc}")
            return
        if where == self._real:
            tell(f"the journal, copied out of the open file, is back at {where}")
        else:
            tell(
                f"the journal, copied out of the open file, is kept at {where}: another file"
                f" has its name now; stop wheeld and move it back to keep its games"
            )


#: How a journal emptied in place, or deleted, is told (``FileIdentity.lost``).
EMPTIED = "was emptied under the running daemon"
DELETED = "was deleted under the running daemon"
#: What the next start does when the journal could not be kept.
_WHAT_NOW = "the next start begins a new journal, game ids going on from game-ids"


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """The journal file the daemon opened: its device and inode, and where it is (the
    path's symbolic links followed, as SQLite follows them)."""

    device: int
    inode: int
    real: Path

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        try:
            found = path.stat()
        except OSError:
            return None
        return cls(found.st_dev, found.st_ino, Path(os.path.realpath(path)))

    def lost(self, path: Path) -> str | None:
        """What became of the file, when ``path`` no longer names it (or names it emptied);
        None while it does. An error other than a missing file (a directory unreadable for
        a moment) is no proof: None. A path that now leads elsewhere through a symbolic
        link is another file, even to the same inode: SQLite names the log after where
        the path leads, and a checkpoint there would miss the daemon's log."""
        if Path(os.path.realpath(path)) != self.real:
            return f"{path} was replaced by another file under the running daemon"
        try:
            found = self.real.stat()
        except FileNotFoundError:
            return f"{path} {DELETED}"
        except OSError:
            return None
        if (found.st_dev, found.st_ino) != (self.device, self.inode):
            return f"{path} was replaced by another file under the running daemon"
        if found.st_size < _SMALLEST_DATABASE:
            return f"{path} {EMPTIED}"
        return None

    def still_at(self) -> Path | None:
        """Where the file still is under another name (renamed, or its directory moved),
        by the descriptor this process holds open on it; None once it is deleted."""
        for target, opened in _open_files():
            if (opened.st_dev, opened.st_ino) == (self.device, self.inode):
                if opened.st_nlink > 0 and not target.endswith(_DELETED_MARK):
                    return Path(target)
                return None
        return None


def _copied_back_whole(db: sqlite3.Connection) -> bool:
    """The log's pages all copied into the database (through its open descriptor)."""
    try:
        row = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == 0 and row[1] == row[2]


def rescued_copies(path: Path) -> list[str]:
    """A start's warnings of whole copies a rescue left beside the journal (killed before
    it gave the copy the journal's name back, or kept beside a file that took it)."""
    real = Path(os.path.realpath(path))
    return [
        f"{copy}: a whole journal rescued from under an earlier run; stop wheeld and move"
        f" it to {real} to keep its games (the games of this journal would be lost then)"
        for copy in sorted(real.parent.glob(f"{real.name}.rescued-*"))
    ]


def emptied(path: Path) -> bool:
    """Whether the database at ``path`` has lost its pages (a checkpoint must not open it:
    SQLite deletes the log of an empty database, with every commit since)."""
    try:
        return path.stat().st_size < _SMALLEST_DATABASE
    except OSError:
        return False


def _open_files_named(path: Path, suffixes: tuple[str, ...]) -> set[tuple[int, int]]:
    """The device and inode of every file this process has open under ``path`` plus one of
    ``suffixes`` (deleted or not): the journal's own log and index, told from another's."""
    names = {str(path) + suffix for suffix in suffixes}
    return {
        (opened.st_dev, opened.st_ino)
        for target, opened in _open_files()
        if target.removesuffix(_DELETED_MARK) in names
    }


def _open_files() -> Iterator[tuple[str, os.stat_result]]:
    """Every file this process has open: where its descriptor says it is (``" (deleted)"``
    after a name gone), and what it is."""
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                link = f"/proc/self/fd/{fd}"
                yield os.readlink(link), os.stat(link)


def copy_out(
    db: sqlite3.Connection, path: Path, working: Callable[[str], None] = lambda status: None
) -> Path:
    """Copy the open journal, everything it has committed, beside ``path``, fsync'd: the
    copy's name (``<journal>.rescued-<time>``) is given only once it is whole.
    ``working`` hears, every ``_COPY_PAGES`` pages, how far the copy is."""
    partial = path.with_name(path.name + _COPY_SUFFIX)
    for stale in (partial, partial.with_name(partial.name + "-journal")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    working("copying the deleted journal back")
    target = sqlite3.connect(partial, isolation_level=None)
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
    working("copying the deleted journal back: syncing the copy")
    with open(partial, "rb") as file:
        os.fsync(file.fileno())
    whole = path.with_name(f"{path.name}.rescued-{time.strftime('%Y%m%dT%H%M%S')}")
    os.rename(partial, whole)
    _sync_directory(path.parent)
    return whole


def put_back(copy: Path, path: Path) -> Path:
    """Give ``copy`` the journal's name unless another file has it now (never over one
    that came meanwhile): where the copy is."""
    try:
        os.link(copy, path)
    except FileExistsError:
        return copy
    copy.unlink()
    _sync_directory(path.parent)
    return path


def _sync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
