"""An unwritable journal: said everywhere, nothing new decided, tried again every second.

The fault's alarm and ``<base>/status`` go out outside the journal (it cannot
keep them); once a write succeeds the pipeline voids the games it could not
record and the status says ``online`` again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wheeld.shell.jobs import Parts
    from wheeld.shell.scheduler import Timer
    from wheeld.table.effects import Effects

#: How often an unwritable journal is tried again.
JOURNAL_RETRY_S = 1.0


class JournalFault:
    """The ``journal_unwritable`` fault's publication and its retry."""

    def __init__(self, parts: Parts) -> None:
        self._log = parts.log
        self._scheduler = parts.scheduler
        self._journal = parts.journal
        self._pipeline = parts.pipeline
        self._publisher = parts.publisher
        self._notifier = parts.notifier
        self._condition = parts.condition
        self._apply = parts.apply
        self._settle = parts.settle
        self._retry: Timer | None = None

    def failed(self, failed: Effects, error: str) -> None:
        """Say so everywhere, decide nothing new, and try the journal again every second."""
        now = self._scheduler.clock.wall()  # midway through applying effects: no step noticed
        self._settle()
        effects = self._pipeline.journal_write_failed(failed, error, now)
        for message in effects.messages:
            self._publisher.publish_unjournaled(message)
        for record in effects.logs:
            getattr(self._log, record.level)(record.event, **record.fields)
        self._notifier.status(self._condition.status_line())
        if self._retry is None:
            self._retry = self._scheduler.after(JOURNAL_RETRY_S, self._try_again, "journal retry")

    def _try_again(self, now: float) -> None:
        self._retry = None
        if not self._journal.writable():
            self._retry = self._scheduler.after(JOURNAL_RETRY_S, self._try_again, "journal retry")
            return
        self._settle()
        self._apply(self._pipeline.journal_recovered(now))
        # What the publisher could not mark sent meanwhile is offered again now.
        self._publisher.wake()
        if not self._pipeline.journal_failed:
            self._publisher.publish_unjournaled(self._pipeline.status_message())
        self._notifier.status(self._condition.status_line())
