"""The write-ahead log's checkpoint, in a worker thread: it stays a few hundred KiB.

Never by a commit on the event loop (``Journal.checkpoint_elsewhere``): a
checkpoint's fsyncs must not hold up a launch. At each turn it also asks whether
the journal's path still names the file the daemon writes: a journal deleted
(moved, replaced, emptied) under it stops the daemon, whose close keeps what it
can and says where (``journal.rescue``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import ClassVar

from wheeld.shell.jobs.base import Job, Parts
from wheeld.shell.journal.errors import JournalError, in_words

#: How often the write-ahead log is checkpointed.
WAL_CHECKPOINT_S = 30.0
#: At a stop, how long a checkpoint under way may still take.
WAL_PATIENCE_S = 5.0


class JournalLost(JournalError):
    """The journal's file was deleted or replaced under the running daemon."""


def _stop_for(lost: str) -> None:
    raise JournalLost(f"{lost}: stopping; the close says what became of the journal")


class WalCheckpointJob(Job):
    """One checkpoint at a time, in a thread with a connection of its own."""

    name: ClassVar[str] = "wal"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._task: asyncio.Task[None] | None = None

    def running(self) -> None:
        self.parts.journal.checkpoint_elsewhere()

    def period_s(self) -> float:
        return WAL_CHECKPOINT_S

    def tick(self, now: float) -> None:
        lost = self.parts.journal.file.lost()
        if lost is not None:
            # Every game recorded from now on could go with the file at its close: stop
            # deciding; the close keeps what it can (``rescue``).
            self.parts.guard(lambda: _stop_for(lost))
            return
        if self._task is not None and not self._task.done():
            return  # the last one is still at it (a slow disk)
        self._task = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        journal = self.parts.journal
        path = journal.path
        try:
            await asyncio.to_thread(journal.checkpoint_log)
        except sqlite3.Error as exc:  # a full disk, say: the log waits, the journal says so
            self.parts.log.warning("journal checkpoint failed", error=in_words(exc, path))
        except Exception as exc:
            self.parts.log.warning("journal checkpoint failed", error=repr(exc))

    async def stopping(self) -> None:
        if self._task is not None:
            await asyncio.wait([self._task], timeout=WAL_PATIENCE_S)  # before ours closes
