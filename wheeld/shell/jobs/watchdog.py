"""The systemd watchdog: pinged at half its interval, withheld while the table is unhealthy."""

from __future__ import annotations

from typing import ClassVar

from wheeld.shell.jobs.base import Job


class WatchdogJob(Job):
    """Off unless systemd asked for a watchdog (``WATCHDOG_USEC``)."""

    name: ClassVar[str] = "watchdog"

    def period_s(self) -> float | None:
        interval = self.parts.notifier.watchdog_interval
        return None if interval is None else interval / 2

    def tick(self, now: float) -> None:
        parts = self.parts
        if parts.condition.healthy():
            parts.notifier.watchdog()
        else:
            parts.log.error(
                "unhealthy: withholding watchdog ping", status=parts.pipeline.status_line()
            )
