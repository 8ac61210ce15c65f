"""``<base>/health``: said when the table's condition changes, and as a heartbeat."""

from __future__ import annotations

from typing import ClassVar

from wheeld.core.health import Heartbeat, health_payload
from wheeld.shell.jobs.base import Job, Parts
from wheeld.table.effects import Outgoing

#: How often the health's condition is looked at: a change is published within this.
HEALTH_CHECK_S = 1.0


class HealthJob(Job):
    """Best effort and outside the journal, like the status: a heartbeat must
    not fill the outbox while the broker is away, and is said again anyway."""

    name: ClassVar[str] = "health"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._base = parts.config.base_topic
        self.topic = f"{self._base}/health"
        self._heartbeat = Heartbeat(parts.config.metrics.health_interval_s)

    def period_s(self) -> float:
        return HEALTH_CHECK_S

    def tick(self, now: float) -> None:
        parts = self.parts
        since = parts.scheduler.clock.monotonic()
        if not parts.publisher.connected:
            # Nobody to tell; said again on its return (a broker restarted
            # without persistence has forgotten what it retained).
            self._heartbeat.forget()
            return
        condition = parts.condition.condition(since)
        if not self._heartbeat.due(condition, since):
            return
        readings = parts.condition.readings()
        payload = health_payload(readings, table=parts.config.table.id, now=now)
        parts.publisher.publish_unjournaled(Outgoing.on(self._base, "health", payload.to_json()))
        self._heartbeat.said(readings.condition, since)
