"""The retained wheel state (``<base>/wheel``, with its counters), refreshed every minute."""

from __future__ import annotations

from typing import ClassVar

from wheeld.shell.jobs.base import Job
from wheeld.table.effects import Effects

#: How often the retained wheel state (with its counters) is refreshed.
WHEEL_STATE_EVERY_S = 60.0


class WheelStateJob(Job):
    """The pipeline builds the message; this job says when, and the STATUS line with it."""

    name: ClassVar[str] = "wheel"

    def period_s(self) -> float:
        return WHEEL_STATE_EVERY_S

    def tick(self, now: float) -> None:
        parts = self.parts
        parts.guard(lambda: parts.apply(Effects(messages=[parts.pipeline.wheel_message(now)])))
        parts.notifier.status(parts.condition.status_line())
