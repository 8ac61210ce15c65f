"""Journal retention (``[state] decisions_days``, ``frames_days``, ``keep_games``).

At start and every hour, a batch at a time: between two batches the loop is
left to the table, so a launch never waits for a prune.
"""

from __future__ import annotations

from typing import ClassVar

from wheeld.shell.jobs.base import Job, Parts
from wheeld.shell.journal import JournalError, Retention
from wheeld.shell.scheduler import Timer

#: How often journal retention runs.
RETENTION_EVERY_S = 3600.0
#: Between two retention batches the loop is left this long to the table.
RETENTION_PAUSE_S = 0.05


class RetentionJob(Job):
    """Prunes the journal by age, a batch at a time."""

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

    def period_s(self) -> float:
        return RETENTION_EVERY_S

    def started(self, now: float) -> None:
        self.tick(now)

    def tick(self, now: float) -> None:
        """One batch now, the next once the loop has had its turn."""
        if self._next_batch is not None:
            self._next_batch.cancel()
            self._next_batch = None
        try:
            deleted = self._pruner.step(now)
        except JournalError as exc:  # cannot write, or cannot read (a damaged old page)
            self.parts.log.warning("journal retention postponed", error=str(exc))
            return
        self._pruned += deleted
        if deleted:
            self._next_batch = self.parts.scheduler.after(
                RETENTION_PAUSE_S, self.tick, "retention batch"
            )
        elif self._pruned:
            self.parts.log.info("journal retention", deleted_rows=self._pruned)
            self._pruned = 0
