"""The MQTT publisher: one broker connection for the daemon's whole life.

Stable client id and a persistent session (aiomqtt's default clean start would
wipe it on every start); a retained ``offline`` last will and a retained
``online`` on every connect (``presence.py``); every retained topic republished
after a reconnect, since a broker restarted without persistence has forgotten
them. At each connect, what the broker retains for the table is read first
(``broker_memory.py``), then the commands subscribed to, then ``online`` said;
then the outbox drains (``drain.py``) beside the commands coming in
(``command_listener.py``).

Several brokers (``mqtt.servers``): tried in order, moving to the next when a
connection is lost or cannot be made, always starting again from the first
(``wheeld.shell.mqtt_client.Failover``). Nothing is lost or reordered by a move: the
outbox is drained in order from its oldest unacknowledged entry on whichever
broker takes it. An outage is said in the log at once, then less often
(``outage.py``); another client taking our session is noticed and backed off
(``takeover.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from wheeld.config import split_server
from wheeld.contract.registry import TOPICS
from wheeld.shell.broker_memory import MEMORY, probe_topic, retained
from wheeld.shell.clock import HostClock
from wheeld.shell.command_listener import CommandHandler, CommandListener
from wheeld.shell.drain import AlarmBuilder, OutboxDrain, unsigned_alarm
from wheeld.shell.journal import Journal, OutboxEntry
from wheeld.shell.outage import Outage
from wheeld.shell.presence import Presence
from wheeld.shell.properties import json_properties, status_properties
from wheeld.shell.takeover import SessionTakeover, causes
from wheeld.table.effects import Outgoing

if TYPE_CHECKING:
    from aiomqtt import Message
    from paho.mqtt.properties import Properties

    from wheeld.config import Config
    from wheeld.shell.mqtt_client import Client


class Publisher:
    """Owns the broker connection for the daemon's whole life.

    For the daemon's status: ``connected``; ``server`` (the broker it is
    connected to, ``host:port``, else None); ``stuck_since`` (epoch seconds of
    the oldest refusal still holding an entry back, else None); ``refusals``
    (refused PUBACKs since start, retries included); ``session_taken_over``.
    ``on_acknowledged`` is told of every outbox entry once the journal has
    acknowledged it (the broker took it).
    """

    def __init__(
        self,
        config: Config,
        journal: Journal,
        *,
        on_command: CommandHandler,
        log: Any,
        on_retained_result: Callable[[str, bytes], None] | None = None,
        instance: str = "",
        on_acknowledged: Callable[[OutboxEntry], None] | None = None,
        on_rival: Callable[[str], None] | None = None,
        alarm_message: AlarmBuilder | None = None,
        clock: HostClock | None = None,
    ) -> None:
        #: The daemon's one clock (its own when run alone, in tests).
        self._clock = clock = clock or HostClock()
        self._config = config
        self._journal = journal
        #: Told the retained <base>/result the broker holds: the daemon checks its
        #: game id against its own (a lost state directory would reuse ids).
        self._on_retained_result = on_retained_result
        self._log = log
        self._base = config.base_topic
        self._protocol = config.mqtt.protocol
        self.presence = Presence(config, instance, log, on_rival)
        self.drain = OutboxDrain(
            config,
            journal,
            self.presence,
            log,
            # Builds an alarm as the pipeline does (schema_version, signature); the
            # bare payload when the publisher runs without a pipeline (its tests).
            alarm_message=alarm_message or unsigned_alarm(config),
            on_acknowledged=on_acknowledged,
            clock=clock,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.commands = CommandListener(
            base=self._base,
            reply_prefix=config.mqtt.reply_prefix,
            protocol=self._protocol,
            log=log,
            on_command=on_command,
            on_status=self.presence.heard,
            on_retained_result=on_retained_result,
            spawn=self._spawn,
        )
        self.takeover = SessionTakeover(config, self.presence, log)
        self._standing_down = False
        self._client: Client | None = None
        #: Subscribed to the table's commands on the broker connected to.
        self.listening = False
        self.connected = False
        #: Whether any broker has been reached since start.
        self.reached = False
        #: No broker reached since start, and at least one try has failed: health ``fault``.
        self.unreachable = False
        #: The broker connected to, ``host:port``; None while there is none.
        self.server: str | None = None

    @property
    def instance(self) -> str:
        """Who we are on ``<base>/status`` (host and state directory)."""
        return self.presence.instance

    @property
    def rival(self) -> str | None:
        """Another wheeld seen publishing this table's status, if any."""
        return self.presence.rival

    @property
    def stuck_since(self) -> float | None:
        """When the oldest refusal still holding back an entry began (epoch s)."""
        return self.drain.stuck_since

    @property
    def refusals(self) -> int:
        """Refused PUBACKs since start, retries included."""
        return self.drain.refusals

    @property
    def session_taken_over(self) -> bool:
        """Another client with our client id has been taking our session lately."""
        return self.takeover.taken

    def wake(self) -> None:
        """New entries are in the outbox."""
        self.drain.wake()

    def _make_client(self, server: str) -> Client:
        import aiomqtt

        from wheeld.shell.mqtt_client import make_client

        offline = self.presence.offline()
        status = TOPICS["status"]
        will = aiomqtt.Will(
            status.address(self._base), offline, qos=status.qos, retain=status.retain
        )
        return make_client(
            self._config,
            client_id=self._config.client_id,
            server=server,
            will=will,
            persistent=True,
        )

    async def run(self) -> None:
        """Connect, serve, and reconnect, moving along the brokers, forever."""
        import aiomqtt

        from wheeld.shell.mqtt_client import Failover, in_words

        failover = Failover(self._config.mqtt.brokers)
        outage = Outage(self._clock)
        last_server: str | None = None
        takeover = self.takeover
        while True:
            server = failover.server
            client = self._make_client(server)
            takeover.connected_at = None
            taken_over = False
            error = "the broker ended the session"
            detail = ""
            try:
                async with client:
                    self._client = client
                    self.connected = self.reached = True
                    self.unreachable = False
                    self.server = server
                    takeover.connected_at = self._clock.monotonic()
                    if server != last_server:
                        self.drain.moved()
                        last_server = server
                    host, port = split_server(server)
                    self._log.info("broker connected", host=host, port=port, **outage.ended())
                    await self._serve(client)
                    if self._standing_down:
                        return
            except* aiomqtt.MqttError as group:
                taken_over = takeover.judge(group, self._clock.monotonic(), self._clock.wall())
                # aiomqtt's own words ("Disconnected during message iteration: [code:128]
                # Unspecified error") say where the loss was noticed, not why.
                error = in_words(group)
                detail = ": ".join(dict.fromkeys(str(cause) for cause in causes(group)))
            finally:
                self._client = None
                self.connected = self.listening = False
                self.server = None
            if taken_over:
                # Slower each time, so two daemons with one id stop flapping every
                # second; on the same broker, which is up.
                await asyncio.sleep(takeover.backed_off())
                continue
            connected_at = takeover.connected_at
            held_s = None if connected_at is None else self._clock.monotonic() - connected_at
            delay = failover.failed() if held_s is None else failover.lost(held_s)
            self.unreachable = not self.reached
            said = {"server": server, "error": error, "detail": detail, "next": failover.server}
            outage.say(self._log, said, held_s=held_s, delay=delay, reached=self.reached)
            await asyncio.sleep(delay)

    async def _serve(self, client: Client) -> None:
        # Before saying anything, what the broker holds for the table now: its status
        # (another wheeld online there took the table while we were away: we stand
        # down), then its sequence and result (another controller went on past this
        # journal: what it still holds of games never went out, and must not now).
        from wheeld.shell.mqtt_client import too_big

        names = MEMORY if self._on_retained_result else ("status",)
        backlog: list[Message] = []
        memory = await retained(client, self._base, names, backlog)
        if memory.complete:
            # All the broker retains is read: what it would send on these now is our own
            # sequence markers and results back (a tenth of our MQTT work), and the
            # probes of other start-up checks. A broker that did not echo the probe
            # may still send a retained one late: we stay subscribed to it there.
            done = [probe_topic(self._base)]
            done += [f"{self._base}/{name}" for name in names if name != "status"]
            await client.unsubscribe(done)
        held = memory.remembered
        for name, payload in [(name, held[name]) for name in names if name in held]:
            if too_big(f"{self._base}/{name}", payload, self._log):
                continue
            if name == "status":
                self.presence.heard(payload, None, connecting=True)
            elif self._on_retained_result is not None and self.presence.rival is None:
                self._on_retained_result(name, payload)
        if self.presence.rival is not None:
            self._standing_down = True  # the daemon stops (exit 78): nothing said
            return
        await self._subscribe_commands(client)
        status = await client.publish_acknowledged(
            f"{self._base}/status",
            self.presence.said(self.presence.payload),
            retain=TOPICS["status"].retain,
            properties=self._status_properties(),
        )
        if status.is_failure:
            self._log.error(
                "broker refused our status", topic=f"{self._base}/status", reason=str(status)
            )
        for message in self._journal.retained():
            if not message.topic.startswith(f"{self._base}/"):
                continue  # another table's, from before this state directory changed hands
            code = await self.drain.deliver(client, message)
            if code.is_failure:
                self._log.warning(
                    "broker refused a retained topic", topic=message.topic, reason=str(code)
                )
        self.listening = True
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.drain.run(client))
            tasks.create_task(self.commands.run(client, backlog))

    async def _subscribe_commands(self, client: Client) -> None:
        """Subscribed before "online" is said: whoever sees the table online can be
        sure a command sent now is heard (one sent earlier was lost to a race)."""
        commands = f"{self._base}/command/+"
        if self._protocol == "5":
            from paho.mqtt.subscribeoptions import SubscribeOptions

            # Retain As Published: a retained command sent while we are subscribed
            # arrives marked retained (the broker would clear the flag otherwise), and
            # is refused like the one the broker hands over at subscription.
            options = SubscribeOptions(qos=1, retainAsPublished=True)
            await client.subscribe(commands, options=options)
        else:
            await client.subscribe(commands, qos=1)

    def _status_properties(self) -> Properties | None:
        return status_properties(self._protocol, self.presence.instance)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def publish_unjournaled(self, message: Outgoing) -> None:
        """Best effort, outside the outbox: what must be said when the journal cannot keep it."""
        if message.topic == f"{self._base}/status":
            # What every reconnect says from now on.
            self.presence.payload = message.payload
        client = self._client
        if client is None:
            return
        self._spawn(self._send_unjournaled(client, message))

    async def _send_unjournaled(self, client: Client, message: Outgoing) -> None:
        try:
            status = message.topic == f"{self._base}/status"
            await client.publish(
                message.topic,
                self.presence.said(message.payload) if status else message.payload,
                qos=1,
                retain=message.retain,
                properties=self._status_properties() if status else json_properties(self._protocol),
            )
        except Exception as exc:  # best effort: the broker may be away too
            self._log.warning("could not publish", topic=message.topic, error=str(exc))

    async def stop(self) -> None:
        """Say ``offline`` ourselves (a clean disconnect sends no will)."""
        client = self._client
        if client is None:
            return
        try:
            async with asyncio.timeout(2):
                await client.publish(
                    f"{self._base}/status",
                    self.presence.offline(),
                    qos=1,
                    retain=TOPICS["status"].retain,
                    properties=self._status_properties(),
                )
        except Exception as exc:  # the broker may be gone; stopping goes on
            self._log.warning("could not publish offline", error=str(exc))
