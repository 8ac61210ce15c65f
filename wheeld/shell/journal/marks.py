"""What the journal keeps beside its database: the ``game-ids`` mark and the ``lock``.

- ``game-ids``: the highest game id reserved and the message seq reserved,
  one line, replaced atomically (fsync'd) whenever either grows: game ids
  ``GAME_ID_RESERVE`` at a time, seqs ``SEQ_RESERVE`` at a time, before any of
  them is journalled. Game ids and seqs are never reused: a journal that is
  deleted, emptied or older than ``game-ids`` does not restart them.
- ``lock``: held with ``flock`` while a journal is open, so two daemons never
  share one state directory; it holds the owner's pid for the error message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from pathlib import Path

from wheeld.shell.journal.errors import JournalCorrupt, JournalError, JournalWriteError

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
