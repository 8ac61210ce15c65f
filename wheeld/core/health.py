"""The table's health in one word, and the retained ``<base>/health`` that says it.

``ok``: the wheel is heard, the journal writes and the broker takes what is
published. ``degraded``: games are still decided and kept, but something wants
an engineer (the broker away or refusing, a fault or alert set: each in its
own list, ``faults`` the table's own health, ``alerts`` the figures' judgements). ``fault``:
no game can be decided (the wheel link down or silent, the journal unwritable),
or nothing decided can reach anyone: no broker reached since the daemon
started (``broker_unreachable``: a wrong host, a broker down at start).

Pure: the daemon reads the figures and the clocks, and says when; this module
judges them, builds the payload and decides whether it is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from wheeld.core.messages import SCHEMA_VERSION, iso_utc

HealthState = Literal["ok", "degraded", "fault"]
#: ``silent``: the port is open but nothing came for longer than ``rules.link_timeout_ms``.
LinkState = Literal["up", "silent", "down"]
BrokerState = Literal["connected", "disconnected"]
HEALTH_STATES: tuple[HealthState, ...] = ("ok", "degraded", "fault")
LINK_STATES: tuple[LinkState, ...] = ("up", "silent", "down")

#: Faults under which no game is decided (the others leave the table running).
STOPPING_FAULTS = frozenset({"journal_unwritable"})
#: No broker has been reached since start: whatever is decided reaches nobody yet.
BROKER_UNREACHABLE = "broker_unreachable"
#: Faults that make the health ``fault``: the stopping ones, and a broker never reached.
FAULT_STATE_FAULTS = STOPPING_FAULTS | {BROKER_UNREACHABLE}


@dataclass(frozen=True, slots=True)
class Condition:
    """What the health's state is judged from: cheap to read, compared at every check."""

    link: LinkState
    broker: BrokerState
    #: Faults set now, sorted: the table's own (its link, journal, cover, line noise) and
    #: the publisher's (``broker_refused``, ``session_taken_over``, ``broker_unreachable``).
    faults: tuple[str, ...]
    #: Alerts set now, sorted: statistical judgements of the figures (``wheeld.table.alerts``).
    alerts: tuple[str, ...] = ()

    @property
    def state(self) -> HealthState:
        if self.link != "up" or FAULT_STATE_FAULTS.intersection(self.faults):
            return "fault"
        if self.broker != "connected" or self.faults or self.alerts:
            return "degraded"
        return "ok"


@dataclass(frozen=True, slots=True)
class Readings:
    """The condition and the figures read with it (the outbox's depth costs a query)."""

    condition: Condition
    #: Messages waiting for the broker; None when the journal could not be read.
    outbox: int | None
    journal_bytes: int
    #: Seconds since the wheel last sent anything; None when it never has since start.
    last_frame_age_s: float | None


class HealthPayload(BaseModel):
    """``<base>/health``, retained: the table's health for monitoring."""

    # Built at first use, not at import (``wheeld run`` builds it just after READY).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    state: HealthState
    link: LinkState
    broker: BrokerState
    outbox: int | None = Field(ge=0)
    journal_bytes: int = Field(ge=0)
    last_frame_age_s: float | None
    #: The faults set: the table's own health (what may stop it vouching for results).
    faults: list[str]
    #: The alerts set: statistical judgements for an engineer (an older wheeld listed
    #: them in ``faults`` and sent no ``alerts``).
    alerts: list[str] = Field(default_factory=list)
    table: str
    ts: str
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return self.model_dump_json()


def health_payload(readings: Readings, *, table: str, now: float) -> HealthPayload:
    """The payload for ``readings`` taken at host time ``now``."""
    condition = readings.condition
    return HealthPayload(
        state=condition.state,
        link=condition.link,
        broker=condition.broker,
        outbox=readings.outbox,
        journal_bytes=readings.journal_bytes,
        last_frame_age_s=readings.last_frame_age_s,
        faults=list(condition.faults),
        alerts=list(condition.alerts),
        table=table,
        ts=iso_utc(now),
    )


class Heartbeat:
    """When ``<base>/health`` is due: at once on a change of condition, else every interval."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._said: Condition | None = None
        self._at: float | None = None

    def due(self, condition: Condition, now: float) -> bool:
        """``now`` is a monotonic time; a change of condition is always due."""
        return condition != self._said or self._at is None or now - self._at >= self.interval_s

    def said(self, condition: Condition, now: float) -> None:
        """The health for ``condition`` was handed to the broker at ``now``."""
        self._said, self._at = condition, now

    def forget(self) -> None:
        """Nothing said so far counts (the broker went away, and may have lost it)."""
        self._said = self._at = None
