"""An MQTT-aware TCP proxy that can kill its client at a chosen PUBLISH.

It sits between MQTT clients (the daemons) and a broker, and forwards every
packet as soon as it is whole, in order, in both directions; nothing is held
back otherwise. It reads the client's packets (fixed header, remaining length;
CONNECT for the protocol level and client id; PUBLISH for its topic, QoS,
packet id and payload, MQTT 3.1.1 and 5, topic aliases included) and records
every PUBLISH, with the ``label`` the proxy had when the connection came in
(which daemon's run it is).

Armed with a ``Cut``, it waits for the next game to start (a PUBLISH on the
game topic whose JSON payload says ``"event": "spinning"``) on any connection,
then counts that connection's PUBLISHes per topic from that message on (the
count starts again at every spinning), and when the ``occurrence``-th PUBLISH
on ``topic`` arrives, with the game's events so far (the ``event`` of each
game message since the spinning, this one included) equal to ``events``:

- ``before``: the packet is never forwarded; the process ``pid`` is SIGKILLed
  at once; a PINGREQ of the proxy's own makes sure the broker has read
  everything forwarded before it;
- ``after``: the packet is forwarded, and once the broker has acknowledged it
  (its PUBACK, or PUBREC at QoS 2; a PINGREQ barrier at QoS 0), which the
  client is never shown, ``pid`` is SIGKILLed.

Either way nothing more is forwarded on that connection, and both of its
sockets are then reset (no DISCONNECT), so the broker publishes the client's
last will at once. The firing is recorded in ``fired``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["before", "after"]

CONNECT = 1
PUBLISH = 3
PUBACK = 4
PUBREC = 5
PINGREQ = 12
PINGRESP = 13
_PINGREQ_PACKET = bytes([PINGREQ << 4, 0])

#: MQTT 5 property identifiers by the type of their value (what it takes to skip them).
_BYTE_PROPERTIES = frozenset({0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A})
_TWO_BYTE_PROPERTIES = frozenset({0x13, 0x21, 0x22, 0x23})
_FOUR_BYTE_PROPERTIES = frozenset({0x02, 0x11, 0x18, 0x27})
_VARINT_PROPERTIES = frozenset({0x0B})
_STRING_PROPERTIES = frozenset({0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F})
_PAIR_PROPERTIES = frozenset({0x26})
TOPIC_ALIAS = 0x23


class MalformedPacket(ValueError):
    """Bytes that are no MQTT packet: the proxy drops the connection."""


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """An MQTT variable byte integer at ``offset``: its value and the offset after it."""
    value = 0
    for shift in range(4):
        if offset >= len(data):
            raise MalformedPacket("variable byte integer cut short")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << (7 * shift)
        if not byte & 0x80:
            return value, offset
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def take_packet(buffer: bytearray) -> bytes | None:
    """The first whole packet in ``buffer``, taken off it; None while it is incomplete."""
    length = 0
    for index in range(1, 5):
        if index >= len(buffer):
            return None
        byte = buffer[index]
        length |= (byte & 0x7F) << (7 * (index - 1))
        if not byte & 0x80:
            end = index + 1 + length
            if len(buffer) < end:
                return None
            packet = bytes(buffer[:end])
            del buffer[:end]
            return packet
    raise MalformedPacket("remaining length longer than 4 bytes")


def _body(packet: bytes) -> bytes:
    """What follows the fixed header."""
    _, offset = _varint(packet, 1)
    return packet[offset:]


def _string(data: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 2 > len(data):
        raise MalformedPacket("string length cut short")
    (length,) = struct.unpack_from("!H", data, offset)
    end = offset + 2 + length
    if end > len(data):
        raise MalformedPacket("string cut short")
    return data[offset + 2 : end], end


def topic_alias(properties: bytes) -> int | None:
    """The Topic Alias among MQTT 5 PUBLISH properties, if any."""
    offset = 0
    while offset < len(properties):
        identifier, offset = _varint(properties, offset)
        if identifier == TOPIC_ALIAS:
            return int(struct.unpack_from("!H", properties, offset)[0])
        if identifier in _BYTE_PROPERTIES:
            offset += 1
        elif identifier in _TWO_BYTE_PROPERTIES:
            offset += 2
        elif identifier in _FOUR_BYTE_PROPERTIES:
            offset += 4
        elif identifier in _VARINT_PROPERTIES:
            _, offset = _varint(properties, offset)
        elif identifier in _STRING_PROPERTIES:
            _, offset = _string(properties, offset)
        elif identifier in _PAIR_PROPERTIES:
            _, offset = _string(properties, offset)
            _, offset = _string(properties, offset)
        else:
            raise MalformedPacket(f"unknown property 0x{identifier:02x}")
    return None


@dataclass(frozen=True, slots=True)
class Connect:
    """What a CONNECT says: the protocol level (4: 3.1.1, 5: 5) and the client id."""

    level: int
    client_id: str


def parse_connect(packet: bytes) -> Connect:
    body = _body(packet)
    _, offset = _string(body, 0)  # "MQTT" (or 3.1's "MQIsdp")
    if offset + 4 > len(body):
        raise MalformedPacket("CONNECT cut short")
    level = body[offset]
    offset += 4  # level, flags, keep alive
    if level == 5:
        length, offset = _varint(body, offset)
        offset += length
    client_id, _ = _string(body, offset)
    return Connect(level, client_id.decode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Publish:
    """A PUBLISH as the client sent it."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None

    def json(self) -> Any:
        """The payload as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.payload)
        except ValueError:
            return None


def parse_publish(packet: bytes, level: int, aliases: dict[int, str]) -> Publish:
    """A PUBLISH packet of protocol ``level``; ``aliases`` holds the connection's topic aliases."""
    flags = packet[0] & 0x0F
    qos = (flags >> 1) & 0x03
    body = _body(packet)
    raw_topic, offset = _string(body, 0)
    topic = raw_topic.decode("utf-8")
    packet_id = None
    if qos:
        if offset + 2 > len(body):
            raise MalformedPacket("PUBLISH packet id cut short")
        (packet_id,) = struct.unpack_from("!H", body, offset)
        offset += 2
    if level == 5:
        length, offset = _varint(body, offset)
        alias = topic_alias(body[offset : offset + length])
        offset += length
        if alias is not None:
            if topic:
                aliases[alias] = topic
            else:
                topic = aliases.get(alias, "")
    return Publish(topic, body[offset:], qos, bool(flags & 0x01), bool(flags & 0x08), packet_id)


