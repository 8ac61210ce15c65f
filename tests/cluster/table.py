"""A table on a cluster: a scripted WRP/1 wheel on a pty, ``wheeld run`` listing every
node in ``mqtt.servers``, and a consumer with a persistent session on another node.

``play_through_node_loss`` is the scenario every engine runs: games flow, the node the
daemon is connected to is SIGKILLed in the middle of a game, more games flow; it
returns what the consumer received so each engine's test can say what must hold.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.cluster.brokers import Cluster
from wheeld.core.signing import load_public_key, signature_problem
from wheeld.shell.journal import JOURNAL_FILE
from wheeld.testing.rig import DaemonProcess, NotifySocket, PtyWheel, wait_for
from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel

TABLE = "T9"
BASE = f"wheeld/{TABLE}"
GAME = f"{BASE}/game"
RETAINED = (f"{BASE}/status", f"{BASE}/result", f"{BASE}/history")
KEYS = Path(__file__).resolve().parents[1] / "keys"
#: The published test key (tests/keys/README.md): never a real table's.
SIGNING_KEY = KEYS / "test-signing.key"
PUBLIC_KEY = KEYS / "test-signing.pub"
#: Numbers of the games played: before the loss, the one the loss interrupts, after it.
BEFORE = ("17", "4", "32")
DURING = "0"
AFTER = ("21", "9")
#: Where the test's console hears command replies (under mqtt.reply_prefix).
RECALL_REPLIES = "wheeld-replies/cluster-test"


class Consumer:
    """The casino's system: MQTT 3.1.1 (every engine speaks it), clean session off, QoS 1,
    on one node. It is subscribed (SUBACK received) before the daemon publishes a thing."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.received: list[tuple[str, Any]] = []
        self.subscribed = False
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"cluster-consumer-{uuid.uuid4().hex[:8]}",
            clean_session=False,
            protocol=paho.MQTTv311,
        )
        # paho annotates whole seconds but computes with any number.
        self.client.reconnect_delay_set(0.1, 1)  # type: ignore[arg-type]
        self.client.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, mid, codes, p=None: self._acked(codes)
        self.client.on_message = lambda c, u, m: self.messages.put((m.topic, bytes(m.payload)))
        self.client.connect("127.0.0.1", port, keepalive=5)
        self.client.loop_start()
        wait_for(lambda: self.subscribed, 30, f"the consumer's SUBACK from port {port}")

    def _acked(self, codes: list[Any]) -> None:
        self.subscribed = all(not code.is_failure for code in codes)

    def games(self) -> list[dict[str, Any]]:
        """Every ``<base>/game`` payload received, repeats included, in arrival order."""
        while not self.messages.empty():
            topic, payload = self.messages.get_nowait()
            self.received.append((topic, json.loads(payload)))
        return [body for topic, body in self.received if topic == GAME]

    def has(self, game_id: int, event: str) -> bool:
        return any(p["game_id"] == game_id and p["event"] == event for p in self.games())

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def read_retained(port: int, topics: tuple[str, ...] = RETAINED) -> dict[str, Any]:
    """What a node holds retained on ``topics`` now, as a new clean client sees it; a
    topic absent from the answer holds nothing there."""
    found: dict[str, Any] = {}
    acked: list[bool] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)

    def on_message(_c: paho.Client, _u: object, message: paho.MQTTMessage) -> None:
        if message.retain:
            found[message.topic] = json.loads(message.payload)

    client.on_message = on_message
    client.on_subscribe = lambda c, u, mid, codes, p=None: acked.append(True)
    client.connect("127.0.0.1", port, keepalive=5)
    client.loop_start()
    try:
        # QoS 0: on NATS a QoS 1 subscription is a JetStream consumer, which with a
        # node down may never be made (docs/brokers.md); retained messages come either way.
        client.subscribe([(topic, 0) for topic in topics])
        wait_for(lambda: acked, 15, f"SUBACK from port {port}")
        # Retained messages follow the SUBACK at once; a topic still missing once the
        # others are in (or after 2 s) holds nothing on this node.
        deadline = time.monotonic() + 2
        wait_for(
            lambda: len(found) == len(topics) or time.monotonic() > deadline,
            5,
            f"retained messages from port {port}",
        )
        return found
    finally:
        client.disconnect()
        client.loop_stop()


