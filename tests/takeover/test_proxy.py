"""The proxy itself: it reads MQTT 3.1.1 and 5, passes everything on in order, and cuts
where it is armed to, before or after the broker has the PUBLISH, killing the process
it names and leaving the client's last will to the broker."""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.takeover.proxy import (
    Cut,
    MalformedPacket,
    Mode,
    MqttProxy,
    parse_publish,
    take_packet,
)
from wheeld.testing.rig import Broker, Subscriber, wait_for

BASE = "proxy-test"
GAME = f"{BASE}/game"
STATUS = f"{BASE}/status"
PROTOCOLS = {"3.1.1": paho.MQTTv311, "5": paho.MQTTv5}


@contextlib.contextmanager
def _client(port: int, protocol: str) -> Iterator[paho.Client]:
    """A client through the proxy, with a retained last will on ``STATUS``."""
    client = paho.Client(
        CallbackAPIVersion.VERSION2, client_id=f"proxied-{protocol}", protocol=PROTOCOLS[protocol]
    )
    client.will_set(STATUS, b"offline", qos=1, retain=True)
    client.connect("127.0.0.1", port, keepalive=5)
    client.loop_start()
    try:
        wait_for(client.is_connected, 10, "the client to connect through the proxy")
        yield client
    finally:
        client.loop_stop()
        with contextlib.suppress(Exception):
            client.disconnect()


@contextlib.contextmanager
def _watching(broker: Broker) -> Iterator[Subscriber]:
    """A subscriber on the broker itself, its subscription proven by a retained probe."""
    watcher = Subscriber(broker.port, f"{BASE}/#")
    try:
        watcher.client.publish(f"{BASE}/probe", b"{}", qos=1, retain=True)
        wait_for(lambda: watcher.on(f"{BASE}/probe"), 10, "the watcher's probe")
        yield watcher
    finally:
        watcher.close()


@contextlib.contextmanager
def _victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process for the proxy to kill."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_publish_is_read_and_passed_on(broker: Broker, protocol: str) -> None:
    proxy = MqttProxy(broker.port, game_topic=GAME)
    proxy.label = "the label"
    try:
        with _watching(broker) as watcher, _client(proxy.port, protocol) as client:
            properties = None
            if protocol == "5":
                properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                properties.ContentType = "application/json"
                properties.UserProperty = [("operator", "maria")]
            sent = [
                (f"{BASE}/a", b"one", 0, False),
                (f"{BASE}/b", b'{"x": 1}', 1, True),
                (f"{BASE}/c", b"three", 1, False),
            ]
            for topic, payload, qos, retain in sent:
                client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
            wait_for(lambda: watcher.on(f"{BASE}/c"), 10, "the last message at the broker")
            assert watcher.on(f"{BASE}/a") == [b"one"]
            assert watcher.on(f"{BASE}/b") == [{"x": 1}]
        got = [
            (r.publish.topic, r.publish.payload, r.publish.qos, r.publish.retain)
            for r in proxy.records
        ]
        assert got == sent
        assert all(r.forwarded and r.label == "the label" for r in proxy.records)
        assert {r.client_id for r in proxy.records} == {f"proxied-{protocol}"}
    finally:
        proxy.close()


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("mode", ["before", "after"])
@pytest.mark.parametrize("qos", [0, 1])
def test_a_cut_kills_at_its_publish(broker: Broker, protocol: str, mode: Mode, qos: int) -> None:
    proxy = MqttProxy(broker.port, game_topic=GAME)
    try:
        with _watching(broker) as watcher, _victim() as victim:
            proxy.arm(Cut(f"{BASE}/x", 2, ("spinning",), mode), victim.pid)
            with _client(proxy.port, protocol) as client:
                client.publish(GAME, json.dumps({"event": "spinning"}), qos=1)
                infos = [client.publish(f"{BASE}/x", str(n), qos=qos) for n in (1, 2, 3)]
                wait_for(lambda: victim.poll() is not None, 10, "the victim to be killed")
                # The connection is reset, never closed with DISCONNECT: the will goes out.
                wait_for(lambda: watcher.on(STATUS) == [b"offline"], 10, "the client's will")
                if mode == "after" and qos == 1:
                    assert not infos[1].is_published(), "the client saw the broker take it"
            reached = [int(p) for p in watcher.on(f"{BASE}/x")]
            assert reached == ([1] if mode == "before" else [1, 2])
            assert victim.returncode == -9
        (fired,) = proxy.fired
        assert fired.record.publish.payload == b"2"
        assert fired.record.forwarded is (mode == "after")
        assert [r.publish.payload for r in proxy.records] == [b'{"event": "spinning"}', b"1", b"2"]
    finally:
        proxy.close()


def test_a_cut_waits_for_a_game_of_its_shape(broker: Broker) -> None:
    """It counts from each spinning on, and only in a game whose events so far match."""
    proxy = MqttProxy(broker.port, game_topic=GAME)
    try:
        with _watching(broker) as watcher, _victim() as victim:
            proxy.arm(Cut(f"{BASE}/x", 1, ("spinning", "no_more_bets"), "before"), victim.pid)
            with _client(proxy.port, "5") as client:
                said: list[tuple[str, Any]] = [
                    (f"{BASE}/x", "early"),  # before any game: not counted
                    (GAME, {"event": "spinning"}),
                    (f"{BASE}/x", "only spinning so far"),
                    (GAME, {"event": "spinning"}),
                    (GAME, {"event": "no_more_bets"}),
                    (f"{BASE}/x", "the one"),
                ]
                for topic, payload in said:
                    client.publish(topic, json.dumps(payload), qos=1)
                wait_for(lambda: victim.poll() is not None, 10, "the victim to be killed")
                wait_for(lambda: watcher.on(STATUS) == [b"offline"], 10, "the client's will")
            assert watcher.on(f"{BASE}/x") == ["early", "only spinning so far"]
        (fired,) = proxy.fired
        assert fired.record.publish.payload == b'"the one"'
    finally:
        proxy.close()


def _packet(kind_and_flags: int, body: bytes) -> bytes:
    length, encoded = len(body), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            return bytes([kind_and_flags, *encoded]) + body


def _publish5(topic: str, alias: int, payload: bytes) -> bytes:
    raw = topic.encode()
    properties = bytes([0x23]) + struct.pack("!H", alias)
    body = struct.pack("!H", len(raw)) + raw + struct.pack("!H", 7)
    body += bytes([len(properties)]) + properties + payload
    return _packet(0x32, body)  # PUBLISH, QoS 1


def test_topic_aliases_are_followed() -> None:
    aliases: dict[int, str] = {}
    first = parse_publish(_publish5("t/long/topic", 3, b"a"), 5, aliases)
    second = parse_publish(_publish5("", 3, b"b"), 5, aliases)
    assert (first.topic, first.payload, first.packet_id) == ("t/long/topic", b"a", 7)
    assert (second.topic, second.payload) == ("t/long/topic", b"b")


def test_packets_are_taken_whole_from_any_chunking() -> None:
    packets = [_publish5("a", 1, b"x" * 200), _packet(0xC0, b""), _publish5("b", 2, b"y")]
    stream = b"".join(packets)
    buffer, taken = bytearray(), []
    for byte in stream:
        buffer.append(byte)
        while (packet := take_packet(buffer)) is not None:
            taken.append(packet)
    assert taken == packets
    with pytest.raises(MalformedPacket):
        take_packet(bytearray(b"\x30\xff\xff\xff\xff\x01"))
