"""An unwritable journal: said everywhere, nothing new decided, tried again every second.

The fault's alarm and ``<base>/status`` go out outside the journal (it cannot
keep them); once a write succeeds the pipeline voids the games it could not
record and the status says ``online`` again.

A fault that comes back soon after it cleared (a file-size limit the write-ahead
log outgrows between checkpoints, a disk that fills again) is held: the first
try after it waits twice as long as the last hold did, up to ``JOURNAL_HOLD_MAX_S``.
Raising and clearing an alarm every few seconds tells the floor nothing but noise;
a journal that stays writable for ``JOURNAL_FLAP_WINDOW_S`` earns the one-second
retry back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wheeld.shell.jobs import Parts
    from wheeld.shell.scheduler import Timer
    from wheeld.table.effects import Effects

#: How often an unwritable journal is tried again.
JOURNAL_RETRY_S = 1.0
#: A fault back within this long of its clear is a flapping one: its hold doubles.
JOURNAL_FLAP_WINDOW_S = 300.0
#: The longest a flapping fault is held before the journal is tried again.
JOURNAL_HOLD_MAX_S = 300.0


class JournalFault:
    """The ``journal_unwritable`` fault's publication, its retry and its hold."""

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
        #: How long the fault is held before its first retry.
        self.hold_s = JOURNAL_RETRY_S
        #: When (monotonic) the journal last became writable again; None if never.
        self._cleared_at: float | None = None

    def failed(self, failed: Effects, error: str) -> None:
        """Say so everywhere, decide nothing new, and try the journal again (after the hold)."""
        now = self._scheduler.clock.wall()  # midway through applying effects: no step noticed
        self._settle()
        effects = self._pipeline.journal_write_failed(failed, error, now)
        for message in effects.messages:
            self._publisher.publish_unjournaled(message)
        for record in effects.logs:
            getattr(self._log, record.level)(record.event, **record.fields)
        self._notifier.status(self._condition.status_line())
        if self._retry is None:
            self._hold()
            self._retry = self._scheduler.after(self.hold_s, self._try_again, "journal retry")

    def _hold(self) -> None:
        """A new fault: held longer when the last one cleared only moments ago."""
        if self._cleared_at is None:
            return
        since = self._scheduler.clock.monotonic() - self._cleared_at
        if since >= JOURNAL_FLAP_WINDOW_S:
            self.hold_s = JOURNAL_RETRY_S
            return
        self.hold_s = min(self.hold_s * 2, JOURNAL_HOLD_MAX_S)
        self._log.warning(
            "journal unwritable again soon after it recovered: held in fault before the next try",
            recovered_s_ago=round(since, 1),
            hold_s=self.hold_s,
        )

    def _try_again(self, now: float) -> None:
        self._retry = None
        if not self._journal.writable(now):
            self._retry = self._scheduler.after(JOURNAL_RETRY_S, self._try_again, "journal retry")
            return
        self._settle()
        recovered = self._pipeline.journal_recovered(now)
        # Said only once the recovery's own commit (the voided games, the alarm's clear)
        # is kept: when it fails too, "journal writable again" would be a line's lie.
        said, recovered.logs = recovered.logs, []
        self._apply(recovered)
        # What the publisher could not mark sent meanwhile is offered again now.
        self._publisher.wake()
        if not self._pipeline.journal_failed:
            self._cleared_at = self._scheduler.clock.monotonic()
            for record in said:
                getattr(self._log, record.level)(record.event, **record.fields)
            self._publisher.publish_unjournaled(self._pipeline.status_message())
        self._notifier.status(self._condition.status_line())