def packet_id_of(packet: bytes) -> int | None:
    """The packet id of a PUBACK/PUBREC (the first two bytes after the fixed header)."""
    body = _body(packet)
    return int(struct.unpack_from("!H", body, 0)[0]) if len(body) >= 2 else None


@dataclass(frozen=True, slots=True)
class Cut:
    """Where to cut: the ``occurrence``-th PUBLISH on ``topic`` of a game (counted from its
    spinning message on), when the game's events so far are ``events``; ``before`` or
    ``after`` the broker has it."""

    topic: str
    occurrence: int
    events: tuple[str, ...]
    mode: Mode


@dataclass(frozen=True, slots=True)
class Record:
    """A PUBLISH the proxy read from a client: whose (``label``), and whether it went on."""

    number: int
    label: str
    connection: int
    client_id: str
    publish: Publish
    forwarded: bool


@dataclass(frozen=True, slots=True)
class Fired:
    """A cut that went off: at which PUBLISH, and which process it killed."""

    cut: Cut
    record: Record
    pid: int


@dataclass(slots=True)
class _Armed:
    cut: Cut
    pid: int
    #: The connection whose game is being counted, once a spinning arrived.
    connection: int | None = None


@dataclass(slots=True)
class _Game:
    """A connection's current game: PUBLISHes per topic and its events, since its spinning."""

    topics: Counter[str] = field(default_factory=Counter)
    events: list[str] = field(default_factory=list)


