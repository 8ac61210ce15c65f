"""Every payload a real daemon publishes holds to the contract's registry.

One ``wheeld run`` process (``tests.test_daemon.Table``: a pty wheel, the
daemon, a subscriber on ``<base>/#``) and a mosquitto whose ACL is reloaded:
games, no-spins (the rules' and the operator's), commands answered (carried
out and refused), a fault alarm set and cleared, and a message the broker
refuses (``broker_refused``). Each message is validated by the model the
registry names for its topic and may carry no member that model does not
name (alarms must be signed too); each reply, on the operator's response
topic, by its command's reply model (or ``Refused``); every topic of the
registry must have been seen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.test_contract import _valid
from tests.test_daemon import BASE, Table
from tests.test_publisher import ALLOW_ALL, AclBroker
from wheeld.contract.registry import COMMANDS, TOPICS, topic_at
from wheeld.core.signing import Signer, signature_problem
from wheeld.testing.rig import running, wait_for

REPLIES = "wheeld-replies/contract"
#: The broker refuses the daemon one topic while this ACL is loaded (the first one).
DENY_TABLE = f"topic readwrite #\ntopic deny {BASE}/table\n"


class Operator:
    """An MQTT 5 console: sends commands and keeps each reply by its correlation data."""

    def __init__(self, port: int) -> None:
        self.replies: dict[str, tuple[str, dict[str, Any]]] = {}
        self._sent: dict[str, str] = {}
        self._subscribed = False
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *args: setattr(self, "_subscribed", True)
        self.client.connect("127.0.0.1", port)
        self.client.subscribe(REPLIES, qos=1)
        self.client.loop_start()
        wait_for(lambda: self._subscribed, 10, "the operator subscribed to its replies")

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        correlation = bytes(getattr(message.properties, "CorrelationData", b"")).decode()
        self.replies[correlation] = (self._sent[correlation], json.loads(message.payload))

    def send(self, command: str, body: dict[str, Any], correlation: str) -> dict[str, Any]:
        """Send ``command`` and wait for its reply."""
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.ResponseTopic = REPLIES
        properties.CorrelationData = correlation.encode()
        self._sent[correlation] = command
        self.client.publish(
            f"{BASE}/command/{command}", json.dumps(body), qos=1, properties=properties
        )
        wait_for(lambda: correlation in self.replies, 15, f"the reply to {command}")
        return self.replies[correlation][1]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def test_every_payload_a_daemon_publishes_validates_against_the_registry(tmp_path: Path) -> None:
    broker = AclBroker(tmp_path, DENY_TABLE)
    broker.start()
    # The heartbeat as often as allowed, so <base>/health is seen in the run.
    table = Table(tmp_path, broker, metrics="[metrics]\nhealth_interval_s = 5")
    wheel, watcher = table.wheel, table.sub
    operator: Operator | None = None

    def ended(game_id: int) -> dict[str, Any]:
        return table.wait_end(game_id, timeout=15)

    def launch(*, reverse: bool) -> None:
        """A new game, the ball launched; the rotor turned the other way from the last
        result's (the rules want it) when it still turns that way."""
        if reverse:
            wheel.reverse_rotor()
        wheel.pocket(None)
        wheel.advance(wheel.rotor_period_ms * 3 + 100)  # a re-spin after a void waits for 3
        wheel.run_ball(wheel.launch(), [600, 700])

    try:
        with running(table.daemon):
            table.ready()
            operator = Operator(broker.port)
            refused = operator.send("no_spin", {"note": "x"}, "refused-no-game")
            assert refused["ok"] is False

            wheel.hello()
            wheel.advance(3000)
            wheel.game("17")  # a result
            table.flush()
            assert ended(1)["event"] == "result"

            launch(reverse=True)  # the operator voids it
            table.flush()
            watcher.wait(f"{BASE}/game", lambda p: (p["game_id"], p["event"]) == (2, "spinning"))
            void = operator.send("no_spin", {"note": "chip in the bowl"}, "void")
            assert void["ok"] is True, void
            assert ended(2)["reason"] == "declared"

            launch(reverse=False)  # the port goes: the game is void, a fault set and cleared
            table.flush()
            watcher.wait(f"{BASE}/game", lambda p: (p["game_id"], p["event"]) == (3, "spinning"))
            table.pty.close()
            assert ended(3)["reason"] == "wheel_link_lost"
            watcher.wait(f"{BASE}/wheel", lambda p: p["link"] == "down")
            table.pty.open()
            watcher.wait(
                f"{BASE}/wheel",
                lambda p: p is watcher.on(f"{BASE}/wheel")[-1] and p["link"] == "up",
                15,
            )
            wheel.advance(10_000)
            wheel.game("0", bounces=["32"])
            table.flush()
            ended(4)
            watcher.wait(
                f"{BASE}/alarm",
                lambda p: p["alarm"] == "wheel_link_lost" and p.get("state") == "clear",
            )

            operator.send("ack", {"alert": "deviation", "operator": "boss"}, "ack-unset")
            operator.send("recall", {"last": 3}, "recall")
            # The broker refuses the daemon's <base>/table: one broker_refused alarm; the
            # message stays in the outbox and goes out once the broker allows it.
            operator.send("close", {"operator": "boss"}, "close")
            refusal = watcher.wait(f"{BASE}/alarm", lambda p: p["alarm"] == "broker_refused")
            assert refusal["topic"] == f"{BASE}/table"
            broker.reload(ALLOW_ALL)
            watcher.wait(f"{BASE}/table", lambda p: p["state"] == "closed", 30)
            operator.send("open", {"operator": "boss"}, "open")
            watcher.wait(f"{BASE}/table", lambda p: p["state"] == "open")

            watcher.wait(f"{BASE}/health", lambda p: True, 30)
            watcher.wait(f"{BASE}/stats", lambda p: p["games"] >= 4, 15)
            assert table.daemon.terminate() == 0
        watcher.wait(f"{BASE}/status", lambda b: b.get("state") == "offline")
    finally:
        if operator is not None:
            operator.close()
        table.close()
        broker.stop()

    public_key = Signer.from_file(tmp_path / "signing.key").public_key
    seen: set[str] = set()
    watcher.on(f"{BASE}/status")  # takes in everything that arrived
    for topic, body, _ in watcher.seen:
        if topic.startswith(f"{BASE}/command/"):
            continue  # the operator's own
        said = topic_at(BASE, topic)
        assert said is not None, f"{topic}: a topic the registry does not name"
        _valid(said.model(), json.dumps(body), driver_members=False)
        if said.name == "alarm":
            assert signature_problem(body, public_key) is None, f"unsigned alarm: {body}"
        seen.add(said.name)
    assert seen == set(TOPICS), f"no message on {sorted(set(TOPICS) - seen)}"

    assert operator is not None
    outcomes = set()
    for command, reply in operator.replies.values():
        done, refusal = COMMANDS[command].replies()
        _valid(refusal if reply["ok"] is False else done, json.dumps(reply))
        outcomes.add((command, reply["ok"]))
    assert outcomes >= {
        ("no_spin", False),
        ("no_spin", True),
        ("ack", False),
        ("recall", True),
        ("close", True),
        ("open", True),
    }