@dataclass
class Outcome:
    """What the consumer received and where the daemon was connected."""

    games: list[dict[str, Any]]
    #: Each MQTT port the daemon said it connected to, in order.
    connections: list[int]
    survivors: list[int]


class ClusterTable:
    def __init__(self, tmp: Path, cluster: Cluster, *, protocol: str, consumer_node: int) -> None:
        self.tmp = tmp
        self.cluster = cluster
        self.pty = PtyWheel(tmp / "wheel0")
        self.wheel = ScriptedWheel(start=time.time())
        self.sent = 0
        self.streamed_at = time.monotonic()
        self.notify = NotifySocket(tmp / "notify.sock")
        servers = ", ".join(f'"127.0.0.1:{port}"' for port in cluster.ports)
        self.config = tmp / "wheeld.toml"
        self.config.write_text(
            f'[table]\nid = "{TABLE}"\n'
            f'[wheel]\ndriver = "wrp"\nport = "{tmp / "wheel0"}"\n'
            f'[mqtt]\nservers = [{servers}]\nprotocol = "{protocol}"\nkeepalive_s = 5\n'
            f'[state]\ndir = "{tmp / "state"}"\n'
            f'[log]\nformat = "json"\nlevel = "debug"\n'
            f"[signing]\nkey_file = {json.dumps(str(SIGNING_KEY))}\n"
        )
        self.daemon = DaemonProcess(self.config, tmp, env={"NOTIFY_SOCKET": str(self.notify.path)})
        self.consumer = Consumer(cluster.ports[consumer_node], GAME)

    # -- the wheel, in real time -------------------------------------------------

    def flush(self) -> None:
        """Send everything the script has written since the last flush."""
        for _, frame in self.wheel.lines[self.sent :]:
            self.pty.write(frame + b"\r\n")
        self.sent = len(self.wheel.lines)
        self.streamed_at = time.monotonic()

    def keep_talking(self) -> None:
        """The wheel's heartbeats for the real time gone by: a silent wheel voids the game
        in progress (``wheel_link_lost`` after ``rules.link_timeout_ms`` of host time)."""
        elapsed_ms = int((time.monotonic() - self.streamed_at) * 1000)
        if elapsed_ms >= 200:
            self.wheel.advance(elapsed_ms)
            self.flush()

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """``wait_for`` with the wheel talking meanwhile."""

        def talking_until() -> Any:
            self.keep_talking()
            return condition()

        return wait_for(talking_until, timeout, what)

    def connections(self) -> list[int]:
        """The MQTT ports the daemon says it connected to, in order."""
        ports = []
        for record in self.daemon.log_lines():
            if record.get("event", record.get("msg")) == "broker connected":
                port = record.get("port")
                if isinstance(port, int):
                    ports.append(port)
                elif isinstance(record.get("server"), str):
                    ports.append(int(str(record["server"]).rsplit(":", 1)[1]))
        return ports

    # -- the scenario -------------------------------------------------------------

    def _game(self, number: str) -> None:
        self.wheel.game(number)
        self.wheel.reverse_rotor()

    def play_before(self) -> int:
        """Start wheeld and play the first games; their last id once the consumer has it."""
        self.daemon.start()
        self.wait(
            lambda: any("READY=1" in m for m in self.notify.messages()), 60, "READY=1 from wheeld"
        )
        self.wheel.hello()
        self.wheel.advance(3000)
        for number in BEFORE:
            self._game(number)
        self.flush()
        before = len(BEFORE)
        self.wait(lambda: self.consumer.has(before, "result"), 30, f"game {before}'s result")
        return before

    def play(self, *numbers: str) -> None:
        for number in numbers:
            self._game(number)
        self.flush()

    def acknowledged(self, game_id: int) -> bool:
        """Whether ``game_id``'s result is in the journal and the broker has acknowledged
        everything (the outbox is empty)."""
        uri = f"file:{self.tmp / 'state' / JOURNAL_FILE}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as journal:
            decided = journal.execute(
                "SELECT 1 FROM results WHERE game_id = ?", (game_id,)
            ).fetchone()
            (pending,) = journal.execute("SELECT count(*) FROM outbox").fetchone()
        return decided is not None and pending == 0

    def play_through_node_loss(self) -> Outcome:
        """Three games; a fourth launched, its node killed once the consumer heard it
        spinning; the fourth finished and two more played. Waits for the last result."""
        before = self.play_before()
        connected = self.connections()
        doomed = self.cluster.ports.index(connected[-1]) if connected else 0

        self.wheel.pocket(None)
        self.wheel.advance(700)
        ball = self.wheel.launch()
        self.flush()
        during = before + 1
        self.wait(lambda: self.consumer.has(during, "spinning"), 30, f"game {during} spinning")
        self.cluster.kill(doomed)
        self.wheel.run_ball(ball, DEFAULT_BALL_PERIODS)
        self.wheel.drop(DURING)
        self.wheel.advance(1500)
        self.wheel.reverse_rotor()
        for number in AFTER:
            self._game(number)
        self.flush()
        last = during + len(AFTER)
        self.wait(lambda: self.consumer.has(last, "result"), 60, f"game {last}'s result")
        survivors = [port for index, port in enumerate(self.cluster.ports) if index != doomed]
        return Outcome(self.consumer.games(), self.connections(), survivors)

    def close(self) -> None:
        self.daemon.ensure_stopped()
        self.consumer.close()
        self.pty.close()
        self.notify.close()


