"""Journal retention (``[state] decisions_days``, ``frames_days``, ``keep_games``).

At start and every hour, a batch at a time: what a batch deletes is found
in a worker thread (the reads, most of the work), then deleted on the loop
(one short transaction, the loop being the journal's one writer); between
two batches the loop is left ``RETENTION_PAUSE_S`` to the table.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from wheeld.shell.jobs.base import Job, Parts
from wheeld.shell.journal import JournalError, Retention
from wheeld.shell.scheduler import Timer

#: How often journal retention runs.
RETENTION_EVERY_S = 3600.0
#: Between two retention batches the loop is left this long to the table.
RETENTION_PAUSE_S = 0.05
#: At a stop, how long a batch under way may still take.
RETENTION_PATIENCE_S = 5.0


class RetentionJob(Job):
    """Prunes the journal by age, a batch at a time, its reads off the loop."""

    name: ClassVar[str] = "retention"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        state = parts.config.state
        self._pruner = parts.journal.pruner(
            Retention(
                decisions_days=state.decisions_days,
                frames_days=state.frames_days,
                keep_games=state.keep_games,
            )
        )
        self._pruned = 0
        self._next_batch: Timer | None = None
        self._batch: asyncio.Task[None] | None = None
        self._stopped = False

    def period_s(self) -> float:
        return RETENTION_EVERY_S

    def started(self, now: float) -> None:
        self.tick(now)

    def tick(self, now: float) -> None:
        """One batch now (found in a worker thread), the next once the loop has had its
        turn."""
        if self._next_batch is not None:
            self._next_batch.cancel()
            self._next_batch = None
        if self._stopped or (self._batch is not None and not self._batch.done()):
            return  # a batch under way sets the next itself
        self._batch = asyncio.get_running_loop().create_task(self._step(now))

    async def _step(self, now: float) -> None:
        try:
            batch = await asyncio.to_thread(self._pruner.find, now)
            deleted = 0 if self._stopped else self._pruner.delete(batch)
        except JournalError as exc:  # cannot write, or cannot read (a damaged old page)
            self.parts.log.warning("journal retention postponed", error=str(exc))
            return
        self._pruned += deleted
        if deleted and not self._stopped:
            self._next_batch = self.parts.scheduler.after(
                RETENTION_PAUSE_S, self.tick, "retention batch"
            )
        elif not deleted and self._pruned:
            self.parts.log.info("journal retention", deleted_rows=self._pruned)
            self._pruned = 0

    async def stopping(self) -> None:
        """No next batch; the one under way ends (before the journal closes), then the
        pruner's connection."""
        self._stopped = True
        if self._next_batch is not None:
            self._next_batch.cancel()
            self._next_batch = None
        if self._batch is not None:
            await asyncio.wait([self._batch], timeout=RETENTION_PATIENCE_S)
            if not self._batch.done():
                return  # still at it (a slow disk): its connection goes with the process
        self._pruner.close()
