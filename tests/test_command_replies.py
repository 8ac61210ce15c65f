"""Command replies on MQTT 3.1.1 (no response topic property: ``reply_to`` and
``correlation_id`` in the payload), through a mosquitto that enforces the ACL
shipped in ``config/mosquitto-acl.example``, user names and passwords."""

from __future__ import annotations

import contextlib
import getpass
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.test_publisher import Log, running, until
from wheeld.config import Config
from wheeld.core.commands import OperatorCommand
from wheeld.shell.journal import Journal
from wheeld.shell.publisher import Publisher
from wheeld.testing.rig import Broker, wait_for

ACL = Path(__file__).parent.parent / "config" / "mosquitto-acl.example"
PASSWD = shutil.which("mosquitto_passwd")
BASE = "wheeld/T1"
#: Every user the shipped ACL names, with a password of its own.
USERS = {"wheeld-T1": "daemon-pw", "pitboss": "pit-pw", "marquee": "board-pw"}

pytestmark = pytest.mark.skipif(PASSWD is None, reason="mosquitto_passwd not installed")


class ShippedAclBroker(Broker):
    """A mosquitto with passwords and the ACL file wheeld ships as an example."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        passwords = workdir / "passwd"
        passwords.touch()
        for user, password in USERS.items():
            subprocess.run([PASSWD, "-b", str(passwords), user, password], check=True)  # type: ignore[list-item]
        text = self.conf.read_text().replace("allow_anonymous true", "allow_anonymous false")
        # Run as root, mosquitto would become "mosquitto" and not read a private tmp dir.
        text += f"password_file {passwords}\nacl_file {ACL}\nuser {getpass.getuser()}\n"
        self.conf.write_text(text)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ShippedAclBroker]:
    broker = ShippedAclBroker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


class Console:
    """A client on MQTT 3.1.1 as a user of the ACL, collecting what it reads."""

    def __init__(self, port: int, user: str, topic: str) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.subscribed = False
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
        self.client.username_pw_set(user, USERS[user])
        self.client.on_message = lambda c, u, m: self.seen.append((m.topic, json.loads(m.payload)))
        self.client.on_subscribe = lambda *args: setattr(self, "subscribed", True)
        self.client.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        wait_for(lambda: self.subscribed, 10, f"{user} subscribed to {topic}")

    def command(self, name: str, body: dict[str, Any]) -> None:
        info = self.client.publish(f"{BASE}/command/{name}", json.dumps(body), qos=1)
        info.wait_for_publish(5)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def config(port: int) -> Config:
    return Config.model_validate(
        {
            "table": {"id": "T1"},
            "mqtt": {
                "port": port,
                "protocol": "3.1.1",
                "keepalive_s": 5,
                "username": "wheeld-T1",
                "password": USERS["wheeld-T1"],
                # As the shipped ACL example has it: replies in a space of their own.
                "reply_prefix": "wheeld-replies/",
            },
        }
    )


async def test_a_command_with_reply_to_is_answered_with_its_correlation_id_on_311(
    tmp_path: Path, broker: ShippedAclBroker
) -> None:
    async def on_command(command: OperatorCommand) -> dict[str, Any]:
        return {"ok": True, "command": command.name}

    pitboss = Console(broker.port, "pitboss", "wheeld-replies/pitboss/#")
    # The board may read the table, never a console's replies.
    board = Console(broker.port, "marquee", "wheeld-replies/#")
    log = Log()
    journal = Journal(tmp_path / "journal.sqlite")
    publisher = Publisher(config(broker.port), journal, on_command=on_command, log=log)
    try:
        async with running(publisher):
            await until(lambda: publisher.connected, "the publisher connected")
            await until(lambda: publisher.listening, "the publisher subscribed to commands")
            pitboss.command(
                "open",
                {"reply_to": "wheeld-replies/pitboss/7", "correlation_id": "abc-1"},
            )
            await until(lambda: pitboss.seen, "the reply")
            # Outside mqtt.reply_prefix, and on the table's own topics: refused, said why.
            for topic in ("pit/replies/1", f"{BASE}/result"):
                pitboss.command("close", {"reply_to": topic, "correlation_id": "x"})
            await until(lambda: len(log.at("warning", "response topic refused")) == 2, "2")
            # A refused command is answered too, with its correlation id.
            pitboss.command(
                "open",
                {"colour": "red", "reply_to": "wheeld-replies/pitboss/8", "correlation_id": "b"},
            )
            await until(lambda: len(pitboss.seen) == 2, "the second reply")
    finally:
        pitboss.close()
        board.close()
        journal.close()

    first, second = pitboss.seen
    assert first == (
        "wheeld-replies/pitboss/7",
        {"ok": True, "command": "open", "correlation_id": "abc-1", "schema_version": 1},
    )
    assert second[0] == "wheeld-replies/pitboss/8" and second[1]["correlation_id"] == "b"
    refused = log.at("warning", "response topic refused")
    assert [(r["topic"], r["command"]) for r in refused] == [
        ("pit/replies/1", "close"),
        (f"{BASE}/result", "close"),
    ]
    assert "not a topic under wheeld-replies/" in refused[0]["why"]
    assert "under the table's own" in refused[1]["why"]
    assert board.seen == []


async def test_the_shipped_acl_lets_the_daemon_publish_its_table_and_nowhere_else(
    tmp_path: Path, broker: ShippedAclBroker
) -> None:
    """What the example grants: the table's topics, and replies under the prefix only."""
    watcher = Console(broker.port, "pitboss", "#")
    daemon = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    daemon.username_pw_set("wheeld-T1", USERS["wheeld-T1"])
    daemon.connect("127.0.0.1", broker.port)
    daemon.loop_start()
    try:
        for topic in (f"{BASE}/alarm", "elsewhere/x", "wheeld/T2/game", "wheeld-replies/pitboss/1"):
            daemon.publish(topic, json.dumps({"topic": topic}), qos=1).wait_for_publish(5)
        marker = "wheeld-replies/pitboss/end"
        daemon.publish(marker, "{}", qos=1).wait_for_publish(5)
        wait_for(lambda: any(t == marker for t, _ in watcher.seen), 10, "the marker")
    finally:
        with contextlib.suppress(Exception):
            daemon.loop_stop()
        watcher.close()
    # 3.1.1: the forbidden ones were acknowledged and silently dropped.
    assert [t for t, _ in watcher.seen if t != marker] == [
        f"{BASE}/alarm",
        "wheeld-replies/pitboss/1",
    ]


