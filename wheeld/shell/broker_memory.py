"""What a broker retains for the table, read before the daemon says or decides anything.

Before the daemon connects with its own client id (which would take a running
daemon's session over), ``read_broker_memory`` reads the retained
``<base>/status``, ``history``, ``sequence`` and ``result`` with a throwaway client:
another instance online there is a second wheeld for the table, and the
daemon refuses to start (``RivalDaemon``). ``retained`` is the same reading on
the daemon's own connection, at every connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.contract.registry import TOPICS
from wheeld.core.messages import SCHEMA_VERSION

if TYPE_CHECKING:
    from aiomqtt import Message

    from wheeld.config import Config
    from wheeld.shell.mqtt_client import Client

#: Start-up check for a second daemon: at most this long to connect (per
#: broker), and to wait for a retained <base>/status.
PREFLIGHT_CONNECT_S = 2.0
PREFLIGHT_WAIT_S = 1.0
#: However many brokers there are, the start-up check (and what the wheel says
#: meanwhile, held) waits at most about this long.
PREFLIGHT_TOTAL_S = 5.0
#: The longest wait for the probe to come back (``retained``): what a broker that
#: does not echo it (its ACL drops it) or does not keep the order is given.
PREFLIGHT_GRACE_S = 0.3
#: What is read of the broker's memory, in the order it is handed on: the history
#: before the sequence (a takeover there may adopt it).
MEMORY = ("status", "history", "sequence", "result")


@dataclass(frozen=True, slots=True)
class Retained:
    """What ``retained`` read, and whether it is known to be all of it."""

    #: The retained payloads by name (non-empty ones).
    remembered: dict[str, bytes]
    #: The probe came back: nothing more that is retained now is still to come.
    complete: bool


@dataclass(frozen=True, slots=True)
class BrokerMemory:
    """What a broker retains for the table, read at start before anything is decided."""

    #: Another wheeld its status says is online for the table, else None.
    rival: str | None = None
    #: The retained ``<base>/sequence`` and ``<base>/result`` payloads, if any.
    sequence: bytes | None = None
    result: bytes | None = None
    #: The retained ``<base>/history``, if any: a takeover at that sequence may adopt it.
    history: bytes | None = None


async def read_broker_memory(config: Config, instance: str, log: Any) -> BrokerMemory:
    """The table's retained status, sequence and result, from the first broker that answers.

    Read with a throwaway clean-session client id before the daemon connects
    with its own (which would take a running daemon's session over). None
    answering is no evidence: the daemon starts, notices a rival at run time,
    and checks the retained result again at every connect.
    """
    import aiomqtt

    from wheeld.shell.mqtt_client import make_client, too_big

    base = config.base_topic
    deadline = time.monotonic() + PREFLIGHT_TOTAL_S
    for server in config.mqtt.brokers:
        if time.monotonic() >= deadline:
            log.warning("start-up check: no broker answered in time", waited_s=PREFLIGHT_TOTAL_S)
            break
        client = make_client(
            config,
            client_id=f"wheeld-preflight-{secrets.token_hex(3)}",  # 23 characters: 3.1.1's limit
            server=server,
            timeout=PREFLIGHT_CONNECT_S,
        )
        try:
            async with asyncio.timeout(PREFLIGHT_CONNECT_S + PREFLIGHT_WAIT_S), client:
                held = (await retained(client, base, MEMORY)).remembered
        except (aiomqtt.MqttError, TimeoutError, OSError) as exc:
            log.debug("start-up check: broker unavailable", server=server, error=str(exc))
            continue
        for name, payload in list(held.items()):
            if too_big(f"{base}/{name}", payload, log):  # MQTT 3.1.1: never parsed
                del held[name]
        rival = None
        try:
            status = json.loads(held["status"]) if "status" in held else None
        except (ValueError, RecursionError):  # nested too deep is no status either
            status = None
        if isinstance(status, dict) and status.get("state") != "offline":
            other = status.get("instance")
            if isinstance(other, str) and other != instance:
                rival = other[:200]
        sequence, result = held.get("sequence"), held.get("result")
        return BrokerMemory(rival, sequence, result, held.get("history"))
    return BrokerMemory()


async def retained(
    client: Client, base: str, names: tuple[str, ...], others: list[Message] | None = None
) -> Retained:
    """The retained payloads the broker holds on ``<base>/<name>``, by name (non-empty ones).

    Anything else that comes meanwhile (a command the broker kept for our session) is
    put in ``others``, for the caller to hand on, never dropped.
    """
    topics = {f"{base}/{name}": name for name in names}
    probing = probe_topic(base)
    # One SUBSCRIBE for them all and the probe's topic, one round trip (not one each):
    # the broker handles a packet's subscriptions in order, queueing what it retains
    # for each, and acknowledges them together, before the probe is sent.
    await client.subscribe([(topic, 1) for topic in (*topics, probing)])
    waited = time.monotonic()
    # The probe, a message to ourselves: a broker queues what it retains for a
    # subscription as it handles it, and what it sends one client in order (mosquitto:
    # one queue a client, which a SUBACK does not go through), so once the probe is
    # back what is retained is here. The wait ends then, not after a fixed grace.
    # JSON, as every payload under the base topic: a subscriber to ``<base>/#`` sees it.
    probe = b'{"probe": "%s", "schema_version": %d}' % (
        secrets.token_hex(8).encode(),
        SCHEMA_VERSION,
    )
    await client.publish_acknowledged(probing, probe)
    left = PREFLIGHT_WAIT_S - (time.monotonic() - waited)
    held: dict[str, bytes] = {}
    complete = False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, min(left, PREFLIGHT_GRACE_S))):
            async for message in client.messages:
                topic = message.topic.value
                if topic == probing:
                    if message.payload == probe:
                        complete = True
                        break
                    continue  # another start-up check's probe
                name = topics.get(topic)
                if name is None:
                    if others is not None:
                        others.append(message)
                    continue
                # A status said meanwhile is the status now; a live sequence or result
                # is another controller's own news, not what the broker keeps.
                if not (message.retain or name == "status"):
                    continue
                if isinstance(message.payload, bytes) and message.payload:
                    held[name] = message.payload
                else:
                    held.pop(name, None)  # cleared
    return Retained(held, complete)


def probe_topic(base: str) -> str:
    """Where ``retained`` sends itself its probe (and is subscribed)."""
    return TOPICS["preflight"].address(base)
