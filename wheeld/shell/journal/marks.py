"""What the journal keeps beside its database: the ``game-ids`` mark and the ``lock``.

- ``game-ids``: the highest game id reserved and the message seq reserved,
  one line, replaced atomically (fsync'd) whenever either grows: game ids
  ``GAME_ID_RESERVE`` at a time, seqs ``SEQ_RESERVE`` at a time, before any of
  them is journalled. Game ids and seqs are never reused: a journal that is
  deleted, emptied or older than ``game-ids`` does not restart them.
- ``lock``: held with ``flock`` while a journal is open, so two daemons never
  share one state directory; it holds the owner's pid for the error message.

``GameIds`` holds ``game-ids`` against the journal's own memory of it: the
mark the journal last wrote there (``game_ids`` in its ``state`` table) and
how its last run ended (``run``: the kernel's boot id and whether it closed
cleanly). A journal whose last run did not close cleanly, opened after the
machine restarted, may have lost its last commits made without an fsync (a
game announced but forgotten): game ids and seqs then continue past the
reserved blocks, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from wheeld.shell.journal.errors import JournalCorrupt, JournalError, JournalWriteError

if TYPE_CHECKING:
    from wheeld.core.engine import EngineState
    from wheeld.core.signing import ChainState
    from wheeld.shell.journal.connection import Connection
    from wheeld.table.effects import GameRecord

GAME_IDS_FILE = "game-ids"
LOCK_FILE = "lock"
#: Same bound as the engine's stored integers: exact in every JSON reader.
GAME_ID_LIMIT = 1 << 53
#: ``game-ids`` reserves message ``seq`` numbers this many at a time: a lost
#: or older journal restarts the chain past every seq ever reserved, never at
#: one already published, at the cost of one more small fsync per block.
SEQ_RESERVE = 1000
#: ``game-ids`` reserves game ids this many at a time: one fsync'd write of the
#: file per block of games, none for the games within it.
GAME_ID_RESERVE = 100
#: Where the kernel says which boot this is: a new id after every restart.
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")

_GAME_IDS_LINE = re.compile(r"\s*([0-9]{1,16})(?:[ \t]+([0-9]{1,16}))?\s*", re.ASCII)


class GameIdsFile:
    """``game-ids``: the highest game id and seq ever reserved for this state directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: The highest game id reserved, and the seq reserved; 0 when none.
        self.high_water, self.seq_reserved = self._read()

    def _read(self) -> tuple[int, int]:
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return 0, 0
        except OSError as exc:
            raise JournalError(f"{self.path}: cannot read: {exc}") from None
        match = _GAME_IDS_LINE.fullmatch(text)
        if match is None or int(match[1]) >= GAME_ID_LIMIT:
            raise JournalCorrupt(
                f"{self.path}: malformed: it must hold the highest game id reserved (0 for"
                f" none), then optionally the highest message seq reserved, as `41327 52000`"
            )
        return int(match[1]), int(match[2] or 0)

    def write(self, used: int, seq_reserved: int | None = None) -> None:
        """Atomically replace the file: the old or the new mark survives a crash."""
        reserved = self.seq_reserved if seq_reserved is None else seq_reserved
        target = self.path
        temporary = target.with_name(target.name + ".tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, f"{used} {reserved}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, target)
            directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(directory)  # makes the rename itself durable
            finally:
                os.close(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise JournalWriteError(
                f"{target}: cannot record game id {used}: {exc}; nothing was recorded"
            ) from None
        self.high_water = used
        self.seq_reserved = reserved


class GameIds:
    """``game-ids`` and the journal's memory of it: ids and seqs are never handed out twice.

    ``lost``: the journal was missing, emptied or older than ``game-ids``, or
    its last commits may have been lost to a power cut: ids continue past the
    reserved blocks. Each such finding is a line of ``warnings``.
    """

    def __init__(self, state_dir: Path, boot_id: str | None, warnings: list[str]) -> None:
        self.file = GameIdsFile(state_dir / GAME_IDS_FILE)
        self._boot_id = boot_id
        self._warnings = warnings
        self.lost = False
        #: The highest game id handed to the journal, from the journal's own at open.
        self.given = 0
        #: Below this the mark is never brought down (the mark found when the journal
        #: was lost: ids up to it may have been announced).
        self.floor = 0
        #: This run is recorded in the journal as open (not closed cleanly).
        self.run_marked = False

    def journal_missing(self, path: Path) -> None:
        """The journal is new: if ids were ever reserved here, it was lost."""
        if self.file.high_water > 0 or self.file.seq_reserved > 0:
            self._lose(
                f"{path}: journal was missing or empty, a new one was started;"
                f" game ids continue from {self.file.high_water + 1} ({self.file.path})"
            )

    def reconcile(self, sql: Connection, stored: EngineState | None) -> None:
        """Warn, and skip ids, when the journal may miss games.

        Within the block it reserved, a journal behind the mark is normal. It
        is not complete when ``game-ids`` holds a mark it never wrote (an older
        journal, or one from before the mark was kept in it), nor when its last
        run did not close cleanly and the machine has restarted since (its
        last commits had no fsync). Ids then continue past the reserved block.
        """
        high_water = self.file.high_water
        if stored is None:
            self.floor = high_water  # no game in it: ids continue past the mark
            return
        used = stored.next_game_id - 1
        self.given = used
        if used > high_water:
            # A journal from before game-ids existed, or game-ids was deleted.
            self.file.write(used)
        elif used < high_water and _stored_mark(sql) != high_water:
            self._lose(
                f"{sql.path}: the journal ends at game {used} but {self.file.path}"
                f" reserves up to game {high_water} (an older journal?);"
                f" game ids continue from {high_water + 1}"
            )
            return
        run = self._stored_run(sql)
        if run is not None and not run[1] and (run[0] is None or run[0] != self._boot_id):
            self._lose(
                f"{sql.path}: the last run did not close cleanly and the machine restarted"
                f" since: its last commits, made without an fsync, may be lost;"
                f" game ids continue from {high_water + 1} ({self.file.path})"
            )

    def _lose(self, warning: str) -> None:
        self.lost = True
        self.floor = self.file.high_water
        self._warnings.append(warning)

    def _stored_run(self, sql: Connection) -> tuple[str | None, bool] | None:
        """How the last run ended: (its boot id, closed cleanly), or None if never written."""
        value = sql.get("run")
        if value is None:
            return None
        try:
            run = json.loads(value)
            boot, closed = run["boot_id"], run["closed"]
        except (ValueError, TypeError, KeyError):
            return None, False  # unreadable: taken as a run that did not close cleanly
        return (boot if isinstance(boot, str) else None), closed is True

    def put_run(self, sql: Connection, *, closed: bool) -> None:
        """Write down how this run stands (inside a transaction)."""
        sql.put("run", json.dumps({"boot_id": self._boot_id, "closed": closed}, sort_keys=True))

    def put_mark(self, sql: Connection) -> None:
        """Write down the mark as it stands (inside the transaction that needs it)."""
        sql.put("game_ids", str(self.file.high_water))

    def reserve(
        self, games: list[GameRecord], state: EngineState, chain: ChainState | None = None
    ) -> None:
        """Reserve the next blocks of game ids and seqs, when these reach past the marks.

        Written before the decision is committed: a crash between the two
        skips ids, never reuses one. Only a game or a seq past its block pays
        for it, and both blocks are reserved in one write when both are due.
        """
        marks = self.file
        used = max([state.next_game_id - 1, *(game.game_id for game in games)])
        wanted = marks.high_water, marks.seq_reserved
        if used > marks.high_water:
            wanted = used + GAME_ID_RESERVE - 1, wanted[1]
        if chain is not None and chain.seq >= marks.seq_reserved:
            wanted = wanted[0], chain.seq + SEQ_RESERVE
        if wanted != (marks.high_water, marks.seq_reserved):
            marks.write(*wanted)
        self.given = max(self.given, used)

    def closed(self) -> None:
        """After a clean close's commit (fsync'd): bring the mark down to the last id given.

        Safe only then: that commit made every game up to it durable.
        """
        last = max(self.given, self.floor)
        if last < self.file.high_water:
            self.file.write(last)

    def next_after(self, stored: EngineState | None) -> int:
        """The id the next game must come after: past the reserved block when the journal
        may miss games (or has none), else after the last one handed out (a decision that
        failed to be written included: never published, but not handed out twice)."""
        return self.file.high_water if self.lost or stored is None else self.given

    def continuation(self) -> str:
        """Where game ids go on, for an error that refuses a damaged journal."""
        if self.file.high_water > 0:
            return f"game ids continue from {self.file.high_water + 1}"
        return (
            f"game ids would restart at 1: write the last game id used into {self.file.path} first"
        )


def _stored_mark(sql: Connection) -> int | None:
    """The game-id mark this journal last wrote into ``game-ids``, or None if never."""
    value = sql.get("game_ids") or ""
    if not (value.isascii() and value.isdigit()):
        return None  # an unreadable mark is no mark: the journal is taken as older
    return int(value)


def read_boot_id() -> str | None:
    """This boot's id from the kernel, or None where there is none.

    Without one, every unclean close is taken as one a power cut may have followed.
    """
    try:
        return BOOT_ID_FILE.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def lock_state_dir(state_dir: Path) -> tuple[int, ...]:
    """Hold the state directory exclusively for as long as the journal is open.

    The directory itself is locked (``flock`` on its own descriptor), so
    deleting the ``lock`` file beside the journal (a "stale lock", to an
    operator) lets no second daemon in; the file holds the owner's pid, for
    the message. flock is released by the kernel when the descriptors close,
    the process dies included: nothing to clean up after a crash.
    """
    lock_path = state_dir / LOCK_FILE
    try:
        directory = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise JournalError(f"{state_dir}: cannot open the state directory: {exc}") from None
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        os.close(directory)
        raise JournalError(f"{lock_path}: cannot open the lock file: {exc}") from None
    for held in (directory, fd):
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            os.close(directory)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise JournalError(f"{lock_path}: cannot lock: {exc}") from None
            who = f"another wheeld (pid {owner})" if owner.isdigit() else "another wheeld"
            raise JournalError(f"{state_dir}: {who} is using this state directory") from None
    # The pid is only for that message: a disk too full to hold it is no reason to stop.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return directory, fd
