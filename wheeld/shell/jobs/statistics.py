"""The statistics' running aggregates, kept in the journal for the next start.

Every ``STATISTICS_EVERY`` decisions, with each chains' checkpoint
(``CHECKPOINT_EVERY_S``) and at a clean stop: a start replays at most that
many decisions to count them again.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from wheeld.shell.jobs.base import Job, Parts
from wheeld.shell.journal import JournalWriteError

#: The statistics' running aggregates are kept every this many decisions (and at
#: a clean stop): a start replays at most that many.
STATISTICS_EVERY = 200
#: And this often, with the chains' checkpoint.
STATISTICS_KEPT_S = 600.0


class StatisticsJob(Job):
    """Keeps ``pipeline.statistics`` with the last decision row it counts."""

    name: ClassVar[str] = "statistics"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        #: The last decision row the kept statistics count.
        self._kept = parts.journal.statistics()[1]

    def period_s(self) -> float:
        return STATISTICS_KEPT_S

    def tick(self, now: float) -> None:
        try:
            self.keep()
        except JournalWriteError as exc:
            self.parts.log.warning("journal checkpoint postponed", error=str(exc))

    def decided(self) -> None:
        if self.parts.journal.last_decision_id() - self._kept >= STATISTICS_EVERY:
            self.keep()

    async def stopping(self) -> None:
        with contextlib.suppress(JournalWriteError):  # counted again at the next start
            self.keep()

    def keep(self) -> None:
        """The statistics' running aggregates, for the next start to go on from."""
        self.parts.settle()  # counting every game the journal keeps
        statistics = self.parts.pipeline.statistics
        journal = self.parts.journal
        last = journal.last_decision_id()
        if statistics is not None and last != self._kept:
            journal.save_statistics(statistics.snapshot(), last)
            self._kept = last
