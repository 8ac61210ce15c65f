"""The journal's SQLite database: the file opened, and one write at a time, fsync'd or not.

``connect`` opens the file in WAL mode (a new one with ``auto_vacuum =
INCREMENTAL``, so retention gives space back), refusing what is not an
SQLite database; ``Connection.corrupt`` tells a damaged file (a restart
cannot mend it) from one that is busy or unreachable. Every write is a
transaction through ``writing``: ``synchronous`` is set to FULL or NORMAL
before it (as ``durability.fsync_due`` or the journal says), and any
failure to write (a full disk, an I/O error) becomes ``JournalWriteError``,
with nothing of the write kept. A failed read is a ``JournalError``; while
the journal opens, it says the damage it shows.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wheeld.shell.journal.errors import (
    JournalCorrupt,
    JournalError,
    JournalWriteError,
    in_words,
    unreadable,
)
from wheeld.shell.journal.rescue import JournalFile, emptied
from wheeld.shell.journal.schema import rollback, transaction

#: The write-ahead log is cut back to this after a checkpoint.
WAL_LIMIT_BYTES = 4 * 1024 * 1024
#: The ``state`` key a checkpoint's thread counts up to start the log over (a write
#: that changes a value: one that changes nothing writes no page).
LOG_RESTARTS = "log_restarts"
#: How often, and how far apart, that thread tries for the write lock while the loop
#: writes (never waited on: a blocked loop is what the start over in a thread avoids).
LOG_RESTART_TRIES = 20
LOG_RESTART_WAIT_S = 0.002
#: A log of this many pages or fewer is not started over by the checkpoint's thread: the
#: start over's own write leaves about as many, and an idle journal would go on starting
#: its log over, a commit and its fsyncs every checkpoint, for nothing.
LOG_RESTART_FRAMES = 2
#: How long a write on a second connection waits for the write lock (SQLite's busy timeout).
BUSY_WAIT_S = 5.0
#: SQLite's errors that say the file itself is damaged, not that it is busy or unreachable.
_DAMAGE = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
#: ... and those it says with a generic code: a header's format bytes overwritten.
_DAMAGED = frozenset({"unsupported file format"})
#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def checkpoint_wal(
    path: Path, write_lock: threading.RLock | None = None, file: JournalFile | None = None
) -> int:
    """Copy the write-ahead log's pages back into the database, beside the writer (PASSIVE:
    it waits for no one), then let ``journal_size_limit`` cut the log back; the pages it
    could not copy (a reader's snapshot, an export's say, holds them back; a commit made
    meanwhile adds a few; 0 when another checkpoint was at it). For a
    worker thread: SQLite lets the event loop run meanwhile. The file is opened, never
    made: a journal deleted under the daemon is not replaced by an empty one (which
    would take the log with it). With the journal's ``write_lock``, a log copied back
    whole is started over here too (``_start_log_over``). With the daemon's ``file``,
    nothing is done once the path names another file: the log beside the path is the
    daemon's, and copied into another database it would corrupt that one and leave the
    daemon's without its last pages (found by a fresh-eyes attack: ``mv`` over the
    journal, then retention's checkpoint)."""
    if emptied(path):
        return 0  # SQLite would delete an empty database's log, every commit in it
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None)
    except sqlite3.OperationalError:
        if not path.is_file():
            return 0  # gone since it was asked: the WAL job's next turn says so
        raise
    try:
        # Asked once the file is open: a swap after this leaves the log the one opened.
        if file is not None and file.lost() is not None:
            return 0
        db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        row = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if (
            write_lock is not None
            and row is not None
            and row[0] == 0
            and LOG_RESTART_FRAMES < row[1] == row[2]
        ):
            _start_log_over(db, write_lock)
    finally:
        db.close()
    if row is None or row[0] != 0:
        return 0
    return max(0, int(row[1]) - int(row[2]))


def _start_log_over(db: sqlite3.Connection, write_lock: threading.RLock) -> None:
    """Start the log over here, in the checkpoint's thread, with a small write.

    The first commit after the log was copied back whole starts it over, and
    SQLite syncs the log's new header then, whatever ``synchronous`` says of
    commits: on the loop, that fsync held a retention step, or a game's start,
    for up to tens of milliseconds (found in a year's first retention run). The
    write changes a value (one that changes nothing writes no page, and starts
    nothing over). The loop is never made to wait for it: while the loop is
    writing, the thread waits for it to be done (its commits take a fraction of a
    millisecond), ``LOG_RESTART_TRIES`` times at most, then leaves the start over
    to the loop's next commit.
    """
    for _ in range(LOG_RESTART_TRIES):
        if write_lock.acquire(blocking=False):
            break
        time.sleep(LOG_RESTART_WAIT_S)
    else:
        return
    try:
        db.execute("PRAGMA synchronous=NORMAL")  # the header's sync, not a commit's
        with transaction(db):
            db.execute(
                "INSERT INTO state (key, value) VALUES (?, '1') "
                "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
                (LOG_RESTARTS,),
            )
    finally:
        write_lock.release()


