"""How many commands the table takes: each sender its own bucket, every sender
together one more, and recalls fewer still.

A flood under a new name each time costs no more. A command past its rate is
not parsed, not answered and not journaled on its own: a count of each kind is
journaled once a minute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wheeld.core.ratelimit import RATE_PER_S, CommandRate, Refusals
from wheeld.table.effects import CommandRecord, Effects

if TYPE_CHECKING:
    from wheeld.shell.scheduler import Scheduler, Timer

#: Recalls the table answers, every sender together.
RECALLS_PER_S = 2.0
RECALL_BURST = 5
#: Commands of one kind the table takes, every sender together.
TABLE_RATE_PER_S = 20.0
TABLE_BURST = 60
#: Commands refused over their sender's rate are journaled as a count this often.
RATE_SUMMARY_S = 60.0


class CommandGate:
    """Whether a command is within its sender's rate and the table's."""

    def __init__(self, *, log: Any, scheduler: Scheduler, apply: Callable[[Effects], None]) -> None:
        self._log = log
        self._scheduler = scheduler
        self._apply = apply
        self._command_rate = CommandRate()
        self._table_rate = CommandRate(TABLE_RATE_PER_S, TABLE_BURST)
        # A recall reads the journal (tens of milliseconds): fewer.
        self._recall_rate = CommandRate(RECALLS_PER_S, RECALL_BURST)
        #: Commands within their sender's rate refused over every sender's together.
        self._shared_refused = Refusals()
        self._summary: Timer | None = None

    def allow(self, sender: str, command: str, now: float) -> bool:
        """Within the rates; False counts it, for the minute's summary."""
        # Each sender its own bucket, and every sender together one more: a flood under
        # a new name each time costs no more (a close is another command: never held).
        recall = command == "recall"
        within = self._command_rate.allow(sender, command, now)
        if within and not (
            self._table_rate.allow("", command, now)
            and (not recall or self._recall_rate.allow("", "recall", now))
        ):
            # Counted as this sender's too: the table's own buckets count no one.
            self._shared_refused.count(sender, command)
            within = False
        if not within and self._summary is None:
            self._summary = self._scheduler.after(
                RATE_SUMMARY_S, self.journal_refusals, "rate summary"
            )
        return within

    def stopping(self, now: float) -> None:
        """What was refused is said before the journal closes."""
        if self._summary is not None:
            self._summary.cancel()
            self.journal_refusals(now)

    def journal_refusals(self, now: float) -> None:
        """Commands refused over their sender's rate this past while: one record each kind."""
        self._summary = None
        self._table_rate.take_refused()  # counted by sender in _shared_refused
        self._recall_rate.take_refused()
        records = [
            CommandRecord(
                now,
                command,
                sender or None,
                f"{count} {command} command(s) refused over the rate",
                False,
                f"rate limited: more than {RATE_PER_S:g} a second",
            )
            for (sender, command), count in sorted(self._command_rate.take_refused().items())
        ] + [
            CommandRecord(
                now,
                command,
                sender or None,
                f"{count} {command} command(s) refused over the table's rate",
                False,
                "rate limited: more than "
                f"{RECALLS_PER_S if command == 'recall' else TABLE_RATE_PER_S:g}"
                " a second from every sender together",
            )
            for (sender, command), count in sorted(self._shared_refused.take_refused().items())
        ]
        for record in records:
            self._log.warning(
                "commands refused over the rate",
                sender=record.sender,
                command=record.name,
                refused=record.payload,
            )
        if records:
            self._apply(Effects(commands=records))
