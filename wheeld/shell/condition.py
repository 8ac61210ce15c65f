"""The table's condition as the shell sees it: the link, the broker, the journal.

One reading serves ``<base>/health`` (``wheeld.shell.jobs.health``), the
metrics endpoint, the systemd STATUS line and the watchdog's judgement, so
the four never disagree.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from wheeld.core.health import BROKER_UNREACHABLE, Condition, LinkState, Readings
from wheeld.shell.journal import JournalError

if TYPE_CHECKING:
    from wheeld.config import Config
    from wheeld.shell.clock import HostClock
    from wheeld.shell.journal import Journal
    from wheeld.shell.link import WheelLink
    from wheeld.shell.publisher import Publisher
    from wheeld.table.pipeline import TablePipeline


class TableCondition:
    """Reads the link, the publisher, the journal and the pipeline's faults."""

    def __init__(
        self,
        config: Config,
        clock: HostClock,
        pipeline: TablePipeline,
        journal: Journal,
        link: WheelLink,
        publisher: Publisher,
    ) -> None:
        self._config = config
        self._clock = clock
        self._pipeline = pipeline
        self._journal = journal
        self._link = link
        self._publisher = publisher
        #: When the wheel last sent anything (monotonic), None before it ever has.
        self.heard_at: float | None = None
        #: When the daemon started (monotonic): the wheel's silence counts from here at first.
        self.started_at = clock.monotonic()
        #: The publisher's task: the watchdog asks whether it is still alive.
        self.publisher_task: asyncio.Task[None] | None = None

    def heard(self) -> None:
        """The wheel has just said something."""
        self.heard_at = self._link.last_data

    def condition(self, now: float) -> Condition:
        """The link, the broker, the faults and the alerts set, as ``<base>/health``
        judges them."""
        publisher = self._publisher
        faults = set(self._pipeline.faults)
        if publisher.stuck_since is not None:
            faults.add("broker_refused")
        if publisher.session_taken_over:
            faults.add("session_taken_over")
        if publisher.unreachable:
            faults.add(BROKER_UNREACHABLE)
        return Condition(
            link=self._link_state(now),
            broker="connected" if publisher.connected else "disconnected",
            faults=tuple(sorted(faults)),
            alerts=tuple(sorted(self._pipeline.alerts.book)),
        )

    def _link_state(self, now: float) -> LinkState:
        if not self._link.connected:
            return "down"
        # Silent for longer than the rule that voids a game for it. Counted from the
        # wheel's last word, not from the port's last (re)opening: a port reopened
        # because the wheel went quiet is no sign of the wheel.
        heard = self.heard_at if self.heard_at is not None else self.started_at
        if now - heard > self._config.rules.link_timeout_ms / 1000:
            return "silent"
        return "up"

    def readings(self) -> Readings:
        """The table's condition and figures now: for ``<base>/health`` and the metrics."""
        now = self._clock.monotonic()
        try:
            outbox: int | None = self._journal.pending_count()
        except JournalError:
            outbox = None
        heard = self.heard_at
        return Readings(
            condition=self.condition(now),
            outbox=outbox,
            journal_bytes=self._journal.disk_bytes(),
            last_frame_age_s=None if heard is None else round(max(0.0, now - heard), 3),
        )

    def healthy(self) -> bool:
        """Frames arriving or the port being retried, the journal writable, the publisher alive."""
        link_ok = self._link.retrying or self._link.hearing()
        task = self.publisher_task
        publisher_alive = task is not None and not task.done()
        return link_ok and publisher_alive and not self._pipeline.journal_failed

    def status_line(self) -> str:
        """The table's state, and what stands in the way of delivery, for sd_notify STATUS."""
        return "; ".join([self._pipeline.status_line(), *self.broker_words()])

    def broker_words(self) -> list[str]:
        """What the STATUS line says of the broker: nothing when all is well."""
        words = []
        publisher = self._publisher
        if publisher.rival is not None:
            words.append(f"another wheeld publishes for this table: {publisher.rival}")
        elif publisher.session_taken_over:
            words.append(f"MQTT client id {self._config.client_id} taken by another client")
        if publisher.stuck_since is not None:
            words.append(f"broker refusing messages ({publisher.refusals} refusals)")
        elif publisher.unreachable:
            words.append("no broker reached since start")
        elif not publisher.connected:
            words.append("broker unreachable")
        return words
