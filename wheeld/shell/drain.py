"""The journal's outbox, drained to the broker in order, each entry kept until its PUBACK.

An outbox entry is acknowledged in the journal only after a PUBACK that says
success. A PUBACK with a failure code (MQTT 5: 0x87 Not authorized, say) is a
refusal, not a delivery: the entry stays, is retried with capped exponential
backoff, and raises one ``broker_refused`` alarm. Order is kept per topic: a
refused entry holds back the later entries on its topic (so ``<base>/game``
stays in order, and an old retained value never lands after a newer one),
while other topics flow on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.core.messages import SCHEMA_VERSION, iso_utc
from wheeld.shell.clock import HostClock
from wheeld.shell.journal import JournalWriteError, OutboxEntry
from wheeld.shell.properties import json_properties, status_properties
from wheeld.table.effects import Outgoing

if TYPE_CHECKING:
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

    from wheeld.config import Config
    from wheeld.shell.journal import Journal
    from wheeld.shell.mqtt_client import Client, Pending
    from wheeld.shell.presence import Presence

#: A refused outbox entry is tried again after 1 s, 2 s, 4 s ... at most a minute apart.
REFUSED_RETRY_FIRST_S = 1.0
REFUSED_RETRY_MAX_S = 60.0
#: Entries the broker acknowledged leave the outbox in one commit, at most this many
#: (a crash before it sends them again: consumers drop repeats).
ACKNOWLEDGED_TOGETHER = 16
#: Entries on the wire at once, each on a topic of its own, before their PUBACKs are
#: awaited (a game's marker, message, result, history, statistics: five).
IN_FLIGHT = 8

#: Builds the alarm said when the broker refuses an entry: (when, code, detail).
AlarmBuilder = Callable[[float, str, dict[str, Any]], Outgoing]


@dataclass(slots=True)
class _Refusal:
    """An outbox entry the broker refused, and when to offer it again."""

    topic: str
    since: float
    retry_at: float
    delay_s: float


def unsigned_alarm(config: Config) -> AlarmBuilder:
    """An alarm builder for a publisher without a pipeline: the contract's fields, unsigned."""

    def build(at: float, code: str, detail: dict[str, Any]) -> Outgoing:
        payload = {
            "alarm": code,
            "table": config.table.id,
            "ts": iso_utc(at),
            **detail,
            "schema_version": SCHEMA_VERSION,
        }
        return Outgoing.on(config.base_topic, "alarm", json.dumps(payload))

    return build


