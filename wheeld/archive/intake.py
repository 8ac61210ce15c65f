"""The archive's side of the broker: its subscriptions, every message handed to the
committer with how to acknowledge it, the acknowledgements once committed (in order,
on the connection that delivered them), and what it publishes: its recalls to the
tables and its alarms about the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiomqtt

from wheeld.archive.records import (
    MAX_MESSAGE_BYTES,
    ArchiveAlarm,
    Outcome,
    RecallRequest,
    Received,
)
from wheeld.config import ARCHIVE_KINDS
from wheeld.shell.mqtt_client import Failover, make_client

if TYPE_CHECKING:
    from wheeld.config import ArchiveSettings
    from wheeld.shell.mqtt_client import Client

#: A recall reply carries whole games with their frames: far larger than a message.
MAX_REPLY_BYTES = 16 * 1024 * 1024


#: The archive's recall replies with no ``mqtt.reply_prefix`` set.
DEFAULT_REPLY_SPACE = "wheeld-replies/"


@dataclass(frozen=True, slots=True)
class Delivery:
    """How to acknowledge a message: not the message, whose payload may be 16 MiB."""

    mid: int
    qos: int


@dataclass(slots=True)
class Item:
    """One message off the broker (with how to acknowledge it), or an outcome to commit."""

    received: Received | None = None
    message: Delivery | None = None
    generation: int = 0
    outcome: Outcome | None = None


class Intake:
    """The broker in (messages to commit) and out (recalls, the database's alarms)."""

    def __init__(self, settings: ArchiveSettings, log: Any) -> None:
        self.settings = settings
        self.config = settings.archive
        self.log = log
        # Its own replies' topic: under the prefix, or where wheeld's replies went before
        # the prefix could be left empty (a shipped ACL gives that space its readers).
        prefix = settings.mqtt.reply_prefix or DEFAULT_REPLY_SPACE
        self.reply_topic = f"{prefix}{self.config.client_id}/recall"
        #: What came, waiting for the committer.
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self.client: Client | None = None
        self.generation = 0
        #: Alarms may be kept and not yet published (a commit raised them, or the broker
        #: is back).
        self.alarms_waiting = asyncio.Event()
        #: The most messages ever waiting for the committer.
        self.held_peak = 0
        #: Bytes of payload held until their commit, and the most ever.
        self.held_bytes = 0
        self.held_bytes_peak = 0

    def subscriptions(self) -> list[tuple[str, int]]:
        topics = [f"{pattern}/{kind}" for pattern in self.config.tables for kind in ARCHIVE_KINDS]
        return [(topic, 1) for topic in [*topics, self.reply_topic]]

    def subscribe_to(self) -> list[Any]:
        """The subscriptions, and on MQTT 5 with retained messages sent only when the
        subscription is new: the session's stand across reconnections and restarts, and a
        retained payload (a forged info, garbage) is read once, not again at every start
        and every reconnection (one more reject, one more alarm each time). A retained
        message published while the archive is away is queued in its session as any."""
        if self.settings.mqtt.protocol != "5":
            return self.subscriptions()
        from paho.mqtt.subscribeoptions import SubscribeOptions

        return [
            (
                topic,
                SubscribeOptions(qos=qos, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB),
            )
            for topic, qos in self.subscriptions()
        ]

    async def follow(self) -> None:
        """Connect, subscribe and hand every message to the committer; through outages,
        along ``mqtt.servers`` as the daemon moves (``Failover``)."""
        failover = Failover(self.settings.mqtt.brokers)
        said: dict[str, str] = {}
        while True:
            server = failover.server
            since: float | None = None
            error = "the broker ended the session"
            try:
                async with make_client(
                    self.settings,
                    client_id=self.config.client_id,
                    server=server,
                    persistent=True,
                    manual_ack=True,
                    max_packet_bytes=MAX_REPLY_BYTES,
                    receive_maximum=self.config.receive_maximum,
                ) as client:
                    self.generation += 1
                    generation = self.generation
                    self.client = client
                    await client.subscribe(self.subscribe_to())
                    since = time.monotonic()
                    said.clear()
                    self.log.info("broker connected", server=server)
                    self.alarms_waiting.set()
                    async for message in client.messages:
                        received = self.received(message)
                        delivery = Delivery(message.mid, message.qos)
                        del message  # its payload is not held while it waits
                        await self.queue.put(Item(received, delivery, generation))
                        self.held_peak = max(self.held_peak, self.queue.qsize())
                        self.held_bytes += len(received.payload)
                        self.held_bytes_peak = max(self.held_bytes_peak, self.held_bytes)
            except aiomqtt.MqttError as exc:
                error = str(exc)
            except Exception as exc:  # TLS or client setup: keep trying, say so once
                error = f"{type(exc).__name__}: {exc}"
            finally:
                self.client = None
            delay = failover.failed() if since is None else failover.lost(time.monotonic() - since)
            if said.get(server) != error:
                said[server] = error
                self.log.warning(
                    "broker unavailable, retrying", server=server, error=error, next=failover.server
                )
            await asyncio.sleep(delay)

    def received(self, message: aiomqtt.Message) -> Received:
        """A message as the ledger takes it. One larger than any message of a table is
        cut to what ``rejected`` keeps of it (its size kept): while the database is away,
        a flood of 16 MiB payloads waits in memory at 64 KiB each. A recall reply (many
        games) is held whole."""
        topic = message.topic.value
        payload = message.payload
        if isinstance(payload, bytes | bytearray):
            data = bytes(payload)
        else:
            data = b"" if payload is None else str(payload).encode()
        if len(data) > MAX_MESSAGE_BYTES and topic != self.reply_topic:
            return Received(topic, data[:MAX_MESSAGE_BYTES], time.time(), size=len(data))
        return Received(topic, data, time.time())

    def acknowledge(self, items: list[Item]) -> None:
        """PUBACK each committed message, in order, on the connection that delivered it."""
        client = self.client
        for item in items:
            if item.message is None or client is None or item.generation != self.generation:
                continue
            try:
                client.acknowledge(item.message)
            except Exception as exc:  # the connection went: the broker sends it again
                self.log.debug("acknowledgement not sent", error=str(exc))
                return

    async def ask(self, request: RecallRequest) -> None:
        """Send ``recall`` to a table, the reply to come on this archive's reply topic."""
        client = self.client
        if client is None:
            return  # unanswered, it is asked again after the timeout
        command: dict[str, Any] = {
            "game_id": request.game_id,
            "last": request.last,
            "operator": self.config.client_id,
            "reply_to": self.reply_topic,
            "correlation_id": request.correlation_id,
        }
        properties = None
        if self.settings.mqtt.protocol == "5":
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ResponseTopic = self.reply_topic
            properties.CorrelationData = request.correlation_id.encode()
        try:
            await client.publish(
                f"{request.base}/command/recall",
                json.dumps(command),
                qos=1,
                properties=properties,
            )
        except aiomqtt.MqttError as exc:
            self.log.warning("recall not sent", table=request.table, error=str(exc))
            return
        self.log.info(
            "recall sent", table=request.table, game_id=request.game_id, last=request.last
        )

    async def publish_now(self, alarm: ArchiveAlarm) -> None:
        """An alarm about the database itself: published at once, best effort, not kept."""
        client = self.client
        if client is None:
            return
        with contextlib.suppress(Exception):
            await client.publish(self.config.alarm_topic, json.dumps(alarm.payload()), qos=1)
