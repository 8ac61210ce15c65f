"""Commands in from the broker, and their replies out.

Every message on ``<base>/command/+`` is handed to the daemon's
``CommandHandler`` (a ``recall`` in a task of its own, so the commands after it
do not wait); its reply goes to the MQTT 5 response topic, else the payload's
``reply_to`` (only under ``mqtt.reply_prefix`` when it is set). The same subscription
carries the table's status (another wheeld's, say) and, at a connect, the
retained result and sequence: handed on to whom they concern.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from wheeld.core.commands import OperatorCommand, reply_address
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.shell.broker_memory import MEMORY
from wheeld.shell.properties import json_properties

if TYPE_CHECKING:
    from aiomqtt import Message
    from paho.mqtt.properties import Properties

    from wheeld.shell.mqtt_client import Client

#: Longest response topic answered, in UTF-8 bytes.
MAX_REPLY_TOPIC_BYTES = 512
#: Longest sender name handed over; longer ones are cut.
MAX_SENDER = 64

#: Receives every message on ``<base>/command/+`` and returns the reply to send
#: (``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``), or None to send
#: none (a command past its sender's rate); refusing retained or malformed
#: commands is its job.
CommandHandler = Callable[[OperatorCommand], Awaitable[dict[str, Any] | None]]


#: How much of a refused response topic a log line shows.
LOGGED_TOPIC_CHARS = 120


def reply_topic_refusal(topic: str, *, base: str, prefix: str) -> str | None:
    """Why a command's response topic may not be answered on, or None when it may.

    Never under the table's own ``<base>/`` (a reply must not pose as the
    table's state), to a ``$`` topic, a filter or a topic with an empty level;
    with ``mqtt.reply_prefix`` set, only under it (empty: any other topic, the
    broker's ACL saying where wheeld may write).
    """
    if len(topic.encode()) > MAX_REPLY_TOPIC_BYTES:
        return f"longer than {MAX_REPLY_TOPIC_BYTES} bytes"
    if topic.startswith("$"):
        return "a $ topic"
    if any(char in topic for char in "+#\0"):
        return "holds '+', '#' or NUL"
    if topic == base or topic.startswith(f"{base}/"):
        return f"under the table's own {base}/"
    directory = prefix if not prefix or prefix.endswith("/") else f"{prefix}/"
    if not topic.startswith(directory) or topic == directory:
        return f"not a topic under {directory}" if directory else "an empty topic"
    if "" in topic[len(directory) :].split("/"):
        return "has an empty level"
    return None


class RawJSON(str):
    """A reply member already written as JSON (a recall's games, written in a worker
    thread a game at a time, so the event loop never holds the GIL for all of them)."""


def reply_json(body: dict[str, Any]) -> str:
    """A reply as JSON: its members in order, a ``RawJSON`` one as it is written."""
    parts = [
        f"{json.dumps(key)}: {value if isinstance(value, RawJSON) else json.dumps(value)}"
        for key, value in body.items()
    ]
    return "{" + ", ".join(parts) + "}"  # as json.dumps writes one


def _sender(properties: Properties | None) -> str | None:
    """The MQTT 5 user property ``operator``, else ``user``, cut to MAX_SENDER."""
    pairs = getattr(properties, "UserProperty", None) or []
    found = dict(reversed(pairs))  # the first of repeated keys wins
    name = found.get("operator") or found.get("user")
    return name[:MAX_SENDER] if isinstance(name, str) and name else None


class CommandListener:
    """Reads the connection's messages: commands answered, the rest handed on."""

    def __init__(
        self,
        *,
        base: str,
        reply_prefix: str,
        protocol: str,
        log: Any,
        on_command: CommandHandler,
        on_status: Callable[[bytes, Properties | None], None],
        on_retained_result: Callable[[str, bytes], None] | None,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._base = base
        self._reply_prefix = reply_prefix
        self._protocol = protocol
        self._log = log
        self._on_command = on_command
        self._on_status = on_status
        self._on_retained_result = on_retained_result
        self._spawn = spawn

    async def run(self, client: Client, backlog: list[Message]) -> None:
        """Commands (and our status) as they come: those that came while the broker's
        memory was read first, in order."""
        from wheeld.shell.mqtt_client import too_big

        prefix = f"{self._base}/command/"
        status = f"{self._base}/status"

        async def messages() -> AsyncIterator[Message]:
            for message in backlog:
                yield message
            async for message in client.messages:
                yield message

        async for message in messages():
            topic = message.topic.value
            if too_big(topic, message.payload, self._log):  # MQTT 3.1.1: never parsed
                continue
            if topic == status and isinstance(message.payload, bytes):
                self._on_status(message.payload, message.properties)
                continue
            if topic in [f"{self._base}/{name}" for name in MEMORY[1:]] and isinstance(
                message.payload, bytes
            ):
                if message.retain and self._on_retained_result is not None:
                    self._on_retained_result(topic.rpartition("/")[2], message.payload)
                continue
            if not topic.startswith(prefix):
                continue
            payload = message.payload
            command = OperatorCommand(
                name=topic[len(prefix) :],
                payload=payload if isinstance(payload, bytes) else str(payload or "").encode(),
                retained=message.retain,
                sender=_sender(message.properties),
            )
            if command.name == "recall":
                # Read in a worker thread: the commands after it do not wait for it.
                self._spawn(self._answer(client, command, message.properties))
            else:
                await self._answer(client, command, message.properties)

    async def _answer(
        self, client: Client, command: OperatorCommand, properties: Properties | None
    ) -> None:
        """Have the command carried out, then answer it without holding up the next."""
        try:
            reply = await self._on_command(command)
        except Exception as exc:  # a bug in a command must not cut the broker connection
            self._log.error(
                "command failed", command=command.name, error=f"{type(exc).__name__}: {exc}"
            )
            reply = {"ok": False, "error": "internal error"}
        if reply is not None and not command.retained:
            # Not the broker's memory (no one to answer), nor a flood's. Sent beside what
            # comes next: a reply's acknowledgement is no reason to make a close wait.
            self._spawn(self._reply_safely(client, command, properties, reply))

    async def _reply_safely(
        self,
        client: Client,
        command: OperatorCommand,
        request: Properties | None,
        reply: dict[str, Any],
    ) -> None:
        try:
            await self._reply(client, command, request, reply)
        except Exception as exc:  # the connection went meanwhile: the command was carried out
            self._log.warning("command reply not sent", command=command.name, error=str(exc))

    async def _reply(
        self,
        client: Client,
        command: OperatorCommand,
        request: Properties | None,
        reply: dict[str, Any],
    ) -> None:
        # MQTT 5's response topic, else the payload's reply_to (MQTT 3.1.1 has no property).
        address = reply_address(command.payload)
        response_topic = getattr(request, "ResponseTopic", None) or address.reply_to
        if not response_topic:
            return  # a caller that wants no answer
        refusal = reply_topic_refusal(response_topic, base=self._base, prefix=self._reply_prefix)
        if refusal is not None:
            self._log.warning(
                "command reply not sent: response topic refused",
                command=command.name,
                # Its head: a 64 KiB topic is not worth 64 KiB of log a command.
                topic=response_topic[:LOGGED_TOPIC_CHARS],
                topic_chars=len(response_topic),
                why=refusal,
            )
            return
        body = dict(reply)
        if address.correlation_id is not None:
            body["correlation_id"] = address.correlation_id
        body["schema_version"] = SCHEMA_VERSION
        answer = json_properties(self._protocol)
        correlation = getattr(request, "CorrelationData", None)
        if not correlation and address.correlation_id:
            correlation = address.correlation_id.encode()
        if answer is not None and correlation:
            answer.CorrelationData = correlation  # MQTT 5: echoed as the property too
        code = await client.publish_acknowledged(
            response_topic, reply_json(body), properties=answer
        )
        if code.is_failure:
            self._log.warning(
                "broker refused a command reply",
                command=command.name,
                topic=response_topic,
                reason=str(code),
            )
