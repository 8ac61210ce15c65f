"""The one place wheeld's MQTT clients are made: the daemon, the marquee, the display, the demo.

``make_client`` reads everything about the broker from ``[mqtt]``: the server
(one of ``mqtt.servers``, else ``mqtt.host`` and ``mqtt.port``), TLS
(``mqtt.tls.*``; any of its keys turns TLS on), username and password
(the configuration has already read ``mqtt.password_file`` into
``mqtt.password``), MQTT 5 or 3.1.1, keepalive, and the session:

- ``persistent=True`` (the daemon): never a clean start, and on MQTT 5 the
  broker keeps the session ``mqtt.session_expiry_s`` while we are away, so
  commands sent meanwhile and in-flight messages survive a reconnect;
- ``persistent=False`` (followers): a clean session that ends with the
  connection.

Use it as aiomqtt's client: ``async with make_client(config, client_id="") as client:``.

On MQTT 5 every client asks the broker for packets of at most
``MAX_PACKET_BYTES`` (CONNECT's Maximum Packet Size): a larger message, a
retained one included, is never sent to it. On MQTT 3.1.1, which cannot ask,
whoever reads a payload drops one over ``MAX_PAYLOAD_BYTES`` before parsing it (``too_big``).

``Failover`` says which of the brokers to try next, and how long to wait first:
every client that reconnects (the daemon's publisher and the followers) moves
along ``mqtt.servers`` the same way.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import aiomqtt
import paho.mqtt.client as paho
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt import properties as paho_properties
from paho.mqtt.exception import MalformedPacket
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wheeld.shell.scheduler import BEAT_S, until_on_grid

if TYPE_CHECKING:
    from paho.mqtt.reasoncodes import ReasonCode

    from wheeld.config import Config, MqttConfig


def _read_utf(buffer: bytes, maxlen: int) -> tuple[str, int]:
    """A length-prefixed UTF-8 string of an MQTT 5 property, read as paho 2.2's
    ``readUTF`` reads it but for U+FEFF, which paho refuses and MQTT 5 allows: "A
    UTF-8 encoded sequence 0xEF 0xBB 0xBF is always to be interpreted as U+FEFF
    ... and MUST NOT be skipped over or stripped off" [MQTT-1.5.4-3]. The broker
    passes such a response topic or user property on; paho's refusal dropped the
    connection before wheeld read the command, and the broker gave the command
    again at every reconnect: a table kept off its broker by one message.
    """
    if maxlen < 2 or len(buffer) < 2:
        raise MalformedPacket("Not enough data to read string length")
    length = int.from_bytes(buffer[:2], "big")
    if length > maxlen - 2:
        raise MalformedPacket("Length delimited string too long")
    text = bytes(buffer[2 : 2 + length]).decode("utf-8")
    if "\x00" in text:
        raise MalformedPacket("[MQTT-1.5.4-2] Null found in UTF-8 data")
    # Lone surrogates (D800-DFFF) cannot come out of a strict UTF-8 decode.
    return text, length + 2


paho_properties.readUTF = _read_utf  # Properties.unpack looks it up in its module


class Pending(NamedTuple):
    """A QoS 1 publish written, its PUBACK not yet seen."""

    topic: str
    mid: int
    puback: asyncio.Future[ReasonCode]


class Delivered(Protocol):
    """What acknowledging a message needs of it (an ``aiomqtt.Message`` has both)."""

    @property
    def mid(self) -> int: ...

    @property
    def qos(self) -> int: ...


class WithMqtt(Protocol):
    """A configuration with an ``[mqtt]`` section: the daemon's, or the archive's."""

    @property
    def mqtt(self) -> MqttConfig: ...


#: How long connecting, and waiting for any acknowledgement, may take.
TIMEOUT_S = 10.0
#: After a whole round of brokers failed: wait this long, twice as long after the next, ...
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 5.0
#: A connection that held this long was a good one: its loss is no failure of the broker.
STABLE_S = 5.0
#: The largest payload a wheeld client takes from the broker. All it is sent is small:
#: a command (its note at most 500 characters), the retained status, result and
#: sequence (under 2 KiB signed), the history (1000 numbers, about 7 KiB). A payload
#: far past them is no message of ours, and is not read (found: a retained 50 MB on
#: <base>/sequence, read and parsed at every reconnect).
MAX_PAYLOAD_BYTES = 64 * 1024
#: MQTT 5's Maximum Packet Size, asked of the broker at CONNECT so that it never sends
#: a larger packet: the payload above, with room for the topic and the properties
#: (a response topic, correlation data, user properties). MQTT 3.1.1 cannot ask: there
#: a larger payload arrives, and is dropped before it is parsed (``too_big``).
MAX_PACKET_BYTES = MAX_PAYLOAD_BYTES + 8 * 1024


def too_big(topic: str, payload: object, log: Any) -> bool:
    """Whether ``payload`` is over MAX_PAYLOAD_BYTES: then it is to be dropped unparsed,
    and one log line says so (on MQTT 5 the broker never sends one)."""
    if not isinstance(payload, bytes | bytearray) or len(payload) <= MAX_PAYLOAD_BYTES:
        return False
    log.warning(
        "message dropped: too big", topic=topic[:200], bytes=len(payload), limit=MAX_PAYLOAD_BYTES
    )
    return True


class Failover:
    """Which broker to try next, and how long to wait before trying it.

    Always from the first broker (the primary) on: after a connection that
    held is lost, and after a failed attempt, the next one in the list is
    tried at once; only when a whole round has failed is there a pause (0.5 s,
    doubling up to 5 s, until a connection holds) before the primary is tried
    again. So a client comes back to the primary at the first failure after
    it returns, and never waits while another broker may be up.
    """

    def __init__(
        self,
        servers: list[str],
        *,
        backoff_first_s: float = BACKOFF_FIRST_S,
        backoff_max_s: float = BACKOFF_MAX_S,
    ) -> None:
        if not servers:
            raise ValueError("no broker to connect to")
        self.servers = servers
        self._first_s = backoff_first_s
        self._max_s = backoff_max_s
        self._backoff_s = backoff_first_s
        self._index = 0
        #: Failed attempts since the round began at the primary.
        self._failed = 0

    @property
    def server(self) -> str:
        """The broker to try now, as ``host:port``."""
        return self.servers[self._index]

    def lost(self, held_s: float) -> float:
        """A connection to ``server`` that held ``held_s`` seconds has ended; seconds to wait.

        One that held: start again at the primary, at once. One lost within
        STABLE_S of being made (a broker that accepts and hangs up) counts as
        a failed attempt, so it is never retried in a tight loop.
        """
        if held_s < STABLE_S:
            return self.failed()
        self._index = 0
        self._failed = 0
        self._backoff_s = self._first_s
        return 0.0

    def failed(self) -> float:
        """The attempt on ``server`` failed: move on; seconds to wait before the next try."""
        self._failed += 1
        self._index = (self._index + 1) % len(self.servers)
        if self._failed < len(self.servers):
            return 0.0
        # A whole round failed: pause, then the primary again.
        self._index = 0
        self._failed = 0
        delay = self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, self._max_s)
        return delay


class PackedOnce(Properties):
    """MQTT 5 properties made once and sent with every message of a kind: paho packs a
    publish's properties each time (and making them costs twice that), so these are
    packed when made. A copy of ``properties``; set nothing on it afterwards (the packed
    form would not follow)."""

    def __init__(self, properties: Properties) -> None:
        super().__init__(properties.packetType)  # type: ignore[no-untyped-call]
        for name in properties.names:
            attribute = name.replace(" ", "")
            if hasattr(properties, attribute):
                setattr(self, attribute, getattr(properties, attribute))
        object.__setattr__(self, "_packed", super().pack())  # type: ignore[no-untyped-call]

    def pack(self) -> bytes:
        packed: bytes = object.__getattribute__(self, "_packed")
        return packed


class Client(aiomqtt.Client):
    """aiomqtt's client, which can also tell a refused publish from a delivered one.

    aiomqtt (2.5) drops the reason code paho hands its ``on_publish`` callback,
    so a QoS 1 message the broker refused (MQTT 5 PUBACK 0x87 Not authorized,
    0x97 Quota exceeded, ...) would look delivered. ``publish_acknowledged``
    returns that code.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pubacks: dict[int, asyncio.Future[ReasonCode]] = {}
        #: In ``publish_acknowledged``, which writes the packet itself right after.
        self._writing_now = False

    def _on_disconnect(self, *args: Any, **kwargs: Any) -> None:
        """aiomqtt's, unless the connect it waited for was cancelled: aiomqtt (2.5) asks
        that future for its exception, which raises CancelledError in paho's callback, a
        traceback on stderr ("Exception in callback"), when a stop or a Ctrl-C cancels a
        connect just as paho sees the socket close. A cancelled connect is no connection:
        there is nothing to say of its end."""
        if self._connected.cancelled():
            return
        super()._on_disconnect(*args, **kwargs)

    async def _misc_loop(self) -> None:
        """aiomqtt's once-a-second call of paho's ``loop_misc`` (keepalive pings), on the
        seconds of the loop's clock where the daemon's scheduler keeps its beat
        (``wheeld.shell.scheduler.until_on_grid``): an idle daemon wakes once a second,
        not twice."""
        loop = asyncio.get_running_loop()
        while self._client.loop_misc() == paho.MQTT_ERR_SUCCESS:
            wait = until_on_grid(loop.time(), BEAT_S)
            await asyncio.sleep(wait if wait >= BEAT_S / 2 else wait + BEAT_S)

    async def publish_acknowledged(
        self,
        topic: str,
        payload: str | bytes,
        *,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> ReasonCode:
        """Publish at QoS 1 and return the broker's PUBACK reason code.

        ``code.is_failure`` (>= 0x80) means the broker refused the message.
        MQTT 3.1.1 has no reason codes: a PUBACK there is always a success.
        Raises ``aiomqtt.MqttError`` when the message cannot be sent or no
        PUBACK arrives within the client's timeout.
        """
        return await self.acknowledgement(
            self.send_acknowledged(topic, payload, retain=retain, properties=properties)
        )

    def send_acknowledged(
        self,
        topic: str,
        payload: str | bytes,
        *,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> Pending:
        """Write a QoS 1 publish now, without waiting for its PUBACK: several can be on
        the wire at once, in the order written (one connection keeps it), each then
        awaited with ``acknowledgement`` (or let go with ``forget``)."""
        # paho's publish, not aiomqtt's: only paho's answer carries the message id.
        self._writing_now = True
        try:
            info = self._client.publish(topic, payload, 1, retain, properties)
        finally:
            self._writing_now = False
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        self._write_now()
        # No PUBACK can be read before the next await: registering now is in time.
        puback: asyncio.Future[ReasonCode] = asyncio.get_running_loop().create_future()
        self._pubacks[info.mid] = puback
        return Pending(topic, info.mid, puback)

    async def acknowledgement(self, pending: Pending) -> ReasonCode:
        """The broker's PUBACK reason code for ``pending``; ``aiomqtt.MqttError`` when none
        arrives within the client's timeout."""
        try:
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for can swallow a
            # cancellation that lands as the PUBACK does, and a stop would hang.
            async with asyncio.timeout(self.timeout):
                return await pending.puback
        except TimeoutError:
            raise aiomqtt.MqttError(
                f"no PUBACK for {pending.topic} within {self.timeout} s"
            ) from None
        finally:
            self._pubacks.pop(pending.mid, None)

    def forget(self, pending: Pending) -> None:
        """Stop waiting for ``pending``'s PUBACK (the caller gave up on it)."""
        self._pubacks.pop(pending.mid, None)

    def _write_now(self) -> None:
        """Write what paho queued now, from the event loop's thread we run on.

        paho hands a queued packet to aiomqtt, which registers a writer through
        ``call_soon_threadsafe``: the packet would leave two turns of the loop
        later, behind whatever else those turns run (a game's statistics). What
        the socket does not take now is left to the writer. A write that fails
        ends the connection as aiomqtt's writer would end it.
        """
        try:
            self._client.loop_write()
        except Exception as exc:
            if not self._disconnected.done():
                self._disconnected.set_exception(exc)
            return
        sock = self._client.socket()
        if sock is not None and self._client.want_write():
            # What the socket did not take waits for it to be writable (the registration
            # ``publish_acknowledged`` put off, which paho believes made).
            self._loop.add_writer(sock.fileno(), self._write_now)

    def _on_socket_register_write(
        self, client: paho.Client, userdata: Any, sock: socket.socket | Any
    ) -> None:
        """aiomqtt's, but at once on the loop's own thread: paho unregisters the writer
        at once when a write empties its queue, and a registration still on its way
        would come after that and stay, a writer on an always-writable socket (the
        loop would spin)."""
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # paho connects from an executor's thread
            here = False
        if not here:
            super()._on_socket_register_write(client, userdata, sock)
            return
        if self._writing_now:
            # Written at once by ``publish_acknowledged``: a writer registered now would
            # be removed by that write (two epoll_ctl calls a publish); ``_write_now``
            # registers one only for what the socket does not take.
            return
        self._loop.add_writer(sock.fileno(), self._write_now)

    def acknowledge(self, message: Delivered) -> None:
        """Send the PUBACK of a QoS 1 ``message`` now (a client made with ``manual_ack``:
        the broker holds the message, and sends it again after a reconnect, until then)."""
        if message.qos > 0:
            self._client.ack(message.mid, message.qos)

    def _on_publish(
        self,
        client: paho.Client,
        userdata: Any,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties,
    ) -> None:
        puback = self._pubacks.pop(mid, None)
        if puback is not None and not puback.done():
            puback.set_result(reason_code)
        super()._on_publish(client, userdata, mid, reason_code, properties)


def make_client(
    config: Config | WithMqtt,
    *,
    client_id: str,
    server: str | None = None,
    will: aiomqtt.Will | None = None,
    persistent: bool = False,
    timeout: float = TIMEOUT_S,
    manual_ack: bool = False,
    max_packet_bytes: int = MAX_PACKET_BYTES,
    receive_maximum: int | None = None,
) -> Client:
    """A client for a broker of ``config.mqtt``, not yet connected.

    ``server``: the broker, ``host:port`` (one of ``config.mqtt.brokers``);
    None: the first of them.
    ``client_id``: the daemon's stable ``config.client_id`` (a persistent
    session needs one), or ``""`` for one the broker or paho makes up.
    ``will``: the last will, if any. ``persistent``: keep the session across
    connections (see the module documentation). ``timeout``: seconds for the
    connection and for each acknowledgement. ``manual_ack``: a QoS 1 message is
    acknowledged only by ``Client.acknowledge`` (the archive: once it is committed).
    ``max_packet_bytes``: the largest packet the broker may send (MQTT 5; the archive
    reads recall replies, far larger than anything else). ``receive_maximum``: how
    many QoS 1 messages the broker may send before one is acknowledged (MQTT 5).
    """
    from wheeld.config import split_server

    mqtt = config.mqtt
    host, port = split_server(server if server is not None else mqtt.brokers[0])
    v5 = mqtt.protocol == "5"
    tls = mqtt.tls
    tls_params = None
    if tls.ca_file or tls.cert_file or tls.key_file or tls.insecure:
        tls_params = aiomqtt.TLSParameters(
            # None: the system's trusted CAs.
            ca_certs=str(tls.ca_file) if tls.ca_file else None,
            certfile=str(tls.cert_file) if tls.cert_file else None,
            keyfile=str(tls.key_file) if tls.key_file else None,
            cert_reqs=ssl.CERT_REQUIRED,
            tls_version=ssl.PROTOCOL_TLS_CLIENT,
        )
    properties = None
    session: dict[str, Any]
    if v5:
        # paho refuses clean_session on MQTT 5, where clean_start says it.
        session = {"clean_start": not persistent}
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        properties.MaximumPacketSize = max_packet_bytes
        if receive_maximum is not None:
            properties.ReceiveMaximum = receive_maximum
        if persistent:
            properties.SessionExpiryInterval = mqtt.session_expiry_s
    else:
        session = {"clean_session": not persistent}
    client = Client(
        host,
        port,
        username=mqtt.username,
        password=mqtt.password,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V5 if v5 else aiomqtt.ProtocolVersion.V311,
        will=will,
        properties=properties,
        keepalive=mqtt.keepalive_s,
        tls_params=tls_params,
        # Hostname checking off: the certificate is still checked against the CA.
        tls_insecure=tls.insecure if tls_params else None,
        timeout=timeout,
        # A game message is small and goes at once: Nagle would hold it behind the
        # unacknowledged tail of a large one (a recall reply) for the broker's
        # delayed ACK, 40 ms.
        socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
        **session,
    )
    if manual_ack:
        client._client.manual_ack_set(True)
    return client


def _causes(error: BaseException) -> list[BaseException]:
    """Every exception in a group, and what each was raised from, outermost first."""
    if isinstance(error, BaseExceptionGroup):
        return [cause for inner in error.exceptions for cause in _causes(inner)]
    found: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in found:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


#: MQTT 5 reason codes a broker ends or refuses a connection with, in an operator's words.
_REASONS = {
    0x80: "the connection was lost (the broker closed it, or the network dropped it)",
    0x81: "the broker found a malformed packet",
    0x82: "the broker found a protocol error",
    0x84: "the broker does not speak this MQTT version (mqtt.protocol)",
    0x85: "the broker refused the client id",
    0x86: "bad user name or password (mqtt.username, mqtt.password_file)",
    0x87: "not authorized by the broker (its ACL or credentials)",
    0x88: "the broker is unavailable",
    0x89: "the broker is busy",
    0x8A: "banned by the broker",
    0x8B: "the broker is shutting down",
    0x8D: "the broker heard nothing within the keepalive (mqtt.keepalive_s)",
    0x8E: "session taken over: another client connected with the same client id",
    0x9C: "the broker asks to use another server",
    0x9D: "the broker has moved to another server",
    0x9F: "connection rate exceeded on the broker",
}
#: paho's MQTT 3.1.1 CONNACK return codes.
_CONNACK_311 = {
    1: "the broker does not speak this MQTT version (mqtt.protocol)",
    2: "the broker refused the client id",
    3: "the broker is unavailable",
    4: "bad user name or password (mqtt.username, mqtt.password_file)",
    5: "not authorized by the broker (its ACL or credentials)",
}
#: aiomqtt's words for a connection lost while reading or waiting.
_WRAPPERS = ("Disconnected during message iteration", "Operation timed out")


def in_words(error: BaseException) -> str:
    """Why a broker connection failed or ended, said for an operator, on one line.

    aiomqtt's own words (``Disconnected during message iteration: [code:128]
    Unspecified error``) name where the loss was noticed, not what happened:
    the cause is looked for in what it was raised from. The technical detail
    stays available to callers from the exception itself.
    """
    causes = _causes(error)
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            return f"the broker's host name does not resolve ({cause.strerror or cause})"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused: nothing listens on that port (is the broker running?)"
        if isinstance(cause, ConnectionResetError | BrokenPipeError):
            return "the connection was reset (the broker closed it, or the network dropped it)"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS: the broker's certificate is not trusted ({cause.verify_message})"
        if isinstance(cause, ssl.SSLError):
            return f"TLS: {getattr(cause, 'reason', None) or cause}"
        if isinstance(cause, OSError) and cause.strerror:
            return f"cannot reach the broker: {cause.strerror.lower()}"
        rc = getattr(cause, "rc", None)
        value = getattr(rc, "value", rc)
        if isinstance(value, int):
            if isinstance(cause, MqttConnectError) and value in _CONNACK_311:
                return f"refused: {_CONNACK_311[value]}"
            if value in _REASONS:
                refused = isinstance(cause, MqttConnectError) and value != 0x80
                return ("refused: " if refused else "") + _REASONS[value]
            if value == paho.MQTT_ERR_CONN_LOST:
                return _REASONS[0x80]
            if value == paho.MQTT_ERR_NO_CONN:
                return "not connected to the broker"
    for cause in causes:
        text = str(cause)
        if "timed out" in text.lower() or isinstance(cause, TimeoutError):
            return "no answer from the broker in time (a host that drops packets, or a hung broker)"
        if text and text not in _WRAPPERS:
            return text.splitlines()[0]
    return "the broker ended the session"