async def test_on_mqtt_5_the_response_topic_wins_and_the_correlation_id_is_a_property_too(
    tmp_path: Path, broker: ShippedAclBroker
) -> None:
    async def on_command(command: OperatorCommand) -> dict[str, Any]:
        return {"ok": True}

    answers: list[tuple[str, Any, bytes | None]] = []
    pitboss = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    pitboss.username_pw_set("pitboss", USERS["pitboss"])
    pitboss.on_message = lambda c, u, m: answers.append(
        (m.topic, json.loads(m.payload), getattr(m.properties, "CorrelationData", None))
    )
    pitboss.connect("127.0.0.1", broker.port)
    pitboss.loop_start()
    pitboss.subscribe("wheeld-replies/pitboss/#", qos=1)
    settings = config(broker.port).model_dump()
    settings["mqtt"]["protocol"] = "5"
    journal = Journal(tmp_path / "journal.sqlite")
    publisher = Publisher(
        Config.model_validate(settings), journal, on_command=on_command, log=Log()
    )
    try:
        async with running(publisher):
            await until(lambda: publisher.connected, "the publisher connected")
            await until(lambda: publisher.listening, "the publisher subscribed to commands")
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ResponseTopic = "wheeld-replies/pitboss/5"
            body = {"reply_to": "wheeld-replies/pitboss/9", "correlation_id": "k-1"}
            pitboss.publish(
                f"{BASE}/command/open", json.dumps(body), qos=1, properties=properties
            ).wait_for_publish(5)
            await until(lambda: answers, "the reply")
    finally:
        pitboss.loop_stop()
        journal.close()
    assert answers == [
        (
            "wheeld-replies/pitboss/5",
            {"ok": True, "correlation_id": "k-1", "schema_version": 1},
            b"k-1",
        )
    ]


async def test_a_byte_order_mark_in_a_commands_properties_is_read_not_a_protocol_error(
    tmp_path: Path,
) -> None:
    """MQTT 5 allows U+FEFF in a string ([MQTT-1.5.4-3]) and mosquitto passes it on; paho
    refused it, dropped the connection before the command was read, and the broker gave
    the command again at every reconnect: one message kept the table off its broker."""
    broker = Broker(tmp_path)
    broker.start()

    async def on_command(command: OperatorCommand) -> dict[str, Any]:
        return {"ok": True}

    answers: list[tuple[str, Any]] = []
    pitboss = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    pitboss.on_message = lambda c, u, m: answers.append((m.topic, json.loads(m.payload)))
    pitboss.connect("127.0.0.1", broker.port)
    pitboss.loop_start()
    pitboss.subscribe("\ufeffreplies/#", qos=1)
    settings = config(broker.port).model_dump()
    settings["mqtt"].update(protocol="5", username=None, password=None, reply_prefix="")
    journal = Journal(tmp_path / "journal.sqlite")
    log = Log()
    publisher = Publisher(Config.model_validate(settings), journal, on_command=on_command, log=log)
    try:
        async with running(publisher):
            await until(lambda: publisher.listening, "the publisher subscribed to commands")
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ResponseTopic = "\ufeffreplies/pitboss"
            properties.UserProperty = [("operator", "\ufeffbob")]
            pitboss.publish(
                f"{BASE}/command/open", "{}", qos=1, properties=properties
            ).wait_for_publish(5)
            await until(lambda: answers, "the reply")
            assert publisher.connected
    finally:
        pitboss.loop_stop()
        journal.close()
        broker.stop()
    assert answers == [("\ufeffreplies/pitboss", {"ok": True, "schema_version": 1})]
    assert not [line for line in log.lines if "lost" in str(line) or "Protocol" in str(line)]
