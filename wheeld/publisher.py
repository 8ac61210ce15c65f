"""The MQTT publisher: drains the journal's outbox to the broker, in order.

Stable client id and a persistent session (aiomqtt's default clean start would
wipe it on every start); a retained ``offline`` last will and a retained
``online`` on every connect; every retained topic republished after a
reconnect, since a broker restarted without persistence has forgotten them.
An outbox entry is acknowledged in the journal only after the broker's PUBACK.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from wheeld.journal import Journal, Outgoing

if TYPE_CHECKING:
    import aiomqtt

    from wheeld.config import Config
    from wheeld.mqtt_client import Client

ONLINE = json.dumps({"state": "online"})
OFFLINE = json.dumps({"state": "offline"})
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0

#: A received command: (name, payload, MQTT 5 properties or None) -> reply or None.
CommandHandler = Callable[[str, bytes], Awaitable[dict[str, Any]]]


class Publisher:
    """Owns the broker connection for the daemon's whole life."""

    def __init__(
        self,
        config: Config,
        journal: Journal,
        *,
        on_command: CommandHandler,
        log: Any,
    ) -> None:
        self._config = config
        self._journal = journal
        self._on_command = on_command
        self._log = log
        self._base = config.base_topic
        self._wake = asyncio.Event()
        self._client: aiomqtt.Client | None = None
        self.connected = False

    def wake(self) -> None:
        """New entries are in the outbox."""
        self._wake.set()

    def _make_client(self) -> Client:
        import aiomqtt

        from wheeld.mqtt_client import make_client

        will = aiomqtt.Will(f"{self._base}/status", OFFLINE, qos=1, retain=True)
        return make_client(
            self._config, client_id=self._config.client_id, will=will, persistent=True
        )

    async def run(self) -> None:
        """Connect, serve, and reconnect with capped backoff, forever."""
        import aiomqtt

        backoff = BACKOFF_FIRST_S
        last_error = ""
        while True:
            client = self._make_client()
            try:
                async with client:
                    self._client = client
                    self.connected = True
                    backoff = BACKOFF_FIRST_S
                    last_error = ""
                    self._log.info(
                        "broker connected", host=self._config.mqtt.host, port=self._config.mqtt.port
                    )
                    await self._serve(client)
            except* aiomqtt.MqttError as group:
                error = str(group.exceptions[0])
                if error != last_error:
                    self._log.warning("broker unavailable, retrying", error=error)
                    last_error = error
            finally:
                self._client = None
                self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _serve(self, client: aiomqtt.Client) -> None:
        await client.publish(
            f"{self._base}/status", ONLINE, qos=1, retain=True, properties=self._json_properties()
        )
        for message in self._journal.retained():
            await self._publish(client, message)
        await client.subscribe(f"{self._base}/command/+", qos=1)
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._drain(client))
            tasks.create_task(self._listen(client))

    async def _drain(self, client: aiomqtt.Client) -> None:
        while True:
            self._wake.clear()
            entries = self._journal.pending()
            for entry in entries:
                await self._publish(client, entry.message)
                self._journal.acknowledge(entry)
            if not entries:
                await self._wake.wait()

    async def _publish(self, client: aiomqtt.Client, message: Outgoing) -> None:
        await client.publish(
            message.topic,
            message.payload,
            qos=message.qos,
            retain=message.retain,
            properties=self._json_properties(),
        )

    def _json_properties(self) -> Any:
        if self._config.mqtt.protocol != "5":
            return None
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ContentType = "application/json"
        properties.PayloadFormatIndicator = 1
        return properties

    async def _listen(self, client: aiomqtt.Client) -> None:
        prefix = f"{self._base}/command/"
        async for message in client.messages:
            topic = message.topic.value
            if not topic.startswith(prefix):
                continue
            payload = (
                message.payload
                if isinstance(message.payload, bytes)
                else (str(message.payload).encode() if message.payload is not None else b"")
            )
            reply = await self._on_command(topic[len(prefix) :], payload)
            await self._reply(client, message, reply)

    async def _reply(self, client: aiomqtt.Client, request: Any, reply: dict[str, Any]) -> None:
        properties = getattr(request, "properties", None)
        response_topic = getattr(properties, "ResponseTopic", None)
        if not response_topic:
            return  # MQTT 3.1.1, or a caller that wants no answer
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        from wheeld.config import check_topic

        try:
            check_topic(response_topic)
        except ValueError:
            self._log.warning("command reply topic refused", topic=response_topic)
            return
        answer = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        correlation = getattr(properties, "CorrelationData", None)
        if correlation:
            answer.CorrelationData = correlation
        answer.ContentType = "application/json"
        await client.publish(response_topic, json.dumps(reply), qos=1, properties=answer)

    async def stop(self) -> None:
        """Say ``offline`` ourselves (a clean disconnect sends no will)."""
        client = self._client
        if client is None:
            return
        try:
            await asyncio.wait_for(
                client.publish(
                    f"{self._base}/status",
                    OFFLINE,
                    qos=1,
                    retain=True,
                    properties=self._json_properties(),
                ),
                timeout=2,
            )
        except Exception as exc:  # the broker may be gone; stopping goes on
            self._log.warning("could not publish offline", error=str(exc))