class OutboxDrain:
    """Offers the outbox to whichever broker is connected; remembers what it refused.

    ``stuck_since`` (epoch seconds of the oldest refusal still holding an entry
    back, else None) and ``refusals`` (refused PUBACKs since start, retries
    included) are for the daemon's health and status line.
    """

    def __init__(
        self,
        config: Config,
        journal: Journal,
        presence: Presence,
        log: Any,
        *,
        alarm_message: AlarmBuilder,
        on_acknowledged: Callable[[OutboxEntry], None] | None = None,
        clock: HostClock | None = None,
    ) -> None:
        self._clock = clock or HostClock()
        self._protocol = config.mqtt.protocol
        self._status = f"{config.base_topic}/status"
        self._journal = journal
        self._presence = presence
        self._log = log
        self._alarm_message = alarm_message
        self._on_acknowledged = on_acknowledged
        self._wake = asyncio.Event()
        self._refused: dict[int, _Refusal] = {}
        #: Properties by (status or not, who says it), made and packed once.
        self._sent_properties: dict[tuple[bool, str], Properties | None] = {}
        self.refusals = 0

    @property
    def stuck_since(self) -> float | None:
        """When the oldest refusal still holding back an entry began (epoch s)."""
        return min((r.since for r in self._refused.values()), default=None)

    def wake(self) -> None:
        """New entries are in the outbox."""
        self._wake.set()

    def moved(self) -> None:
        """Another broker: it may take what this one refused, so offer it at once."""
        for refusal in self._refused.values():
            refusal.retry_at = 0.0

    async def run(self, client: Client) -> None:
        """Drain, then wait for new entries or a refused one falling due; forever."""
        while True:
            self._wake.clear()
            await self._drain_once(client)
            next_retry = min((r.retry_at for r in self._refused.values()), default=None)
            if next_retry is None:
                await self._wake.wait()
                continue
            # Woken by new entries, or by a refused one falling due again.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_retry - self._clock.monotonic())):
                    await self._wake.wait()

    async def _drain_once(self, client: Client) -> None:
        """Offer every pending entry once, in order, but none behind a refusal on its topic."""
        #: Topics with an entry still refused: nothing after it on the topic goes first.
        blocked: set[str] = set()
        after = 0
        while entries := self._journal.pending(after):
            #: Acknowledged by the broker, not yet in the journal: one commit for several.
            delivered: list[OutboxEntry] = []
            try:
                index = 0
                while index < len(entries):
                    window, index = self._window(entries, index, blocked)
                    after = entries[index - 1].id
                    if not await self._deliver_window(client, window, delivered, blocked):
                        return
            finally:
                # Even when the connection goes, or a stop cancels the drain: what the
                # broker acknowledged leaves the outbox.
                kept = self._acknowledge(delivered)
            if not kept:
                return

    def _window(
        self, entries: list[OutboxEntry], index: int, blocked: set[str]
    ) -> tuple[list[OutboxEntry], int]:
        """The entries from ``index`` that go on the wire together: at most ``IN_FLIGHT``,
        each on a topic of its own (an entry waits for the answer to the one before it on
        its topic: a refusal holds the later ones back), none held back by a refusal."""
        window: list[OutboxEntry] = []
        topics: set[str] = set()
        now = self._clock.monotonic()
        while index < len(entries) and len(window) < IN_FLIGHT:
            entry = entries[index]
            topic = entry.message.topic
            if topic in topics:
                break
            index += 1
            refusal = self._refused.get(entry.id)
            if topic in blocked or (refusal and refusal.retry_at > now):
                blocked.add(topic)
                continue
            window.append(entry)
            topics.add(topic)
        return window, index

    async def _deliver_window(
        self,
        client: Client,
        window: list[OutboxEntry],
        delivered: list[OutboxEntry],
        blocked: set[str],
    ) -> bool:
        """``window`` written at once, then each PUBACK awaited in order: a game's marker
        and its message leave back to back, the marker first on the one connection (the
        broker takes them in that order), not a round trip apart. False when the journal
        cannot write what was acknowledged."""
        sent: list[tuple[OutboxEntry, Pending]] = []
        cut: Exception | None = None
        for entry in window:
            try:
                sent.append((entry, self._send(client, entry.message)))
            except Exception as exc:  # the connection went: what was written is still awaited
                cut = exc
                break
        try:
            for entry, pending in sent:
                code = await client.acknowledgement(pending)
                if code.is_failure:
                    await self._refuse(client, entry, code)
                    blocked.add(entry.message.topic)
                    continue
                delivered.append(entry)
                if len(delivered) >= ACKNOWLEDGED_TOGETHER and not self._acknowledge(delivered):
                    return False
        finally:
            for _, pending in sent:
                client.forget(pending)
        if cut is not None:
            raise cut
        return True

    def _acknowledge(self, delivered: list[OutboxEntry]) -> bool:
        """Entries the broker acknowledged out of the outbox, in one commit (``delivered``
        emptied); False when the journal cannot write (they are sent again once it can;
        consumers drop repeats by game id)."""
        if not delivered:
            return True
        try:
            self._journal.acknowledge(*delivered)
        except JournalWriteError:
            delivered.clear()
            return False
        for entry in delivered:
            if self._on_acknowledged is not None:
                try:
                    self._on_acknowledged(entry)
                except Exception as exc:  # a counter's bug must not cut the connection
                    self._log.error("on_acknowledged failed", error=repr(exc))
            if self._refused.pop(entry.id, None) is not None:
                self._log.info(
                    "broker accepted a message it had refused", topic=entry.message.topic
                )
        delivered.clear()
        return True

    async def deliver(self, client: Client, message: Outgoing) -> ReasonCode:
        """One message at QoS 1 (the outbox's promise rests on a PUBACK): the broker's answer."""
        return await client.acknowledgement(self._send(client, message))

    def _send(self, client: Client, message: Outgoing) -> Pending:
        """``message`` written at QoS 1 now, its PUBACK to be awaited."""
        payload: str | bytes = message.payload
        status = message.topic == self._status
        if status:
            # The daemon's word now, not when it was queued: an ``online`` queued at a
            # recovery is sent again while the journal, failed once more, cannot keep its
            # acknowledgement, and must not overwrite the retained ``fault`` said since.
            payload = self._presence.said(self._presence.payload)
        return client.send_acknowledged(
            message.topic, payload, retain=message.retain, properties=self._properties(status)
        )

    def _properties(self, status: bool) -> Properties | None:
        """The properties an entry goes with (the status's name who says it), made and
        packed once: paho would pack them again for every publish."""
        key = (status, self._presence.instance)
        if key not in self._sent_properties:
            from wheeld.shell.mqtt_client import PackedOnce

            made = (
                status_properties(self._protocol, self._presence.instance)
                if status
                else json_properties(self._protocol)
            )
            self._sent_properties[key] = None if made is None else PackedOnce(made)
        return self._sent_properties[key]

    async def _refuse(self, client: Client, entry: OutboxEntry, code: ReasonCode) -> None:
        self.refusals += 1
        now = self._clock.monotonic()
        refusal = self._refused.get(entry.id)
        if refusal is not None:
            refusal.delay_s = min(refusal.delay_s * 2, REFUSED_RETRY_MAX_S)
            refusal.retry_at = now + refusal.delay_s
            self._log.debug("broker refused a message again", topic=refusal.topic, reason=str(code))
            return
        since = self._clock.wall()
        self._refused[entry.id] = _Refusal(
            entry.message.topic,
            since,
            now + REFUSED_RETRY_FIRST_S,
            REFUSED_RETRY_FIRST_S,
        )
        self._log.error(
            "broker refused a message: it stays in the outbox and is retried, "
            "holding back later messages on its topic",
            topic=entry.message.topic,
            reason=str(code),
            code=code.value,
        )
        # Best effort and not journalled: an alarm about a refusal must not
        # itself become an outbox entry that can be refused, and so on.
        alarm = self._alarm_message(
            since, "broker_refused", {"topic": entry.message.topic, "reason": str(code)}
        )
        alarm_code = await client.publish_acknowledged(
            alarm.topic, alarm.payload, properties=json_properties(self._protocol)
        )
        if alarm_code.is_failure:
            self._log.error("broker refused the alarm as well", reason=str(alarm_code))
