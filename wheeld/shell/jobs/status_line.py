"""The systemd STATUS line, said again within a second of a change in what it says of
the broker (reached, lost, refusing, a rival): else ``systemctl status`` would say
"no broker reached since start" until the wheel's next change or its minute."""

from __future__ import annotations

from typing import ClassVar

from wheeld.shell.jobs.base import Job, Parts

#: How often the broker's part of the line is looked at (on the daemon's beat).
STATUS_CHECK_S = 1.0


class StatusLineJob(Job):
    """Compares the broker's words with those last said; the whole line when they differ."""

    name: ClassVar[str] = "status line"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._said: list[str] | None = None

    def period_s(self) -> float:
        return STATUS_CHECK_S

    def tick(self, now: float) -> None:
        notifier = self.parts.notifier
        if not notifier.readied:
            return  # before READY the start says its own STATUS (the link is held back)
        condition = self.parts.condition
        words = condition.broker_words()
        if words != self._said:
            self._said = words
            line = condition.status_line()
            if line != notifier.said_status:  # READY's own line may already say it
                notifier.status(line)