def connect(path: Path, continuation: Callable[[], str]) -> tuple[Connection, bool]:
    """The journal at ``path`` opened, and whether it is new (missing or empty).

    ``continuation`` says where game ids go on, for the error that refuses a
    damaged journal.
    """
    try:
        fresh = not path.exists() or path.stat().st_size == 0
        if fresh:
            _forget_stale_log(path)
        else:
            with path.open("rb") as file:
                if file.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                    raise JournalCorrupt(
                        f"{path}: not an SQLite database; move it aside to start a new"
                        f" journal; {continuation()}"
                    )
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise JournalError(f"{path}: cannot open journal: {exc}") from None
    sql = Connection(db, path, continuation)
    try:
        if fresh:
            # Before anything is written (WAL mode itself writes the header): only
            # then can a database take it, and retention give space back.
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
    except sqlite3.Error as exc:
        db.close()
        raise sql.corrupt(str(exc), exc) from None
    return sql, fresh


def connect_beside(open_: Connection) -> Connection:
    """The open journal opened again, on a connection of its own: for a worker thread
    that writes beside the daemon's connection (retention). The two take turns at
    ``write_lock`` (a thread's lock: the one waiting goes on as soon as the other is
    done, not at SQLite's next poll of a busy file, up to 100 ms later)."""
    path, continuation = open_.path, open_.continuation
    try:
        db = sqlite3.connect(  # opened, never made: see ``checkpoint_wal``
            f"{path.resolve().as_uri()}?mode=rw",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_WAIT_S,
        )
    except sqlite3.Error as exc:
        raise JournalError(f"{path}: cannot open journal: {exc}") from None
    try:
        db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        db.execute("PRAGMA synchronous=FULL")
        # The log's checkpoints left elsewhere as the journal's are (a commit of the
        # loop never pays for one: ``Journal.checkpoint_elsewhere``).
        every = open_.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        db.execute(f"PRAGMA wal_autocheckpoint = {int(every)}")
    except sqlite3.Error as exc:
        # Closed here, not by the collector: a connection left open at the journal's
        # close keeps SQLite from copying the log back (found with the log deleted).
        db.close()
        raise JournalError(f"{path}: cannot open journal: {exc}") from None
    sql = Connection(db, path, continuation, open_.write_lock)
    sql.opened = True
    return sql


def _forget_stale_log(path: Path) -> None:
    """Remove the write-ahead log of a journal that is gone.

    Its pages belong to the old database: replayed into a new one they
    would corrupt it.
    """
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


class Connection:
    """The journal's database, read and written as the journal's collaborators share it."""

    def __init__(
        self,
        db: sqlite3.Connection,
        path: Path,
        continuation: Callable[[], str],
        write_lock: threading.RLock | None = None,
    ) -> None:
        self.db = db
        self.path = path
        #: Where game ids go on: the error that refuses a damaged journal says it.
        self.continuation = continuation
        #: Held through every write: shared with a connection ``connect_beside`` made.
        self.write_lock = write_lock or threading.RLock()
        #: Once the journal is open, a failed read is no proof of damage.
        self.opened = False
        self._durable = True  # connected with synchronous=FULL

    def corrupt(self, what: str, error: sqlite3.Error | None = None) -> JournalError:
        """A damaged journal; JournalCorrupt (a restart cannot mend it) unless ``error``
        is SQLite's and not one of damage (a lock, an I/O error: a restart may do)."""
        damaged = error is None or error.sqlite_errorcode in _DAMAGE or str(error) in _DAMAGED
        if not damaged:
            # Found: a full disk at start was "journal is corrupt (database or disk is
            # full); move it aside": an intact journal, and advice that loses it.
            return JournalError(
                f"{self.path}: journal cannot be opened now ({what}), no damage found: "
                f"a full disk? free space in {self.path.parent}; wheeld run tries again "
                "when started (the units restart it)"
            )
        return JournalCorrupt(
            f"{self.path}: journal is corrupt ({what}); move it aside to start a new one;"
            f" {self.continuation()}"
        )

    def disk_bytes(self) -> int:
        """The journal's size on disk: the database and its write-ahead log."""
        size = 0
        for path in (self.path, self.path.with_name(f"{self.path.name}-wal")):
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        return size

    def read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self.db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            if not self.opened:  # found at open: a damaged journal, said as such
                raise self.corrupt(str(exc), exc) from None
            raise unreadable(self.path, exc) from None

    def get(self, key: str) -> str | None:
        """A value of the ``state`` table, or None."""
        rows = self.read("SELECT value FROM state WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    def put(self, key: str, value: str) -> None:
        """Set a value of the ``state`` table (inside ``writing``)."""
        self.db.execute(
            "INSERT INTO state (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @contextlib.contextmanager
    def writing(self, *, durable: bool = True) -> Iterator[None]:
        """One transaction, on disk when it returns if ``durable``; any failure to write
        becomes JournalWriteError."""
        try:
            self.write_lock.acquire()
            if self.db.in_transaction:
                rollback(self.db)  # a failed ROLLBACK earlier left one open
            if durable != self._durable:
                # In WAL mode FULL fsyncs the log at every commit, NORMAL leaves it to
                # the next FULL commit or checkpoint; a durable commit covers both.
                self.db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._durable = durable
            with transaction(self.db):
                yield
        except (sqlite3.Error, OSError) as exc:
            said = in_words(exc, self.path) if isinstance(exc, sqlite3.Error) else exc
            raise JournalWriteError(
                f"{self.path}: cannot write to the journal ({said}); nothing of this write was kept"
            ) from None
        finally:
            self.write_lock.release()
