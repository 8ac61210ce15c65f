"""Following a table's topics as a consumer (the marquee, the display driver).

Everything that arrives is checked here, once, into typed messages; anything
else (not UTF-8, not JSON, not an object, too big, wrong types, a number that
is no pocket of the table's wheel, another table's, an empty retained clear)
is dropped with a counted, rate-limited log line, and the follower carries on.
The wheel's pocket count is ``wheel.pockets`` when the configuration pins it,
else what the retained ``<base>/wheel`` says; until one says, any pocket of
any wheel (0-36, 00, 000, 0000) passes. What a payload must hold is the
contract's (``wheeld.contract.topics``), read leniently: only the members a
follower reads are checked, other members are ignored, reason codes are open
(``wheeld.contract.lenient``). The follower also
says when the feed itself goes and comes back, so a board can show "offline"
instead of a stale number.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from wheeld.contract import topics
from wheeld.contract.lenient import lenient
from wheeld.contract.registry import TOPICS, TopicName, topic_at
from wheeld.core.layout import layout_for
from wheeld.shell.mqtt_client import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from wheeld.config import Config

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0
#: At most one "message dropped" line per this many seconds; the rest are counted.
DROP_LOG_EVERY_S = 10.0


class Dropped(ValueError):
    """A message the consumer will not act on; the text is the one-line reason."""


#: What a follower reads of each topic: the contract's models, leniently
#: (``wheeld.contract.lenient``): only these members are checked, the rest ignored.
StatusMessage = lenient(topics.Status, {"state"})
HistoryMessage = lenient(topics.History, {"numbers"})
#: A consumer reads the wheel's pocket count.
WheelMessage = lenient(topics.Wheel, {"pockets"})
#: Open or closed by the pit boss, with the last three results (an older wheeld: none).
TableMessage = lenient(
    topics.Table, {"state", "table", "last_numbers"}, defaults={"table": None, "last_numbers": []}
)
#: The game events: the journal's epoch and the table are None from an older wheeld.
_GAME_READS = {"event", "game_id", "table", "epoch"}
_OLDER = {"table": None, "epoch": None}
SpinningMessage = lenient(topics.Spinning, _GAME_READS, defaults=_OLDER)
NoMoreBetsMessage = lenient(topics.NoMoreBets, _GAME_READS, defaults=_OLDER)
#: A ``result`` event live on ``<base>/game``.
ResultMessage = lenient(topics.Result, {*_GAME_READS, "number"}, defaults=_OLDER)
#: Any reason code, so a reason added later still voids the game on the board.
NoSpinMessage = lenient(topics.NoSpin, {*_GAME_READS, "reason"}, defaults=_OLDER)
#: The retained ``<base>/result``: the latest result, not a new one.
LatestResult = lenient(topics.LatestResult, {*_GAME_READS, "number"}, defaults=_OLDER)

Message = (
    topics.Status
    | topics.History
    | topics.Table
    | topics.Wheel
    | topics.LatestResult
    | topics.Spinning
    | topics.NoMoreBets
    | topics.Result
    | topics.NoSpin
)

_GAME: Any = Annotated[
    SpinningMessage | NoMoreBetsMessage | ResultMessage | NoSpinMessage,
    Field(discriminator="event"),
]
#: What a follower can follow, and how it reads each topic.
_SCHEMAS: dict[TopicName, TypeAdapter[Any]] = {
    "status": TypeAdapter(StatusMessage),
    "history": TypeAdapter(HistoryMessage),
    "table": TypeAdapter(TableMessage),
    "wheel": TypeAdapter(WheelMessage),
    "result": TypeAdapter(LatestResult),
    "game": TypeAdapter(_GAME),
}


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _why(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "payload"
    more = error.error_count() - 1
    return f"{where}: {first['msg']}" + (f" (and {more} more)" if more else "")


def parse(
    base: str, table: str, topic: str, payload: object, pockets: int | None = None
) -> Message:
    """The message ``payload`` on ``topic`` carries; raises ``Dropped`` saying why not.

    ``pockets``: the table's wheel, when known; a number it has no pocket for
    (a "00" on a 37-pocket wheel) is dropped.
    """
    said = topic_at(base, topic)
    schema = _SCHEMAS.get(said.name) if said is not None else None
    if schema is None:
        raise Dropped("not a topic this consumer follows")
    if not isinstance(payload, bytes | bytearray):
        raise Dropped(f"payload is {type(payload).__name__}, not bytes")
    if not payload:
        raise Dropped("empty payload (a retained message cleared)")
    # What any wheeld client takes (on MQTT 5 the broker sends no more): the longest
    # history, 1000 numbers, is about 7 KB; anything far bigger is not ours.
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise Dropped(f"payload of {len(payload)} bytes, over {MAX_PAYLOAD_BYTES}")
    try:
        body = json.loads(payload.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise Dropped("payload is not UTF-8") from None
    except RecursionError:
        raise Dropped("payload is nested too deep") from None
    except ValueError as exc:
        raise Dropped(f"payload is not JSON: {str(exc)[:80]}") from None
    if not isinstance(body, dict):
        kinds: dict[type, str] = {
            type(None): "null",
            bool: "boolean",
            int: "number",
            float: "number",
            str: "string",
            list: "array",
        }
        raise Dropped(f"payload is a JSON {kinds.get(type(body), 'value')}, not an object")
    try:
        message: Message = schema.validate_python(body)
    except ValidationError as exc:
        raise Dropped(_why(exc)) from None
    other = getattr(message, "table", None)
    if other is not None and other != table:
        raise Dropped(f"for table {other[:32]!r}, not {table!r}")
    if pockets is not None:
        _check_pockets(message, pockets)
    return message


def _check_pockets(message: Message, pockets: int) -> None:
    """Raise ``Dropped`` when ``message`` names a number the wheel has no pocket for."""
    match message:
        case ResultMessage(number=number) | LatestResult(number=number):
            numbers = [number]
        case HistoryMessage(numbers=numbers) | TableMessage(last_numbers=numbers):
            pass
        case _:
            return
    layout = layout_for(pockets)
    stray = next((number for number in numbers if not layout.has_pocket(number)), None)
    if stray is not None:
        raise Dropped(f"{stray!r} is not a pocket of this table's {pockets}-pocket wheel")


class SeenGames:
    """The games (epoch and id) of the last ``limit`` results.

    The daemon publishes a result again until the broker acknowledges it, so
    results may come twice and out of turn (games 1, 2, 1, 2): a game seen is
    that game's number again, never a new one. Ids start again only in a new
    epoch (a journal and the broker's memory both lost): game 1 of another
    epoch is another game.
    """

    def __init__(self, limit: int) -> None:
        self._ids: deque[tuple[str | None, int]] = deque(maxlen=limit)

    def first_time(self, game_id: int, epoch: str | None = None) -> bool:
        """True, and remembered, the first time game ``game_id`` of ``epoch`` comes."""
        key = (epoch, game_id)
        if key in self._ids:
            return False
        self._ids.append(key)
        return True


class DropCounter:
    """Counts dropped messages; logs the first, then at most one line per period."""

    def __init__(
        self,
        log: Any,
        every_s: float = DROP_LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = 0
        self._log = log
        self._every_s = every_s
        self._clock = clock
        self._unlogged = 0
        self._quiet_until = float("-inf")

    def drop(self, topic: str, reason: str) -> None:
        self.total += 1
        now = self._clock()
        if now < self._quiet_until:
            self._unlogged += 1
            return
        self._log.warning(
            "message dropped",
            topic=topic[:200],
            reason=reason,
            dropped_total=self.total,
            not_logged_since_last=self._unlogged,
        )
        self._unlogged = 0
        self._quiet_until = now + self._every_s


class Follower:
    """Follows ``<base>/<topic>`` for each of ``topics``, forever, through broker outages.

    ``on_message`` gets each valid message (retained ones first on every
    (re)subscription); ``on_feed(True)`` once subscribed, ``on_feed(False)``
    when the broker connection goes.
    """

    def __init__(
        self,
        config: Config,
        topics: Iterable[TopicName],
        on_message: Callable[[Message], None],
        log: Any,
        *,
        on_feed: Callable[[bool], None] = lambda up: None,
    ) -> None:
        self._config = config
        # The wheel first: its retained pocket count is then known before the
        # retained result and history are checked against it.
        self._topics: tuple[TopicName, ...] = (
            "wheel",
            *(topic for topic in topics if topic != "wheel"),
        )
        #: The wheel's pocket count: pinned by the configuration, else from <base>/wheel.
        self.pockets = config.wheel.pockets
        self._on_message = on_message
        self._on_feed = on_feed
        self._log = log
        self.drops = DropCounter(log)
        self.received = 0
        self.connected = False

    async def run(self) -> None:
        """Connect, follow, and reconnect until cancelled, moving along ``mqtt.servers``
        as the daemon does (``wheeld.shell.mqtt_client.Failover``)."""
        import aiomqtt

        from wheeld.shell.mqtt_client import Failover, make_client

        failover = Failover(
            self._config.mqtt.brokers, backoff_first_s=BACKOFF_FIRST_S, backoff_max_s=BACKOFF_MAX_S
        )
        said: dict[str, str] = {}
        while True:
            server = failover.server
            error = "the broker ended the session"
            since: float | None = None
            try:
                async with make_client(self._config, client_id="", server=server) as client:
                    for topic in self._topics:
                        address = TOPICS[topic].address(self._config.base_topic)
                        await client.subscribe(address, qos=1)
                    since = time.monotonic()
                    self._log.info("following", base_topic=self._config.base_topic, server=server)
                    said.clear()
                    self._feed(True)
                    async for message in client.messages:
                        self.deliver(message.topic.value, message.payload)
            except aiomqtt.MqttError as exc:
                error = str(exc)
            except Exception as exc:  # a TLS or client setup error: keep trying, say so once
                error = f"{type(exc).__name__}: {exc}"
            self._feed(False)
            delay = failover.failed() if since is None else failover.lost(time.monotonic() - since)
            if said.get(server) != error:
                said[server] = error
                self._log.warning(
                    "broker unavailable, retrying", server=server, error=error, next=failover.server
                )
            await asyncio.sleep(delay)

    def deliver(self, topic: str, payload: object) -> None:
        """Check one message and hand it on; never raises."""
        self.received += 1
        config = self._config
        try:
            message = parse(config.base_topic, config.table.id, topic, payload, self.pockets)
        except Dropped as exc:
            self.drops.drop(topic, str(exc))
            return
        if isinstance(message, WheelMessage) and config.wheel.pockets is None:
            self.pockets = message.pockets
        try:
            self._on_message(message)
        except Exception as exc:  # one message must never end the feed
            self.drops.drop(topic, f"not handled: {type(exc).__name__}: {exc}"[:200])

    def _feed(self, up: bool) -> None:
        if up != self.connected:
            self.connected = up
            self._on_feed(up)
