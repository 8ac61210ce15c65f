"""Following a table's topics as a consumer (the marquee, the display driver)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wheeld.config import Config

RETRY_S = 1.0


async def follow(
    config: Config,
    topics: Iterable[str],
    handle: Callable[[str, Any], None],
    log: Any,
) -> None:
    """Call ``handle(topic, payload)`` for every JSON message on ``<base>/<topic>``.

    Runs forever, reconnecting to the broker; retained messages arrive first on
    every (re)subscription. Payloads that are not JSON are skipped.
    """
    import aiomqtt

    mqtt = config.mqtt
    version = aiomqtt.ProtocolVersion.V5 if mqtt.protocol == "5" else aiomqtt.ProtocolVersion.V311
    while True:
        try:
            async with aiomqtt.Client(
                mqtt.host,
                mqtt.port,
                username=mqtt.username,
                password=mqtt.password,
                protocol=version,
                keepalive=mqtt.keepalive_s,
            ) as client:
                for topic in topics:
                    await client.subscribe(f"{config.base_topic}/{topic}", qos=1)
                log.info("following", base_topic=config.base_topic)
                async for message in client.messages:
                    try:
                        payload = json.loads(message.payload)
                    except (ValueError, TypeError):
                        continue
                    handle(message.topic.value, payload)
        except aiomqtt.MqttError as exc:
            log.warning("broker unavailable, retrying", error=str(exc))
            await asyncio.sleep(RETRY_S)