class _Barrier:
    """What the broker must send before a cut completes: a PUBACK (or PUBREC) for a packet
    id, or a number of PINGRESPs."""

    def __init__(self, *, packet_id: int | None = None, pingresps: int = 0) -> None:
        self.packet_id = packet_id
        self.pingresps = pingresps

    def met_by(self, packet: bytes) -> bool:
        kind = packet[0] >> 4
        if self.packet_id is not None:
            return kind in (PUBACK, PUBREC) and packet_id_of(packet) == self.packet_id
        if kind == PINGRESP:
            self.pingresps -= 1
        return self.pingresps <= 0


class _Connection:
    """One client connection and its upstream one, each direction on a thread of its own."""

    def __init__(
        self, proxy: MqttProxy, number: int, client: socket.socket, upstream: socket.socket
    ) -> None:
        self.proxy = proxy
        self.number = number
        self.label = proxy.label
        self.client = client
        self.upstream = upstream
        self.level = 4
        self.client_id = ""
        self.aliases: dict[int, str] = {}
        self.lock = threading.Lock()
        #: A cut went off: nothing more is forwarded either way.
        self.doomed = False
        self.barrier: _Barrier | None = None
        self.on_barrier: list[int] = []  # the pid to kill once the barrier is met, if any
        #: Client PINGREQs forwarded, not yet answered.
        self.pings = 0
        self._running = 2

    def start(self) -> None:
        for target, name in ((self._from_client, "client"), (self._from_broker, "broker")):
            threading.Thread(target=target, name=f"proxy-{self.number}-{name}", daemon=True).start()

    # -- client to broker ----------------------------------------------------------

    def _from_client(self) -> None:
        buffer = bytearray()
        try:
            while data := self.client.recv(65536):
                buffer += data
                while not self.doomed and (packet := take_packet(buffer)) is not None:
                    self._client_packet(packet)
            if not self.doomed:
                with contextlib.suppress(OSError):
                    self.upstream.shutdown(socket.SHUT_WR)  # the client's FIN, passed on
        except (OSError, MalformedPacket):
            # A client killed by a cut goes away under it: the cut ends the connection.
            if not self.doomed:
                self.abort()
        finally:
            self._stopped()

    def _client_packet(self, packet: bytes) -> None:
        kind = packet[0] >> 4
        if kind == CONNECT:
            connect = parse_connect(packet)
            self.level, self.client_id = connect.level, connect.client_id
        elif kind == PINGREQ:
            with self.lock:
                self.pings += 1
        elif kind == PUBLISH:
            publish = parse_publish(packet, self.level, self.aliases)
            armed = self.proxy.cut_due(self, publish)
            if armed is not None:
                self._cut(packet, publish, armed)
                return
            self.proxy.record(self, publish, forwarded=True)
        self.upstream.sendall(packet)

    def _cut(self, packet: bytes, publish: Publish, armed: _Armed) -> None:
        before = armed.cut.mode == "before"
        record = self.proxy.record(self, publish, forwarded=not before)
        with self.lock:
            self.doomed = True
            if before or publish.packet_id is None:
                barrier = _Barrier(pingresps=self.pings + 1)
            else:
                barrier = _Barrier(packet_id=publish.packet_id)
            self.barrier = barrier
            self.on_barrier = [] if before else [armed.pid]
        # Said before the kill: whoever sees the process dead sees why.
        self.proxy.fire(Fired(armed.cut, record, armed.pid))
        if before:
            _kill(armed.pid)  # at once: the packet is never forwarded
        else:
            self.upstream.sendall(packet)
        if barrier.packet_id is None:
            self.upstream.sendall(_PINGREQ_PACKET)

    # -- broker to client ----------------------------------------------------------

    def _from_broker(self) -> None:
        buffer = bytearray()
        try:
            while data := self.upstream.recv(65536):
                buffer += data
                while (packet := take_packet(buffer)) is not None:
                    if self._broker_packet(packet):
                        return
            with self.lock:
                doomed = self.doomed
            if not doomed:
                with contextlib.suppress(OSError):
                    self.client.shutdown(socket.SHUT_WR)  # the broker's FIN, passed on
        except (OSError, MalformedPacket):
            self.abort()
        finally:
            self._stopped()

    def _broker_packet(self, packet: bytes) -> bool:
        """Pass a broker packet on, or complete a cut; True once the connection is done."""
        with self.lock:
            barrier, doomed = self.barrier, self.doomed
            if not doomed and packet[0] >> 4 == PINGRESP:
                self.pings -= 1
        if not doomed:
            self.client.sendall(packet)
            return False
        if barrier is None or not barrier.met_by(packet):
            return False  # the client is never shown anything after the cut
        for pid in self.on_barrier:
            _kill(pid)
        self.abort()
        return True

    # -- the end ---------------------------------------------------------------------

    def abort(self) -> None:
        """Reset both sockets (no DISCONNECT: the broker publishes the will)."""
        with self.lock:
            self.doomed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # wakes the other direction's thread

    def _stopped(self) -> None:
        with self.lock:
            self._running -= 1
            last = self._running == 0
        if last:
            for sock in (self.client, self.upstream):
                sock.close()
            self.proxy.closed(self)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class MqttProxy:
    """A TCP proxy on a free port of 127.0.0.1 in front of the broker on ``upstream_port``.

    ``game_topic`` is where games are announced (their payloads' ``event``).
    ``label`` names whoever connects next; ``records`` holds every client PUBLISH.
    """

    def __init__(self, upstream_port: int, *, game_topic: str) -> None:
        self.upstream_port = upstream_port
        self.game_topic = game_topic
        self.label = ""
        self.records: list[Record] = []
        self.fired: list[Fired] = []
        self._lock = threading.Lock()
        self._armed: _Armed | None = None
        self._games: dict[int, _Game] = {}
        self._connections: dict[int, _Connection] = {}
        self._numbers = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()  # the broker is down: so is the proxy, to the client
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._numbers += 1
                connection = _Connection(self, self._numbers, client, upstream)
                self._connections[connection.number] = connection
            connection.start()

    def arm(self, cut: Cut, pid: int) -> None:
        """Cut at ``cut`` in the next game that starts, killing ``pid``."""
        with self._lock:
            self._armed = _Armed(cut, pid)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def cut_due(self, connection: _Connection, publish: Publish) -> _Armed | None:
        """Count ``publish`` into its connection's game; the armed cut if it is due now."""
        with self._lock:
            game = self._games.setdefault(connection.number, _Game())
            armed = self._armed
            if publish.topic == self.game_topic:
                body = publish.json()
                event = str(body.get("event")) if isinstance(body, dict) else "?"
                if event == "spinning":
                    game = self._games[connection.number] = _Game()
                    if armed is not None and armed.connection is None:
                        armed.connection = connection.number
                game.events.append(event)
            game.topics[publish.topic] += 1
            if armed is None or armed.connection != connection.number:
                return None
            cut = armed.cut
            due = (
                publish.topic == cut.topic
                and game.topics[cut.topic] == cut.occurrence
                and tuple(game.events) == cut.events
            )
            if not due:
                return None
            self._armed = None
            return armed

    def record(self, connection: _Connection, publish: Publish, *, forwarded: bool) -> Record:
        with self._lock:
            record = Record(
                len(self.records),
                connection.label,
                connection.number,
                connection.client_id,
                publish,
                forwarded,
            )
            self.records.append(record)
            return record

    def fire(self, fired: Fired) -> None:
        with self._lock:
            self.fired.append(fired)

    def closed(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.pop(connection.number, None)
            self._games.pop(connection.number, None)

    def forwarded(self, label: str | None = None) -> list[Record]:
        """Every PUBLISH passed on to the broker (of ``label``'s connections, if given)."""
        with self._lock:
            records = list(self.records)
        return [r for r in records if r.forwarded and (label is None or r.label == label)]

    def close(self) -> None:
        """Stop listening and reset every connection still open."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        with self._lock:
            connections = list(self._connections.values())
        for connection in connections:
            connection.abort()
