"""``recall``: the last games with their events and serial lines, read from the journal.

Read in a process of its own (``RecallReader``), with a connection of its
own (indexed, a few games), one recall at a time: decoding a game's blocks
and writing some 90 KiB of JSON is tens of milliseconds of Python, which in a
thread of the daemon would take the GIL from the loop that decides games at
each of its turns. The loop only gets the reply's text back, one string.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld.core.commands import CommandError, OperatorCommand, Recall, named_operator, parse
from wheeld.shell.command_listener import RawJSON
from wheeld.shell.journal import JournalError
from wheeld.table.effects import CommandRecord, Effects

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: Recalls read at once; the others wait their turn.
RECALLS_AT_ONCE = 1
#: The recall process goes after this long without a recall (its memory given back);
#: the next recall starts another (some 0.3 s more for that one).
RECALL_IDLE_S = 600.0
#: The recall process's niceness, added to the daemon's: on a busy machine the loop that
#: decides games gets a core before a recall does.
RECALL_NICENESS = 10


class RecallReader:
    """The games asked for, as the reply's JSON array, written in a process of its own,
    started at the first recall and ended after ``RECALL_IDLE_S`` without one; in a
    worker thread where no process can be started (no shared memory for its locks)."""

    def __init__(self, journal_path: Path) -> None:
        self._path = journal_path
        self._pool: ProcessPoolExecutor | None = None
        self._in_process = True
        self._idle: asyncio.TimerHandle | None = None

    async def read(self, last: int, game_id: int | None) -> str:
        # Imported at the first recall, not on the daemon's way to READY.
        from concurrent.futures import BrokenExecutor

        from wheeld.shell.journal.recall import recall_json

        loop = asyncio.get_running_loop()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        try:
            pool = self._process()
            if pool is None:
                return await asyncio.to_thread(recall_json, self._path, last, game_id)
            try:
                return await loop.run_in_executor(pool, recall_json, self._path, last, game_id)
            except BrokenExecutor:  # the process died (killed, out of memory): a new one
                self.close()
                raise JournalError(f"{self._path}: the recall process ended; ask again") from None
        finally:
            if self._pool is not None:
                self._idle = loop.call_later(RECALL_IDLE_S, self.close)

    def _process(self) -> ProcessPoolExecutor | None:
        if self._pool is None and self._in_process:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            try:
                # Spawned, not forked: the daemon has threads (and their locks) a fork
                # would copy in whatever state they are.
                self._pool = ProcessPoolExecutor(
                    1,
                    multiprocessing.get_context("spawn"),
                    initializer=_behind_the_loop,
                    initargs=(os.getpid(),),
                )
            except OSError:
                self._in_process = False
        return self._pool

    def close(self) -> None:
        """End the recall process (a recall under way is answered first, in the background)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.shutdown(wait=False, cancel_futures=True)


def _behind_the_loop(daemon: int) -> None:
    """In the recall process, first: yield the CPU to the daemon's loop, and end with the
    daemon."""
    with contextlib.suppress(OSError):
        os.nice(RECALL_NICENESS)
    threading.Thread(target=_end_with, args=(daemon,), name="end-with-daemon", daemon=True).start()


def _end_with(daemon: int) -> None:
    """Ends this process once ``daemon`` has ended. A daemon stopped cleanly shuts the
    pool down, but one killed (SIGKILL, out of memory) tells its worker nothing: the
    worker holds both ends of the pool's queue, so it never reads an end of file, and
    lived on for ever, orphaned, with the resource tracker whose pipe it keeps open."""
    try:
        gone = os.pidfd_open(daemon)
    except ProcessLookupError:
        os._exit(0)
    except OSError:  # no pidfd (Linux before 5.3): it ends with the pool's shutdown only
        return
    if os.getppid() == daemon:  # the pidfd is the daemon's, not a successor's of its pid
        select.select([gone], [], [])
    os._exit(0)


class RecallDesk:
    """Answers ``recall`` and journals that it did (or why it did not)."""

    def __init__(self, *, log: Any, journal_path: Path, apply: Callable[[Effects], None]) -> None:
        self._log = log
        self._apply = apply
        self._reading = asyncio.Semaphore(RECALLS_AT_ONCE)
        self.reader = RecallReader(journal_path)

    async def answer(self, command: OperatorCommand, now: float) -> dict[str, Any]:
        """The reply (``schema_version`` is the caller's to add)."""
        text = command.payload[:2000].decode("utf-8", "replace")
        try:
            asked = parse(command)
            assert isinstance(asked, Recall)
            async with self._reading:
                games = RawJSON(await self.reader.read(asked.last, asked.game_id))
            reply: dict[str, Any] = {"ok": True, "games": games}
            record = CommandRecord(now, command.name, asked.operator, text, True, "recalled")
        except (CommandError, JournalError) as exc:
            reply = {"ok": False, "error": str(exc)}
            sender = named_operator(command)
            record = CommandRecord(now, command.name, sender, text, False, str(exc))
            self._log.warning(
                "command refused", command=command.name, sender=sender, error=str(exc)
            )
        self._apply(Effects(commands=[record]))
        return reply
