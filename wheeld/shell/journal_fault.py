"""An unwritable journal: said everywhere, nothing new decided, tried again with a back-off.

The fault's alarm and ``<base>/status`` go out outside the journal (it cannot
keep them); once a write succeeds the pipeline voids the games it could not
record and the status says ``online`` again. While the journal stays unwritable
it is tried after 1 s, then twice as long each time, up to ``JOURNAL_RETRY_MAX_S``:
a full disk nobody frees is one fault probed every 10 s, not a write a second, and a
freed one is back within those 10 s.

A fault that comes back soon after it cleared (a file-size limit the write-ahead
log outgrows between checkpoints, a disk that fills again) is held: the first
try after it waits twice as long as the last hold did, up to ``JOURNAL_HOLD_MAX_S``,
and the probe that must succeed before the fault clears writes twice as much as
the last one did, up to ``JOURNAL_PROBE_MAX_BYTES``. A limit that lets a probe
through but not the next few minutes of games (``ulimit -f`` under a busy table)
so settles into one fault after a flap or two, instead of raising and clearing the
alarm at every write-ahead-log checkpoint; a disk with room again passes the
larger probe at once. A journal that stays writable for ``JOURNAL_FLAP_WINDOW_S``
earns the one-second retry and the first probe's size back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheeld.shell.journal.state import PROBE_BYTES

if TYPE_CHECKING:
    from wheeld.shell.jobs import Parts
    from wheeld.shell.scheduler import Timer
    from wheeld.table.effects import Effects

#: How soon an unwritable journal is first tried again.
JOURNAL_RETRY_S = 1.0
#: The longest wait between two tries of a journal that stays unwritable.
JOURNAL_RETRY_MAX_S = 10.0
#: A fault back within this long of its clear is a flapping one: its hold doubles.
JOURNAL_FLAP_WINDOW_S = 300.0
#: The longest a flapping fault is held before the journal is tried again.
JOURNAL_HOLD_MAX_S = 300.0
#: The largest probe a flapping fault asks for: some minutes of a busy table's
#: commits (25 to 60 KiB a game), still nothing on a disk with room.
JOURNAL_PROBE_MAX_BYTES = 8 * 1024 * 1024


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
        self._guard = parts.guard
        self._retry: Timer | None = None
        #: How long the fault is held before its first retry.
        self.hold_s = JOURNAL_RETRY_S
        #: How long until the next try while the journal stays unwritable.
        self.retry_s = JOURNAL_RETRY_S
        #: What the probe must write before the fault clears.
        self.probe_bytes = PROBE_BYTES
        #: When (monotonic) the journal last passed the probe; None if never. A fault
        #: soon after is a flap, whether the recovery's own commit failed or a game's.
        self._cleared_at: float | None = None

    def failed(self, failed: Effects, error: str) -> None:
        """Say so everywhere, decide nothing new, and try the journal again (after the hold)."""
        now = self._scheduler.clock.wall()  # midway through applying effects: no step noticed
        said: list[Effects] = []
        self._guard(lambda: said.append(self._told_failed(failed, error, now)))
        if not said:
            return  # the pipeline raised: the daemon stops
        effects = said[0]
        for message in effects.messages:
            self._publisher.publish_unjournaled(message)
        for record in effects.logs:
            getattr(self._log, record.level)(record.event, **record.fields)
        self._notifier.status(self._condition.status_line())
        if self._retry is None:
            self._hold()
            self._retry = self._scheduler.after(self.hold_s, self._try_again, "journal retry")

    def _told_failed(self, failed: Effects, error: str, now: float) -> Effects:
        self._settle()
        return self._pipeline.journal_write_failed(failed, error, now)

    def _hold(self) -> None:
        """A new fault: held longer when the last one cleared only moments ago."""
        if self._cleared_at is None:
            return
        since = self._scheduler.clock.monotonic() - self._cleared_at
        if since >= JOURNAL_FLAP_WINDOW_S:
            self.hold_s = JOURNAL_RETRY_S
            self.probe_bytes = PROBE_BYTES
            return
        self.hold_s = min(self.hold_s * 2, JOURNAL_HOLD_MAX_S)
        self.probe_bytes = min(self.probe_bytes * 2, JOURNAL_PROBE_MAX_BYTES)
        self._log.warning(
            "journal unwritable again soon after it recovered: held in fault before the next "
            "try, which must write more",
            recovered_s_ago=round(since, 1),
            hold_s=self.hold_s,
            probe_kib=self.probe_bytes // 1024,
        )

    def _try_again(self, now: float) -> None:
        self._retry = None
        self._guard(lambda: self._retried(now))

    def _retried(self, now: float) -> None:
        if not self._journal.writable(now, self.probe_bytes):
            if self.retry_s < JOURNAL_RETRY_MAX_S <= self.retry_s * 2:
                self._log.warning(
                    "journal still unwritable: tried again less often",
                    every_s=JOURNAL_RETRY_MAX_S,
                    probe_kib=self.probe_bytes // 1024,
                )
            self.retry_s = min(self.retry_s * 2, JOURNAL_RETRY_MAX_S)
            self._retry = self._scheduler.after(self.retry_s, self._try_again, "journal retry")
            return
        self.retry_s = JOURNAL_RETRY_S
        self._cleared_at = self._scheduler.clock.monotonic()
        self._settle()
        recovered = self._pipeline.journal_recovered(now)
        # Said only once the recovery's own commit (the voided games, the alarm's clear)
        # is kept: when it fails too, "journal writable again" would be a line's lie.
        said, recovered.logs = recovered.logs, []
        self._apply(recovered)
        # What the publisher could not mark sent meanwhile is offered again now.
        self._publisher.wake()
        if not self._pipeline.journal_failed:
            for record in said:
                getattr(self._log, record.level)(record.event, **record.fields)
            self._publisher.publish_unjournaled(self._pipeline.status_message())
        self._notifier.status(self._condition.status_line())
