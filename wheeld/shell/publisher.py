"""The MQTT publisher: drains the journal's outbox to the broker, and hands over commands.

Stable client id and a persistent session (aiomqtt's default clean start would
wipe it on every start); a retained ``offline`` last will and a retained
``online`` on every connect; every retained topic republished after a
reconnect, since a broker restarted without persistence has forgotten them.

An outbox entry is acknowledged in the journal only after a PUBACK that says
success. A PUBACK with a failure code (MQTT 5: 0x87 Not authorized, say) is a
refusal, not a delivery: the entry stays, is retried with capped exponential
backoff, and raises one ``broker_refused`` alarm. Order is kept per topic: a
refused entry holds back the later entries on its topic (so ``<base>/game``
stays in order, and an old retained value never lands after a newer one),
while other topics flow on.

Several brokers (``mqtt.servers``): tried in order, moving to the next when a
connection is lost or cannot be made, always starting again from the first
(``wheeld.shell.mqtt_client.Failover``). Nothing is lost or reordered by a move: the
outbox is drained in order from its oldest unacknowledged entry on whichever
broker takes it.

``<base>/status`` names who says it: ``{"state": "online", "instance":
"<host>:<state dir>", "schema_version": 1}``. Before the daemon connects with
its own client id (which would take a running daemon's session over),
``read_broker_memory`` reads that retained status (with the table's retained
sequence and result) with a throwaway client: another
instance online there is a second wheeld for the table, and the daemon refuses
to start (``RivalDaemon``). A second client with our client id that appears
later (two daemons started at once) takes the session over; both would then
knock each other off every second. That is detected, said once, and
reconnecting backs off to a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.config import split_server
from wheeld.core.commands import OperatorCommand, reply_address
from wheeld.core.messages import SCHEMA_VERSION, iso_utc
from wheeld.shell.journal import Journal, JournalWriteError, OutboxEntry
from wheeld.table.effects import Outgoing

if TYPE_CHECKING:
    from aiomqtt import Message
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

    from wheeld.config import Config
    from wheeld.shell.mqtt_client import Client

ONLINE = json.dumps({"state": "online"})
#: The MQTT 5 user property on <base>/status naming the daemon that said it
#: (the payload's ``instance`` says it too, on MQTT 3.1.1 as well).
INSTANCE_PROPERTY = "wheeld-instance"
OFFLINE = json.dumps({"state": "offline"})
#: A refused outbox entry is tried again after 1 s, 2 s, 4 s ... at most a minute apart.
REFUSED_RETRY_FIRST_S = 1.0
REFUSED_RETRY_MAX_S = 60.0
#: MQTT 5 DISCONNECT reason code "Session taken over".
SESSION_TAKEN_OVER = 0x8E
#: When the broker does not say why: this many connections in a row, each lost
#: within SHORT_SESSION_S of being made, are taken for a session taken over.
SHORT_SESSION_S = 5.0
SHORT_SESSIONS_IN_A_ROW = 3
TAKEOVER_BACKOFF_FIRST_S = 5.0
TAKEOVER_BACKOFF_MAX_S = 60.0
#: A connection that holds this long means the other client has gone.
TAKEOVER_CLEARED_S = 2 * TAKEOVER_BACKOFF_MAX_S
#: Longest response topic answered, in UTF-8 bytes.
MAX_REPLY_TOPIC_BYTES = 512
#: Longest sender name handed over; longer ones are cut.
MAX_SENDER = 64
#: Start-up check for a second daemon: at most this long to connect (per
#: broker), and to wait for a retained <base>/status.
PREFLIGHT_CONNECT_S = 2.0
PREFLIGHT_WAIT_S = 1.0
#: However many brokers there are, the start-up check (and what the wheel says
#: meanwhile, held) waits at most about this long.
PREFLIGHT_TOTAL_S = 5.0
#: Once the broker has answered a later subscription, a retained status would
#: have come before it: wait only this much longer for a broker that does not
#: keep that order.
PREFLIGHT_GRACE_S = 0.3
#: sysexits EX_CONFIG: systemd does not restart a daemon that exits with it
#: (RestartPreventExitStatus=78 in the units).
EX_CONFIG = 78

#: Receives every message on ``<base>/command/+`` and returns the reply to send
#: (``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``), or None to send
#: none (a command past its sender's rate); refusing retained or malformed
#: commands is its job.
CommandHandler = Callable[[OperatorCommand], Awaitable[dict[str, Any] | None]]


def reply_topic_refusal(topic: str, *, base: str, prefix: str) -> str | None:
    """Why a command's response topic may not be answered on, or None when it may.

    Replies go only under the configured ``mqtt.reply_prefix``, never under the
    table's own ``<base>/`` (a reply must not pose as the table's state) nor
    to a ``$`` topic or a filter.
    """
    directory = prefix if prefix.endswith("/") else f"{prefix}/"
    if len(topic.encode()) > MAX_REPLY_TOPIC_BYTES:
        return f"longer than {MAX_REPLY_TOPIC_BYTES} bytes"
    if topic.startswith("$"):
        return "a $ topic"
    if any(char in topic for char in "+#\0"):
        return "holds '+', '#' or NUL"
    if topic == base or topic.startswith(f"{base}/"):
        return f"under the table's own {base}/"
    if not topic.startswith(directory) or topic == directory:
        return f"not a topic under {directory}"
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


def status_json(payload: str | bytes, instance: str) -> str:
    """A status payload as published: ``state`` first, then its other members,
    who says it (``instance``, when known) and ``schema_version``.

    Whoever built it (the pipeline's fault, our own ``online``), it says the same.
    """
    try:
        body = json.loads(payload)
    except ValueError:
        return payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    if not isinstance(body, dict):
        return json.dumps(body)
    stamped = {"state": body.pop("state", None), **body}
    stamped.pop("instance", None)
    stamped.pop("schema_version", None)
    if instance:
        stamped["instance"] = instance
    stamped["schema_version"] = SCHEMA_VERSION
    return json.dumps(stamped)


class RivalDaemon(Exception):
    """Another wheeld is online for this table: this one must not start (exit EX_CONFIG)."""


@dataclass(frozen=True, slots=True)
class BrokerMemory:
    """What a broker retains for the table, read at start before anything is decided."""

    #: Another wheeld its status says is online for the table, else None.
    rival: str | None = None
    #: The retained ``<base>/sequence`` and ``<base>/result`` payloads, if any.
    sequence: bytes | None = None
    result: bytes | None = None


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
                held = await _retained(client, base, ("status", "sequence", "result"))
        except (aiomqtt.MqttError, TimeoutError, OSError) as exc:
            log.debug("start-up check: broker unavailable", server=server, error=str(exc))
            continue
        for name, payload in list(held.items()):
            if too_big(f"{base}/{name}", payload, log):  # MQTT 3.1.1: never parsed
                del held[name]
        rival = None
        try:
            status = json.loads(held["status"]) if "status" in held else None
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("state") != "offline":
            other = status.get("instance")
            if isinstance(other, str) and other != instance:
                rival = other[:200]
        return BrokerMemory(rival, held.get("sequence"), held.get("result"))
    return BrokerMemory()


async def _retained(
    client: Client, base: str, names: tuple[str, ...], others: list[Message] | None = None
) -> dict[str, bytes]:
    """The retained payloads the broker holds on ``<base>/<name>``, by name (non-empty ones).

    Anything else that comes meanwhile (a command the broker kept for our session) is
    put in ``others``, for the caller to hand on, never dropped.
    """
    topics = {f"{base}/{name}": name for name in names}
    for topic in topics:
        await client.subscribe(topic, qos=1)
    waited = time.monotonic()
    # A barrier: a broker answers a subscription, then sends what it retains,
    # then reads the next packet; so after this SUBACK the retained ones are here.
    await client.subscribe(f"{base}/status/preflight", qos=0)
    left = PREFLIGHT_WAIT_S - (time.monotonic() - waited)
    held: dict[str, bytes] = {}
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, min(left, PREFLIGHT_GRACE_S))):
            async for message in client.messages:
                name = topics.get(message.topic.value)
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
                if len(held) == len(topics):
                    break
    return held


def _sender(properties: Properties | None) -> str | None:
    """The MQTT 5 user property ``operator``, else ``user``, cut to MAX_SENDER."""
    pairs = getattr(properties, "UserProperty", None) or []
    found = dict(reversed(pairs))  # the first of repeated keys wins
    name = found.get("operator") or found.get("user")
    return name[:MAX_SENDER] if isinstance(name, str) and name else None


def _causes(error: BaseException) -> Iterator[BaseException]:
    """Every exception in a group, and what each was raised from."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _causes(inner)
        return
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


#: While the broker stays away, the line that says so comes again after 5 s, 10 s,
#: 20 s ... and never more than a minute apart: never silent, never a line a try.
OUTAGE_SAY_FIRST_S = 5.0
OUTAGE_SAY_MAX_S = 60.0


class Outage:
    """When a broker outage is said again in the log, and what the line says.

    At once when it begins or its reason (or broker) changes; otherwise after a
    pause that doubles from OUTAGE_SAY_FIRST_S up to OUTAGE_SAY_MAX_S, so a long
    outage is a line a minute at least. Each line names the next try and how
    long the broker has been away.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        #: When the first failure of this outage was (monotonic), None while connected.
        self.since: float | None = None
        self.attempts = 0
        self._said: tuple[str, str] | None = None
        self._next_at = 0.0
        self._pause_s = OUTAGE_SAY_FIRST_S

    def failed(self, server: str, error: str, now: float) -> bool:
        """A try (or a connection) failed at ``now`` (monotonic): whether to say so now."""
        if self.since is None:
            self.since = now
        self.attempts += 1
        return (server, error) != self._said or now >= self._next_at

    def said(self, server: str, error: str, now: float, retry_in_s: float) -> dict[str, Any]:
        """It is being said at ``now``: the line's figures."""
        since = self.since if self.since is not None else now
        self._said = (server, error)
        self._next_at = now + self._pause_s
        self._pause_s = min(self._pause_s * 2, OUTAGE_SAY_MAX_S)
        return {
            "retry_in_s": round(retry_in_s, 1),
            "retry_at": iso_utc(time.time() + retry_in_s),
            "down_s": round(now - since, 1),
            "attempts": self.attempts,
        }

    def ended(self) -> dict[str, Any]:
        """A connection was made: the outage's figures for that line, if there was one."""
        figures: dict[str, Any] = {}
        if self.since is not None:
            figures = {"down_s": round(time.monotonic() - self.since, 1), "attempts": self.attempts}
        self._reset()
        return figures


@dataclass(slots=True)
class _Refusal:
    """An outbox entry the broker refused, and when to offer it again."""

    topic: str
    since: float
    retry_at: float
    delay_s: float


def _unsigned_alarm(config: Config) -> Callable[[float, str, dict[str, Any]], Outgoing]:
    """An alarm builder for a publisher without a pipeline: the contract's fields, unsigned."""

    def build(at: float, code: str, detail: dict[str, Any]) -> Outgoing:
        payload = {
            "alarm": code,
            "table": config.table.id,
            "ts": iso_utc(at),
            **detail,
            "schema_version": SCHEMA_VERSION,
        }
        return Outgoing(f"{config.base_topic}/alarm", json.dumps(payload))

    return build


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
        alarm_message: Callable[[float, str, dict[str, Any]], Outgoing] | None = None,
    ) -> None:
        self._config = config
        self._journal = journal
        self._on_command = on_command
        #: Told the retained <base>/result the broker holds: the daemon checks its
        #: game id against its own (a lost state directory would reuse ids).
        self._on_retained_result = on_retained_result
        self._on_acknowledged = on_acknowledged
        #: Told the instance of another wheeld this one stands down for (exit 78).
        self._on_rival = on_rival
        #: Builds an alarm as the pipeline does (schema_version, signature); the
        #: bare payload when the publisher runs without a pipeline (its tests).
        self._alarm_message = alarm_message or _unsigned_alarm(config)
        self._standing_down = False
        #: Subscribed to the table's commands on the broker connected to.
        self.listening = False
        self._log = log
        self._base = config.base_topic
        self._reply_prefix = config.mqtt.reply_prefix
        self._wake = asyncio.Event()
        self._client: Client | None = None
        #: Who we are on ``<base>/status`` (host and state directory): a status
        #: that names another instance means a second wheeld publishes for the table.
        self.instance = instance
        #: The retained status said on every connect (a fault replaces ``online``).
        self.status_payload = ONLINE
        #: Another wheeld seen publishing this table's status, if any.
        self.rival: str | None = None
        self._unjournaled: set[asyncio.Task[None]] = set()
        self._refused: dict[int, _Refusal] = {}
        self._connected_at: float | None = None
        self._short_sessions = 0
        self._taken_over_at: float | None = None
        self._takeover_backoff_s = TAKEOVER_BACKOFF_FIRST_S
        self.connected = False
        #: Whether any broker has been reached since start.
        self.reached = False
        #: No broker reached since start, and at least one try has failed: health ``fault``.
        self.unreachable = False
        #: The broker connected to, ``host:port``; None while there is none.
        self.server: str | None = None
        self.refusals = 0
        #: The properties every outbox entry goes with (by whether it is the status),
        #: made and packed once.
        self._sent_properties: dict[bool, Properties | None] = {}

    @property
    def stuck_since(self) -> float | None:
        """When the oldest refusal still holding back an entry began (epoch s)."""
        return min((r.since for r in self._refused.values()), default=None)

    @property
    def session_taken_over(self) -> bool:
        """Another client with our client id has been taking our session lately."""
        return self._taken_over_at is not None or self.rival is not None

    def _status_properties(self) -> Properties | None:
        """The status's properties: JSON, and (MQTT 5) who we are, as user property."""
        properties = self._json_properties()
        if properties is not None and self.instance:
            properties.UserProperty = [(INSTANCE_PROPERTY, self.instance)]
        return properties

    def _status_heard(
        self, payload: bytes, properties: Properties | None, *, connecting: bool = False
    ) -> None:
        """A status on ``<base>/status``: ours, or another wheeld's for the same table.

        Another instance online when we (re)connect took the table while we were
        away: we stand down (``on_rival``: the daemon stops, exit 78). Heard while
        we run (two started at once, both past the check at start), the one of the
        two whose instance name sorts last stands down, so exactly one goes on.
        """
        try:
            body = json.loads(payload)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        named = dict(getattr(properties, "UserProperty", None) or [])
        other = body.get("instance", named.get(INSTANCE_PROPERTY))
        if body.get("state") == "offline":
            if other is None or other == self.rival:
                self.rival = None  # whoever it was has stopped (clean stop or last will)
            return
        if not isinstance(other, str) or other in (self.instance, self.rival):
            return
        self.rival = other[:200]
        yields = connecting or self.instance > other
        self._log.error(
            "another wheeld publishes for this table: only one may run per table id; "
            "stop one of them, or give each its own table.id",
            table=self._config.table.id,
            client_id=self._config.client_id,
            other_instance=self.rival,
            this_instance=self.instance,
            standing_down=yields,
        )
        if yields and self._on_rival is not None:
            self._on_rival(self.rival)

    def wake(self) -> None:
        """New entries are in the outbox."""
        self._wake.set()

    def _make_client(self, server: str) -> Client:
        import aiomqtt

        from wheeld.shell.mqtt_client import make_client

        will = aiomqtt.Will(f"{self._base}/status", self._offline(), qos=1, retain=True)
        return make_client(
            self._config,
            client_id=self._config.client_id,
            server=server,
            will=will,
            persistent=True,
        )

    def _offline(self) -> str:
        return status_json(OFFLINE, self.instance)

    async def run(self) -> None:
        """Connect, serve, and reconnect, moving along the brokers, forever."""
        import aiomqtt

        from wheeld.shell.mqtt_client import Failover, in_words

        failover = Failover(self._config.mqtt.brokers)
        outage = Outage()
        last_server: str | None = None
        while True:
            server = failover.server
            client = self._make_client(server)
            self._connected_at = None
            taken_over = False
            error = "the broker ended the session"
            detail = ""
            try:
                async with client:
                    self._client = client
                    self.connected = True
                    self.reached = True
                    self.unreachable = False
                    self.server = server
                    self._connected_at = time.monotonic()
                    if server != last_server:
                        # Another broker may take what this one refused: offer it at once.
                        for refusal in self._refused.values():
                            refusal.retry_at = 0.0
                        last_server = server
                    host, port = split_server(server)
                    self._log.info("broker connected", host=host, port=port, **outage.ended())
                    await self._serve(client)
                    if self._standing_down:
                        return
            except* aiomqtt.MqttError as group:
                taken_over = self._taken_over(group)
                # aiomqtt's own words ("Disconnected during message iteration: [code:128]
                # Unspecified error") say where the loss was noticed, not why.
                error = in_words(group)
                detail = ": ".join(dict.fromkeys(str(cause) for cause in _causes(group)))
            finally:
                self._client = None
                self.connected = False
                self.listening = False
                self.server = None
            if taken_over:
                # Slower each time, so two daemons with one id stop flapping every
                # second; on the same broker, which is up.
                await asyncio.sleep(self._takeover_backoff_s)
                self._takeover_backoff_s = min(self._takeover_backoff_s * 2, TAKEOVER_BACKOFF_MAX_S)
                continue
            held_s = None if self._connected_at is None else time.monotonic() - self._connected_at
            delay = failover.failed() if held_s is None else failover.lost(held_s)
            now = time.monotonic()
            self.unreachable = not self.reached
            if outage.failed(server, error, now):
                fields = outage.said(server, error, now, delay)
                if held_s is not None:
                    # A connection that held: its end is news, said at once with its reason.
                    self._log.warning(
                        "broker connection lost, reconnecting",
                        server=server,
                        error=error,
                        detail=detail,
                        held_s=round(held_s, 1),
                        next=failover.server,
                        **fields,
                    )
                elif self.reached:
                    self._log.warning(
                        "broker unavailable, retrying",
                        server=server,
                        error=error,
                        detail=detail,
                        next=failover.server,
                        **fields,
                    )
                else:
                    # Loud: nothing decided has reached anyone, and it may be a wrong host.
                    self._log.error(
                        "broker unavailable, retrying: no broker reached since start, "
                        "nothing published yet",
                        server=server,
                        error=error,
                        detail=detail,
                        next=failover.server,
                        **fields,
                    )
                if failover.server != server:
                    self._log.info("moving to another broker", server=server, to=failover.server)
            await asyncio.sleep(delay)

    def _taken_over(self, error: BaseException) -> bool:
        """Whether another client with our id took the session; says so once per episode.

        MQTT 5 has a reason code for it (0x8E), but not every broker sends it
        (mosquitto 2.0 just closes the connection, as on 3.1.1), so connections
        lost again and again soon after being made count as well.
        """
        if self._connected_at is None:
            return False  # never connected: the broker is away, not taken
        held_s = time.monotonic() - self._connected_at
        if held_s >= TAKEOVER_CLEARED_S:
            # A connection that held this long: whoever took the session has gone.
            self._taken_over_at = None
            self.rival = None
            self._takeover_backoff_s = TAKEOVER_BACKOFF_FIRST_S
        self._short_sessions = self._short_sessions + 1 if held_s < SHORT_SESSION_S else 0
        said_so = self.rival is not None or any(
            getattr(cause, "rc", None) == SESSION_TAKEN_OVER for cause in _causes(error)
        )
        guessed = self._short_sessions >= SHORT_SESSIONS_IN_A_ROW
        if self._taken_over_at is not None:
            return True  # still in the episode: keep backing off
        if not (said_so or guessed):
            return False
        self._taken_over_at = time.time()
        self._log.error(
            "another client with the same client id took the MQTT session: "
            f"probably a second wheeld for table {self._config.table.id}; "
            f"reconnecting ever more slowly (up to {TAKEOVER_BACKOFF_MAX_S:g} s apart) "
            "until it goes",
            client_id=self._config.client_id,
            evidence="DISCONNECT 0x8E Session taken over"
            if said_so
            else f"{self._short_sessions} connections in a row lost within "
            f"{SHORT_SESSION_S:g} s of being made",
        )
        return True

    async def _serve(self, client: Client) -> None:
        # Before saying anything, what the broker holds for the table now: its status
        # (another wheeld online there took the table while we were away: we stand
        # down), then its sequence and result (another controller went on past this
        # journal: what it still holds of games never went out, and must not now).
        from wheeld.shell.mqtt_client import too_big

        names = ("status", "sequence", "result") if self._on_retained_result else ("status",)
        backlog: list[Message] = []
        held = await _retained(client, self._base, names, backlog)
        for name, payload in held.items():
            if too_big(f"{self._base}/{name}", payload, self._log):
                continue
            if name == "status":
                self._status_heard(payload, None, connecting=True)
            elif self._on_retained_result is not None and self.rival is None:
                self._on_retained_result(name, payload)
        if self.rival is not None:
            self._standing_down = True  # the daemon stops (exit 78): nothing said
            return
        # Subscribed before "online" is said: whoever sees the table online can be
        # sure a command sent now is heard (one sent earlier was lost to a race).
        commands = f"{self._base}/command/+"
        if self._config.mqtt.protocol == "5":
            from paho.mqtt.subscribeoptions import SubscribeOptions

            # Retain As Published: a retained command sent while we are subscribed
            # arrives marked retained (the broker would clear the flag otherwise), and
            # is refused like the one the broker hands over at subscription.
            options = SubscribeOptions(qos=1, retainAsPublished=True)
            await client.subscribe(commands, options=options)
        else:
            await client.subscribe(commands, qos=1)
        status = await client.publish_acknowledged(
            f"{self._base}/status",
            status_json(self.status_payload, self.instance),
            retain=True,
            properties=self._status_properties(),
        )
        if status.is_failure:
            self._log.error(
                "broker refused our status", topic=f"{self._base}/status", reason=str(status)
            )
        for message in self._journal.retained():
            if not message.topic.startswith(f"{self._base}/"):
                continue  # another table's, from before this state directory changed hands
            code = await self._deliver(client, message)
            if code.is_failure:
                self._log.warning(
                    "broker refused a retained topic", topic=message.topic, reason=str(code)
                )
        self.listening = True
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._drain(client))
            tasks.create_task(self._listen(client, backlog))

    # -- the outbox ------------------------------------------------------------

    async def _drain(self, client: Client) -> None:
        while True:
            self._wake.clear()
            await self._drain_once(client)
            next_retry = min((r.retry_at for r in self._refused.values()), default=None)
            if next_retry is None:
                await self._wake.wait()
                continue
            # Woken by new entries, or by a refused one falling due again.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_retry - time.monotonic())):
                    await self._wake.wait()

    async def _drain_once(self, client: Client) -> None:
        """Offer every pending entry once, in order, but none behind a refusal on its topic."""
        held: set[str] = set()
        after = 0
        while entries := self._journal.pending(after):
            for entry in entries:
                after = entry.id
                topic = entry.message.topic
                refusal = self._refused.get(entry.id)
                if topic in held or (refusal and refusal.retry_at > time.monotonic()):
                    held.add(topic)
                    continue
                code = await self._deliver(client, entry.message)
                if code.is_failure:
                    await self._refuse(client, entry, code)
                    held.add(topic)
                    continue
                try:
                    self._journal.acknowledge(entry)
                except JournalWriteError:
                    # Sent again once the journal can write; consumers drop repeats by game id.
                    return
                if self._on_acknowledged is not None:
                    try:
                        self._on_acknowledged(entry)
                    except Exception as exc:  # a counter's bug must not cut the connection
                        self._log.error("on_acknowledged failed", error=repr(exc))
                if self._refused.pop(entry.id, None) is not None:
                    self._log.info("broker accepted a message it had refused", topic=topic)

    async def _deliver(self, client: Client, message: Outgoing) -> ReasonCode:
        # Every entry goes at QoS 1: the outbox's promise rests on a PUBACK.
        payload: str | bytes = message.payload
        status = message.topic == f"{self._base}/status"
        if status:
            payload = status_json(payload, self.instance)
        properties = self._packed_properties(status)
        return await client.publish_acknowledged(
            message.topic, payload, retain=message.retain, properties=properties
        )

    async def _refuse(self, client: Client, entry: OutboxEntry, code: ReasonCode) -> None:
        self.refusals += 1
        now = time.monotonic()
        refusal = self._refused.get(entry.id)
        if refusal is not None:
            refusal.delay_s = min(refusal.delay_s * 2, REFUSED_RETRY_MAX_S)
            refusal.retry_at = now + refusal.delay_s
            self._log.debug("broker refused a message again", topic=refusal.topic, reason=str(code))
            return
        since = time.time()
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
            alarm.topic, alarm.payload, properties=self._json_properties()
        )
        if alarm_code.is_failure:
            self._log.error("broker refused the alarm as well", reason=str(alarm_code))

    def _packed_properties(self, status: bool) -> Properties | None:
        """``_json_properties`` (``_status_properties`` for the status), made once."""
        if status not in self._sent_properties:
            from wheeld.shell.mqtt_client import PackedOnce

            made = self._status_properties() if status else self._json_properties()
            self._sent_properties[status] = None if made is None else PackedOnce(made)
        return self._sent_properties[status]

    def _json_properties(self) -> Properties | None:
        if self._config.mqtt.protocol != "5":
            return None
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ContentType = "application/json"
        properties.PayloadFormatIndicator = 1
        return properties

    # -- commands ----------------------------------------------------------------

    async def _listen(self, client: Client, backlog: list[Message]) -> None:
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
                self._status_heard(message.payload, message.properties)
                continue
            if topic in (f"{self._base}/result", f"{self._base}/sequence") and isinstance(
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

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._unjournaled.add(task)
        task.add_done_callback(self._unjournaled.discard)

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
                topic=response_topic,
                why=refusal,
            )
            return
        body = dict(reply)
        if address.correlation_id is not None:
            body["correlation_id"] = address.correlation_id
        body["schema_version"] = SCHEMA_VERSION
        answer = self._json_properties()
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

    def publish_unjournaled(self, message: Outgoing) -> None:
        """Best effort, outside the outbox: what must be said when the journal cannot keep it."""
        if message.topic == f"{self._base}/status":
            # What every reconnect says from now on.
            self.status_payload = message.payload
        client = self._client
        if client is None:
            return
        task = asyncio.get_running_loop().create_task(self._send_unjournaled(client, message))
        self._unjournaled.add(task)
        task.add_done_callback(self._unjournaled.discard)

    async def _send_unjournaled(self, client: Client, message: Outgoing) -> None:
        try:
            status = message.topic == f"{self._base}/status"
            await client.publish(
                message.topic,
                status_json(message.payload, self.instance) if status else message.payload,
                qos=1,
                retain=message.retain,
                properties=self._status_properties() if status else self._json_properties(),
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
                    self._offline(),
                    qos=1,
                    retain=True,
                    properties=self._status_properties(),
                )
        except Exception as exc:  # the broker may be gone; stopping goes on
            self._log.warning("could not publish offline", error=str(exc))
