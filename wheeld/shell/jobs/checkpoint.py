"""The chains' checkpoint: what they hold so far needs no walk at the next start."""

from __future__ import annotations

from typing import ClassVar

from wheeld.shell.jobs.base import Job
from wheeld.shell.journal import JournalWriteError

#: How often the chains' heads become the journal's ``checked`` mark: a start
#: after a crash walks at most this much of them.
CHECKPOINT_EVERY_S = 600.0


class CheckpointJob(Job):
    """``Journal.checkpoint`` every ten minutes."""

    name: ClassVar[str] = "checkpoint"

    def period_s(self) -> float:
        return CHECKPOINT_EVERY_S

    def tick(self, now: float) -> None:
        try:
            self.parts.journal.checkpoint()
        except JournalWriteError as exc:
            self.parts.log.warning("journal checkpoint postponed", error=str(exc))
