"""``--capture``: the wheel's traffic written as it passes, in the capture format.

Each line the wheel sends or is sent, with the host time it passed at; a line
too long for the format is cut into marked pieces; a wall-clock step is noted so
``replay`` does not read it as silence. Appends only to a capture, one run a file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Literal, TextIO

from wheeld.core.capture import (
    CUT_MARK,
    FORMAT_LINE,
    MAX_LINE_CHARS,
    clock_step_comment,
    format_line,
)
from wheeld.core.framing import CUT_BYTES, LineSplitter, lines_of


class CaptureWriter:
    """Records the link's traffic in the capture format, line by line.

    A line the wheel runs on without a line end is written in pieces of
    ``CUT_BYTES``, each marked and counted in ``cut_lines``, so a stream of
    garbage costs time and memory in proportion to its length. Appending to a
    capture that a crash left mid-line first drops that unfinished last line
    (``dropped_bytes``): it could never be read back, and what follows could.
    """

    def __init__(self, path: Path, driver: str) -> None:
        self.cut_lines = 0
        self.dropped_bytes = 0
        self._from_wheel = LineSplitter()
        #: When the unfinished line's last bytes came, on the daemon's clock: its time if
        #: it is written unfinished at close (the host clock is not read here).
        self._partial_at = 0.0
        try:
            # O_NONBLOCK: a FIFO with no reader fails at once instead of hanging.
            fd = os.open(
                path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666
            )
        except OSError as exc:
            raise OSError(f"--capture {path}: {exc.strerror or exc}") from None
        try:
            self._lock(fd, path)
            size = self._check_existing(fd, path)
        except OSError:
            os.close(fd)
            raise
        self._file: TextIO = os.fdopen(fd, "a", encoding="ascii", buffering=1)
        if size == 0:
            self._file.write(f"{FORMAT_LINE}\n# driver: {driver}\n")

    @staticmethod
    def _lock(fd: int, path: Path) -> None:
        """Held for as long as the capture is written (released when it is closed): two runs
        on one file would interleave their wheels' lines, a capture that replays neither."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OSError(
                    f"--capture {path}: another wheeld is writing it (each run needs its own file)"
                ) from None
            if exc.errno not in (errno.ENOLCK, errno.EINVAL, errno.EBADF):
                raise OSError(f"--capture {path}: {exc.strerror or exc}") from None
            # A file system without locks, a pipe: written unlocked, as before.

    def _check_existing(self, fd: int, path: Path) -> int:
        """The size to append at, after refusing what is not a capture."""
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"--capture {path}: not a regular file")
        if status.st_size == 0:
            return 0
        if os.pread(fd, len(FORMAT_LINE) + 1, 0) != f"{FORMAT_LINE}\n".encode():
            raise OSError(f"--capture {path}: not a wheeld capture; refusing to append to it")
        tail_at = max(0, status.st_size - MAX_LINE_CHARS)
        tail = os.pread(fd, status.st_size - tail_at, tail_at)
        if tail.endswith(b"\n"):
            return status.st_size
        kept = tail_at + tail.rfind(b"\n") + 1
        os.ftruncate(fd, kept)
        self.dropped_bytes = status.st_size - kept
        return kept

    def received(self, data: bytes, at: float) -> None:
        # A piece of a line that runs on is written now, not held for a line end
        # that may never come.
        for line in self._from_wheel.feed(data):
            self._write("<", line.data, at, runs_on=line.over)
        self._partial_at = at

    def clock_step(self, step_s: float) -> None:
        """Record that the host's wall clock stepped, so replay does not read silence."""
        self._file.write(clock_step_comment(step_s))

    def sent(self, data: bytes, at: float) -> None:
        for line in lines_of(data):
            self._write(">", line, at)

    def _write(
        self, direction: Literal["<", ">"], line: bytes, at: float, *, runs_on: bool = False
    ) -> None:
        """Write a line, marked when it is a piece of one that ran on, in pieces when long."""
        if len(line) <= CUT_BYTES and not runs_on:
            self._file.write(format_line(at, direction, line))
            return
        for start in range(0, max(len(line), 1), CUT_BYTES):
            self.cut_lines += 1
            self._file.write(CUT_MARK)
            self._file.write(format_line(at, direction, line[start : start + CUT_BYTES]))

    def close(self) -> None:
        if unended := self._from_wheel.partial:
            self._write("<", unended, self._partial_at)
        self._file.close()
