"""The publisher in-process against a real mosquitto: command hand-over, reply
policy, broker refusals and a session taken over by a second client."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from wheeld.config import Config
from wheeld.core.commands import OperatorCommand
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.core.signing import Signer, signature_problem
from wheeld.drivers.wrp import WrpDecoder
from wheeld.shell import broker_memory, drain, mqtt_client, takeover
from wheeld.shell.broker_memory import read_broker_memory
from wheeld.shell.command_listener import MAX_SENDER, reply_topic_refusal
from wheeld.shell.journal import Journal
from wheeld.shell.mqtt_client import MAX_PACKET_BYTES
from wheeld.shell.publisher import Publisher
from wheeld.shell.stop import stop_tasks
from wheeld.table.effects import Outgoing
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld.testing.rig import Broker, Subscriber

BASE = "wheeld/T9"
GAME = f"{BASE}/game"
ALLOW_ALL = "topic readwrite #\n"
# Anonymous clients (every client here) may use everything but the game topic.
DENY_GAME = f"topic readwrite #\ntopic deny {GAME}\n"
#: The start-up check's probe refused: it never comes back.
DENY_PROBE = f"topic readwrite #\ntopic deny {BASE}/status/preflight\n"


class Log:
    """Records what the publisher logs: (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []
        #: When each line was said (monotonic): the order and spacing of events, as
        #: they happened, not as a test polling under load happens to see them.
        self.times: list[float] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        def record(event: str, **fields: Any) -> None:
            self.lines.append((level, event, fields))
            self.times.append(time.monotonic())

        return record

    def at(self, level: str, words: str) -> list[dict[str, Any]]:
        return [f for lv, event, f in self.lines if lv == level and words in event]

    def when(self, level: str, words: str) -> list[float]:
        """When each matching line was said."""
        return [
            at
            for (lv, event, _), at in zip(self.lines, self.times, strict=True)
            if lv == level and words in event
        ]


async def until(condition: Callable[[], Any], what: str, timeout: float = 10) -> Any:
    """Await ``condition`` being truthy, without blocking the publisher's loop."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return value


class AclBroker(Broker):
    """A mosquitto whose ACL file can be rewritten and reloaded (SIGHUP)."""

    def __init__(self, workdir: Path, acl: str) -> None:
        super().__init__(workdir)
        self.acl = workdir / "acl"
        self.acl.write_text(acl)
        with self.conf.open("a") as conf:
            # Run as root, mosquitto would become "mosquitto" and not read a private tmp dir.
            conf.write(f"acl_file {self.acl}\nuser {getpass.getuser()}\n")

    def reload(self, acl: str) -> None:
        assert self.process is not None
        self.acl.write_text(acl)
        self.process.send_signal(signal.SIGHUP)


@contextlib.contextmanager
def acl_broker(tmp_path: Path, acl: str) -> Iterator[AclBroker]:
    broker = AclBroker(tmp_path, acl)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def config(port: int, protocol: str = "5") -> Config:
    return Config.model_validate(
        {"table": {"id": "T9"}, "mqtt": {"port": port, "protocol": protocol, "keepalive_s": 5}}
    )


@contextlib.asynccontextmanager
async def running(publisher: Publisher) -> AsyncIterator[Publisher]:
    task = asyncio.create_task(publisher.run())
    try:
        yield publisher
    finally:
        # Cancelled again until it ends (``stop_tasks``): the session-takeover test's
        # publisher, cancelled while its rival knocked it off, swallowed one and went
        # on reconnecting until pytest's timeout (1 run in 20 under load).
        await stop_tasks(task)


async def no_command(command: OperatorCommand) -> dict[str, Any]:
    return {"ok": False, "error": "no commands here"}


def operator_client(port: int, client_id: str = "") -> paho.Client:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def send_command(
    client: paho.Client,
    name: str,
    *,
    response_topic: str | None = None,
    user: list[tuple[str, str]] | None = None,
    retain: bool = False,
) -> None:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if response_topic is not None:
        properties.ResponseTopic = response_topic
        properties.CorrelationData = b"42"
    if user:
        properties.UserProperty = user
    info = client.publish(
        f"{BASE}/command/{name}", b"{}", qos=1, retain=retain, properties=properties
    )
    info.wait_for_publish(5)


# -- the reply policy (pure) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("wheeld-replies/pit/1", None),
        ("wheeld-replies/x", None),
        ("wheeld-replies/", "not a topic under"),
        ("wheeld-replies", "not a topic under"),
        ("pit/replies", "not a topic under"),
        (f"{BASE}/status", "under the table's own"),
        (BASE, "under the table's own"),
        ("$SYS/broker", "a $ topic"),
        ("wheeld-replies/+/x", "'+', '#' or NUL"),
        ("wheeld-replies/#", "'+', '#' or NUL"),
        ("wheeld-replies/a\0b", "'+', '#' or NUL"),
        ("wheeld-replies//x", "an empty level"),
        ("wheeld-replies/" + "é" * 300, "longer than 512 bytes"),
    ],
)
def test_reply_topic_policy(topic: str, why: str | None) -> None:
    refusal = reply_topic_refusal(topic, base=BASE, prefix="wheeld-replies/")
    assert (refusal is None) if why is None else (refusal is not None and why in refusal)


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("rig/replies/1", None),
        ("a", None),
        ("wheeld/T2/replies", None),
        (f"{BASE}/status", "under the table's own"),
        (BASE, "under the table's own"),
        ("$SYS/broker", "a $ topic"),
        ("rig/+/x", "'+', '#' or NUL"),
        ("#", "'+', '#' or NUL"),
        ("rig//x", "an empty level"),
        ("/rig", "an empty level"),
        ("rig/", "an empty level"),
        ("", "an empty topic"),
        ("r" * 513, "longer than 512 bytes"),
    ],
)
def test_with_no_reply_prefix_any_topic_but_the_table_s_own_is_answered(
    topic: str, why: str | None
) -> None:
    """The default: the MQTT 5 response topic as the sender gives it (the broker's ACL
    says where wheeld may write), never the table's own topics, a $ topic or a filter."""
    refusal = reply_topic_refusal(topic, base=BASE, prefix="")
    assert (refusal is None) if why is None else (refusal is not None and why in refusal)


def test_a_reply_prefix_under_the_base_still_never_answers_there() -> None:
    assert reply_topic_refusal(f"{BASE}/r/1", base=BASE, prefix=f"{BASE}/r") is not None
    assert reply_topic_refusal("pit/replies/7", base=BASE, prefix="pit/replies") is None


# -- commands over a real broker ---------------------------------------------------------


async def test_commands_are_handed_over_and_answered_only_where_allowed(tmp_path: Path) -> None:
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        operator = operator_client(broker.port)
        # Left on the broker before wheeld subscribes: it arrives with the retain flag.
        send_command(operator, "close", response_topic="wheeld-replies/old", retain=True)
        watcher = Subscriber(broker.port, "#")
        received: list[OperatorCommand] = []

        async def on_command(command: OperatorCommand) -> dict[str, Any]:
            received.append(command)
            return {"ok": True, "command": command.name}

        log = Log()
        journal = Journal(tmp_path / "journal.sqlite")
        publisher = Publisher(config(broker.port), journal, on_command=on_command, log=log)
        try:
            async with running(publisher):
                await until(lambda: received, "the retained command")
                send_command(
                    operator,
                    "open",
                    response_topic="wheeld-replies/pit/1",
                    user=[("operator", "alice"), ("user", "bob")],
                )
                send_command(operator, "open", user=[("user", "b" * 200)])
                refused = ["wheeld/T9/table", "$SYS/wheeld", "pit//1", "p/" * 30_000]
                for topic in refused:
                    send_command(operator, "no_spin", response_topic=topic)
                # No mqtt.reply_prefix (the default): any other topic the sender names.
                send_command(operator, "open", response_topic="pit/replies/1")
                await until(lambda: len(received) == 8, "every command handed over")
                reply = await until(
                    lambda: watcher.on("wheeld-replies/pit/1"), "the reply on the response topic"
                )
                await until(lambda: watcher.on("pit/replies/1"), "the reply outside wheeld's own")
                await until(lambda: len(log.at("warning", "response topic refused")) == 4, "4")
        finally:
            watcher.close()
            operator.loop_stop()
            journal.close()

    assert (received[0].name, received[0].retained) == ("close", True)
    assert [(c.name, c.retained, c.sender) for c in received[1:3]] == [
        ("open", False, "alice"),
        ("open", False, "b" * MAX_SENDER),
    ]
    assert all(c.sender is None for c in received[3:])
    assert reply == [{"ok": True, "command": "open", "schema_version": 1}]
    # The retained command got no answer, and nothing was sent to a refused topic.
    assert watcher.on("wheeld-replies/old") == []
    assert watcher.on("wheeld/T9/table") == [] and watcher.on("pit//1") == []
    long = log.at("warning", "response topic refused")[-1]  # its head, and how long it was
    assert (long["topic"], long["topic_chars"]) == ("p/" * 60, 60_000)
    assert watcher.on("pit/replies/1") == [{"ok": True, "command": "open", "schema_version": 1}]
    warned = log.at("warning", "response topic refused")
    assert [(w["command"], w["topic"]) for w in warned] == [("no_spin", t[:120]) for t in refused]


async def test_a_retained_command_sent_while_subscribed_still_arrives_retained(
    tmp_path: Path,
) -> None:
    """MQTT 5 brokers clear the retain flag for live subscribers unless asked (Retain As
    Published): without it a retained no_spin sent now would look like an operator's."""
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        operator = operator_client(broker.port)
        received: list[OperatorCommand] = []

        async def on_command(command: OperatorCommand) -> dict[str, Any]:
            received.append(command)
            return {"ok": True}

        journal = Journal(tmp_path / "journal.sqlite")
        publisher = Publisher(config(broker.port), journal, on_command=on_command, log=Log())
        try:
            async with running(publisher):
                # Said until heard: once one is handed over, the publisher is subscribed.

                def heard_live() -> bool:
                    if not received:
                        send_command(operator, "open")
                    return bool(received)

                await until(heard_live, "a live command")
                send_command(operator, "no_spin", retain=True)
                await until(lambda: received[-1].name == "no_spin", "the retained one")
        finally:
            operator.loop_stop()
            journal.close()
    *live, retained = [(c.name, c.retained) for c in received]
    assert set(live) == {("open", False)} and retained == ("no_spin", True)


async def test_the_correlation_data_comes_back_with_the_reply(tmp_path: Path) -> None:
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        answers: list[tuple[str, bytes | None]] = []
        operator = operator_client(broker.port)
        operator.on_message = lambda c, u, m: answers.append(
            (m.payload.decode(), getattr(m.properties, "CorrelationData", None))
        )
        operator.subscribe("wheeld-replies/#", qos=1)
        journal = Journal(tmp_path / "journal.sqlite")
        publisher = Publisher(config(broker.port), journal, on_command=no_command, log=Log())
        try:
            async with running(publisher):
                await until(lambda: publisher.connected, "the publisher connected")
                await until(lambda: publisher.listening, "the publisher subscribed to commands")
                send_command(operator, "open", response_topic="wheeld-replies/me")
                await until(lambda: answers, "the answer")
        finally:
            operator.loop_stop()
            journal.close()
    body = {"ok": False, "error": "no commands here", "schema_version": 1}
    assert answers == [(json.dumps(body), b"42")]


# -- a refusal is not a delivery --------------------------------------------------------


async def test_a_refused_message_stays_raises_one_alarm_and_holds_back_only_its_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(drain, "REFUSED_RETRY_FIRST_S", 0.2)
    monkeypatch.setattr(drain, "REFUSED_RETRY_MAX_S", 0.4)
    with acl_broker(tmp_path, DENY_GAME) as broker:
        watcher = Subscriber(broker.port, f"{BASE}/#")
        journal = Journal(tmp_path / "journal.sqlite")
        journal.enqueue(
            [
                Outgoing(GAME, json.dumps({"game_id": 1})),
                Outgoing(f"{BASE}/wheel", json.dumps({"link": "up"}), retain=True),
                Outgoing(GAME, json.dumps({"game_id": 2})),
            ]
        )
        log = Log()
        signer = Signer.generate()
        pipeline = TablePipeline(
            TableSettings(table="T9", base_topic=BASE, driver="wrp", epoch="e"),
            WrpDecoder(),
            signer=signer,
        )
        publisher = Publisher(
            config(broker.port),
            journal,
            on_command=no_command,
            log=log,
            alarm_message=pipeline.unjournaled_alarm,  # as the daemon wires it
        )
        try:
            async with running(publisher):
                alarm = await until(lambda: watcher.on(f"{BASE}/alarm"), "the alarm")
                await until(lambda: watcher.on(f"{BASE}/wheel"), "the other topic, not held")
                await until(lambda: publisher.refusals >= 3, "retries")
                # Both game messages wait: the second behind the refused first.
                assert [e.message.topic for e in journal.pending()] == [GAME, GAME]
                assert publisher.stuck_since is not None
                assert len(log.at("error", "broker refused a message")) == 1
                assert len(watcher.on(f"{BASE}/alarm")) == 1

                broker.reload(ALLOW_ALL)
                await until(lambda: not journal.pending(), "the outbox drained", timeout=15)
                games = await until(lambda: len(watcher.on(GAME)) == 2 and watcher.on(GAME), "2")
                assert publisher.stuck_since is None
        finally:
            watcher.close()
            journal.close()

    assert alarm[0]["alarm"] == "broker_refused"
    assert (alarm[0]["topic"], alarm[0]["table"]) == (GAME, "T9")
    assert alarm[0]["reason"] == "Not authorized" and alarm[0]["ts"].endswith("Z")
    assert alarm[0]["schema_version"] == SCHEMA_VERSION
    assert signature_problem(alarm[0], signer.public_key) is None  # signed as every alarm
    assert games == [{"game_id": 1}, {"game_id": 2}]  # in order
    assert len(log.at("error", "broker refused a message")) == 1
    assert not log.at("warning", "broker unavailable")


# -- a second client with our client id ----------------------------------------------------


async def test_a_session_taken_over_is_said_once_and_backs_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(takeover, "TAKEOVER_BACKOFF_FIRST_S", 1.5)
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        journal = Journal(tmp_path / "journal.sqlite")
        log = Log()
        publisher = Publisher(config(broker.port), journal, on_command=no_command, log=log)
        intruder: paho.Client | None = None
        try:
            async with running(publisher):
                await until(lambda: publisher.connected, "the publisher connected")
                # A second "wheeld" for table T9: same client id, and it keeps coming back
                # (paho reconnects by itself), as a second daemon would.
                intruder = operator_client(broker.port, client_id="wheeld-T9")
                intruder.reconnect_delay_set(1, 2)  # back every second or two, as a daemon
                knocked_off: list[float] = []
                intruder.on_disconnect = lambda *_: knocked_off.append(time.monotonic())
                await until(lambda: publisher.session_taken_over, "the takeover", timeout=20)
                (taken_at,) = log.when("error", "another client with the same client id")
                # Timed from the log, as it happened: polling under load sees it late.
                reconnected = await until(
                    lambda: [t for t in log.when("info", "broker connected") if t > taken_at],
                    "reconnected after its backoff",
                    timeout=20,
                )
                waited_s = reconnected[0] - taken_at
                # The publisher waits out its backoff meanwhile: only its return knocks
                # the intruder off after the takeover was recognised.
                await until(
                    lambda: any(t > taken_at for t in knocked_off),
                    "the intruder knocked off by the reconnection",
                    timeout=20,
                )
        finally:
            if intruder is not None:
                intruder.disconnect()  # first: it wakes paho's loop from a reconnect delay
                intruder.loop_stop()
            journal.close()

    errors = log.at("error", "another client with the same client id")
    assert len(errors) == 1
    assert log.at("error", "probably a second wheeld for table T9")
    assert errors[0]["client_id"] == "wheeld-T9"
    assert waited_s >= 1.0, "reconnected at once: the two would flap every second"
    # Only the disconnections before it was recognised read as a lost or unavailable broker.
    lost = log.at("warning", "broker connection lost") + log.at("warning", "broker unavailable")
    assert len(lost) < takeover.SHORT_SESSIONS_IN_A_ROW


async def test_a_disconnect_that_says_session_taken_over_is_believed_at_once(
    tmp_path: Path,
) -> None:
    # mosquitto 2.0 just closes the connection; other brokers send MQTT 5's 0x8E.
    journal = Journal(tmp_path / "journal.sqlite")
    log = Log()
    publisher = Publisher(config(1883), journal, on_command=no_command, log=log)
    publisher.takeover.connected_at = time.monotonic()  # connected a moment ago
    taken = aiomqtt.MqttCodeError(ReasonCode(PacketTypes.DISCONNECT, identifier=0x8E), "gone")
    try:
        raise aiomqtt.MqttError("Disconnected during message iteration") from taken
    except aiomqtt.MqttError as error:
        group = ExceptionGroup("serve", [error])
        assert publisher.takeover.judge(group, time.monotonic(), time.time())
    finally:
        journal.close()
    assert publisher.session_taken_over
    assert log.at("error", "another client")[0]["evidence"] == "DISCONNECT 0x8E Session taken over"


# -- a payload over the size limit is never read ----------------------------------------------


#: Past the limit, and past the MQTT 5 Maximum Packet Size: no message of a table is near it.
BIG = b"{" + b" " * (MAX_PACKET_BYTES * 2) + b"}"


def publish_raw(port: int, payload: bytes, *topics: str, retain: bool) -> None:
    """``payload`` on each of ``topics``, at QoS 1, from a client of its own."""
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        for topic in topics:
            client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)
    finally:
        client.disconnect()  # first: it wakes the loop, which loop_stop then joins at once
        client.loop_stop()


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_the_start_up_check_ends_when_its_probe_is_back_and_misses_no_rival(
    tmp_path: Path, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait ends when the probe the check sends itself is back (the grace and the
    wait made an hour: ending at either would time the test out), and by then the
    retained status, sequence and result are all read: at every try."""
    monkeypatch.setattr(broker_memory, "PREFLIGHT_GRACE_S", 3600.0)
    monkeypatch.setattr(broker_memory, "PREFLIGHT_WAIT_S", 3600.0)
    monkeypatch.setattr(broker_memory, "PREFLIGHT_TOTAL_S", 3600.0)
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        async with asyncio.timeout(30):
            empty = await read_broker_memory(config(broker.port, protocol), "me", Log())
        assert empty == broker_memory.BrokerMemory(), "a new table: nothing, at once"
        status = json.dumps({"state": "online", "instance": "host-b:/var/lib/wheeld"})
        publish_raw(broker.port, status.encode(), f"{BASE}/status", retain=True)
        publish_raw(broker.port, b'{"seq": 7}', f"{BASE}/sequence", f"{BASE}/result", retain=True)
        for _ in range(10):
            async with asyncio.timeout(30):
                memory = await read_broker_memory(config(broker.port, protocol), "me", Log())
            assert memory.rival == "host-b:/var/lib/wheeld"
            assert memory.sequence == memory.result == b'{"seq": 7}'


async def test_a_probe_the_broker_does_not_echo_leaves_the_grace_and_the_rival_found(
    tmp_path: Path,
) -> None:
    """An ACL that refuses the probe's topic: the check waits the grace, as it did before
    there was a probe, and still reads the rival's retained status."""
    acl = f"topic readwrite #\ntopic deny {BASE}/status/preflight\n"
    with acl_broker(tmp_path, acl) as broker:
        status = json.dumps({"state": "online", "instance": "host-b:/var/lib/wheeld"})
        publish_raw(broker.port, status.encode(), f"{BASE}/status", retain=True)
        memory = await read_broker_memory(config(broker.port), "me", Log())
        assert memory.rival == "host-b:/var/lib/wheeld"


@pytest.mark.parametrize(("acl", "echoed"), [(ALLOW_ALL, False), (DENY_PROBE, True)])
async def test_once_the_broker_memory_is_all_read_our_own_markers_do_not_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, acl: str, echoed: bool
) -> None:
    """With the probe back, the sequence and result topics are left: what we publish
    there no longer comes back to us. Without it (an ACL refuses the probe), a retained
    one may still come late: we stay subscribed, and hear our own again."""
    heard: list[str] = []
    original = mqtt_client.Client._on_message

    def on_message(self: Any, client: Any, userdata: Any, message: Any) -> None:
        heard.append(message.topic)
        original(self, client, userdata, message)

    monkeypatch.setattr(mqtt_client.Client, "_on_message", on_message)
    with acl_broker(tmp_path, acl) as broker:
        publish_raw(broker.port, b'{"seq": 1}', f"{BASE}/result", retain=True)
        watcher = Subscriber(broker.port, f"{BASE}/#")
        journal = Journal(tmp_path / "journal.sqlite")
        retained: list[tuple[str, bytes]] = []
        publisher = Publisher(
            config(broker.port),
            journal,
            on_command=no_command,
            log=Log(),
            on_retained_result=lambda name, payload: retained.append((name, payload)),
        )
        try:
            async with running(publisher):
                await until(lambda: retained, "the retained result, read at connect")
                assert retained == [("result", b'{"seq": 1}')]
                journal.enqueue(
                    [
                        Outgoing(f"{BASE}/sequence", json.dumps({"seq": 2}), retain=True),
                        Outgoing(f"{BASE}/result", json.dumps({"seq": 2}), retain=True),
                    ]
                )
                publisher.wake()
                await until(lambda: watcher.on(f"{BASE}/result")[-1:] == [{"seq": 2}], "sent")
                # A command sent after our markers were seen comes after them: once it is
                # here, so would they be.
                publish_raw(broker.port, b"{}", f"{BASE}/command/open", retain=False)
                await until(lambda: f"{BASE}/command/open" in heard, "the command")
                ours = [t for t in heard if t in (f"{BASE}/sequence", f"{BASE}/result")]
                back = [f"{BASE}/sequence", f"{BASE}/result"] if echoed else []
                assert ours == [f"{BASE}/result", *back], "the retained one at connect, then"
        finally:
            watcher.close()
            journal.close()


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_a_payload_over_the_limit_is_never_read(tmp_path: Path, protocol: str) -> None:
    """MQTT 5: the CONNECT's Maximum Packet Size keeps the broker from sending it at all (not
    one line in the log). MQTT 3.1.1 has no such property: each arrives, and is dropped
    before any JSON parsing, with one log line."""
    with acl_broker(tmp_path, ALLOW_ALL) as broker:
        # Found: a retained 50 MB on <base>/sequence, read and parsed at every reconnect.
        publish_raw(broker.port, BIG, f"{BASE}/sequence", f"{BASE}/result", retain=True)
        log = Log()
        memory = await read_broker_memory(config(broker.port, protocol), "me", log)
        assert (memory.sequence, memory.result, memory.rival) == (None, None, None)
        start_up = [(w["topic"], w["bytes"]) for w in log.at("warning", "too big")]

        retained: list[tuple[str, bytes]] = []
        received: list[OperatorCommand] = []

        async def on_command(command: OperatorCommand) -> dict[str, Any]:
            received.append(command)
            return {"ok": True}

        log = Log()
        journal = Journal(tmp_path / "journal.sqlite")
        publisher = Publisher(
            config(broker.port, protocol),
            journal,
            on_command=on_command,
            log=log,
            on_retained_result=lambda name, payload: retained.append((name, payload)),
        )
        operator = operator_client(broker.port)
        try:
            async with running(publisher):

                def heard_live() -> bool:  # said until heard: then the publisher is subscribed
                    if not received:
                        send_command(operator, "open")
                    return bool(received)

                await until(heard_live, "a live command")
                publish_raw(broker.port, BIG, f"{BASE}/command/close", retain=False)
                send_command(operator, "no_spin")  # after the big one: handed over after it
                await until(lambda: received[-1].name == "no_spin", "the command after it")
        finally:
            operator.disconnect()
            operator.loop_stop()
            journal.close()
    assert retained == []
    assert {c.name for c in received} == {"open", "no_spin"}
    running_ = [(w["topic"], w["bytes"]) for w in log.at("warning", "too big")]
    if protocol == "5":
        assert start_up == running_ == []
    else:
        size = len(BIG)
        assert start_up == [(f"{BASE}/sequence", size), (f"{BASE}/result", size)]
        # Each retained one (at the connect), then the command: one line each.
        assert sorted(running_) == sorted(
            [(f"{BASE}/sequence", size), (f"{BASE}/result", size), (f"{BASE}/command/close", size)]
        )


async def test_commands_the_broker_kept_for_our_session_are_carried_out_at_reconnect(
    tmp_path: Path, broker: Broker
) -> None:
    """While reading the broker's memory at a reconnect, a command the broker kept for us
    is handed on, never dropped (found: a no_spin sent across a broker restart went
    unanswered)."""
    seen: list[str] = []

    async def on_command(command: OperatorCommand) -> dict[str, Any]:
        seen.append(command.name)
        return {"ok": True}

    journal = Journal(tmp_path / "journal.sqlite")
    operator = operator_client(broker.port)
    try:
        publisher = Publisher(config(broker.port), journal, on_command=on_command, log=Log())
        async with running(publisher):
            await until(lambda: publisher.listening, "the publisher subscribed to commands")
        # Away now; its session keeps the subscription and what comes for it.
        for name in ("open", "close"):
            send_command(operator, name)
        again = Publisher(config(broker.port), journal, on_command=on_command, log=Log())
        async with running(again):
            await until(lambda: len(seen) == 2, "the commands kept for the session")
        assert seen == ["open", "close"]
    finally:
        operator.loop_stop()
        journal.close()