def recall_game(port: int, game_id: int) -> dict[str, Any]:
    """Ask the table, on the node on ``port`` (MQTT 5), for one game: the ``recall``
    command's reply (docs/mqtt.md, "Commands")."""
    replies: queue.Queue[bytes] = queue.Queue()
    subscribed: list[bool] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.on_message = lambda c, u, m: replies.put(bytes(m.payload))
    client.on_subscribe = lambda c, u, mid, codes, p=None: subscribed.append(True)
    client.connect("127.0.0.1", port, keepalive=5)
    client.loop_start()
    try:
        client.subscribe(RECALL_REPLIES, qos=1)
        wait_for(lambda: subscribed, 15, f"SUBACK from port {port}")
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = RECALL_REPLIES
        asked = json.dumps({"game_id": game_id, "last": 1, "operator": "cluster-test"})
        client.publish(f"{BASE}/command/recall", asked, qos=1, properties=properties)
        reply: dict[str, Any] = json.loads(replies.get(timeout=20))
        return reply
    finally:
        client.disconnect()
        client.loop_stop()


# -- what must hold, whatever the engine ----------------------------------------------


def expected_results() -> list[tuple[int, str]]:
    numbers = (*BEFORE, DURING, *AFTER)
    return [(game_id, number) for game_id, number in enumerate(numbers, start=1)]


def assert_every_result_once_in_order(games: list[dict[str, Any]]) -> None:
    """Each game's result reached the consumer: no gap, first arrivals in game order
    (repeats are allowed, at least once, and dropped by game id), each one signed with
    the table's key and chained without a gap in ``seq``."""
    first: dict[int, dict[str, Any]] = {}
    for payload in games:
        if payload["event"] == "result":
            first.setdefault(payload["game_id"], payload)
    assert [(game_id, p["number"]) for game_id, p in first.items()] == expected_results()
    key = load_public_key(PUBLIC_KEY)
    chain: dict[int, dict[str, Any]] = {}
    for payload in games:
        assert signature_problem(payload, key) is None, payload
        chain.setdefault(payload["seq"], payload)
    seqs = list(chain)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"a gap in seq: {seqs}"


def retained_problem(held: dict[str, Any]) -> str | None:
    """What is wrong with a node's retained ``status``, ``result`` and ``history`` after
    the last game, or None."""
    numbers = [number for _, number in expected_results()]
    result = held.get(f"{BASE}/result") or {}
    if (held.get(f"{BASE}/status") or {}).get("state") != "online":
        return "status is not online"
    if (result.get("game_id"), result.get("number")) != expected_results()[-1]:
        return "result is not the last game's"
    if (held.get(f"{BASE}/history") or {}).get("numbers") != numbers[::-1]:
        return "history is not every number, newest first"
    return None


def assert_retained_right(port: int) -> None:
    """The node on ``port`` comes to hold the right retained state: the retained topics
    are published after the game's own message, so a first look may be a step behind."""
    held: list[dict[str, Any]] = [{}]

    def right() -> bool:
        held[0] = read_retained(port)
        return retained_problem(held[0]) is None

    try:
        wait_for(right, 20, f"the right retained state on port {port}")
    except AssertionError:
        raise AssertionError(f"port {port}: {retained_problem(held[0])}: {held[0]}") from None
