"""The daemon's MQTT client: ``PackedOnce``, the MQTT 5 properties every outbox entry goes
with, made and packed once (what goes on the wire is what paho packs for the properties
it copies); and a QoS 1 publish written at once, not turns of the event loop later."""

from __future__ import annotations

import asyncio
import selectors
import socket

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wheeld.config import Config
from wheeld.shell.mqtt_client import PackedOnce, make_client
from wheeld.testing.rig import Broker


def _status_properties() -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.ContentType = "application/json"
    properties.PayloadFormatIndicator = 1
    properties.UserProperty = [("wheeld-instance", "host:/var/lib/wheeld")]
    return properties


def test_packed_once_packs_as_paho_packs_what_it_copies() -> None:
    made = _status_properties()
    packed = PackedOnce(made)
    assert packed.pack() == made.pack()  # type: ignore[no-untyped-call]
    assert packed.pack() is packed.pack()  # packed when made, not per publish
    assert getattr(packed, "ContentType") == "application/json"  # noqa: B009
    assert getattr(packed, "UserProperty") == [  # noqa: B009
        ("wheeld-instance", "host:/var/lib/wheeld")
    ]
    assert packed.packetType == PacketTypes.PUBLISH


def test_packed_once_of_no_properties_packs_none() -> None:
    empty = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    assert PackedOnce(empty).pack() == b"\x00"


async def test_a_publish_leaves_before_the_loop_turns_again(broker: Broker) -> None:
    """Written by the publish itself: nothing else the loop runs next comes first."""
    config = Config.model_validate({"mqtt": {"servers": [f"127.0.0.1:{broker.port}"]}})
    async with make_client(config, client_id="") as client:
        publishing = asyncio.ensure_future(client.publish_acknowledged("t/now", b"x"))
        left: list[bool] = []
        # Runs after the publish's first step, in the same turn of the loop.
        asyncio.get_running_loop().call_soon(lambda: left.append(not client._client.want_write()))
        code = await publishing
        assert left == [True] and not code.is_failure
        # Nothing left to write, no writer left registered: a writer on an always-writable
        # socket would spin the loop.
        for _ in range(3):
            await asyncio.sleep(0)
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        sock = client._client.socket()
        assert sock is not None
        key = selector.get_map().get(sock.fileno())
        assert key is None or not key.events & selectors.EVENT_WRITE


async def test_a_publish_registers_no_writer_unless_the_socket_leaves_some_unwritten(
    broker: Broker,
) -> None:
    """A publish the socket takes whole costs no writer registered and removed (two
    epoll_ctl calls a message); one it does not take whole still gets out, by a writer."""
    config = Config.model_validate({"mqtt": {"servers": [f"127.0.0.1:{broker.port}"]}})
    async with make_client(config, client_id="") as client:
        loop = asyncio.get_running_loop()
        registered: list[int] = []
        add_writer = loop.add_writer

        def counting(fd: int, callback: object, *args: object) -> None:
            registered.append(fd)
            add_writer(fd, callback, *args)  # type: ignore[arg-type]

        loop.add_writer = counting  # type: ignore[method-assign, assignment]
        try:
            for index in range(5):
                code = await client.publish_acknowledged("t/small", b"%d" % index)
                assert not code.is_failure
            assert registered == []
            # A send buffer of a few KiB: a MiB is more than it takes at once (left at
            # the kernel's own, a loopback socket once took 32 MiB whole, the broker
            # reading as fast: found by CI).
            sending = client._client.socket()
            assert isinstance(sending, socket.socket)
            sending.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            big = b"x" * (1024 * 1024)
            code = await asyncio.wait_for(client.publish_acknowledged("t/big", big), 30)
            assert not code.is_failure and registered, "the rest went by a writer"
        finally:
            loop.add_writer = add_writer  # type: ignore[method-assign]
        for _ in range(3):
            await asyncio.sleep(0)
        selector = loop._selector  # type: ignore[attr-defined]
        sock = client._client.socket()
        assert sock is not None
        key = selector.get_map().get(sock.fileno())
        assert key is None or not key.events & selectors.EVENT_WRITE


async def test_the_end_of_a_cancelled_connect_says_nothing() -> None:
    """A stop or a Ctrl-C cancels a connect as paho sees the socket close: aiomqtt asked
    the cancelled future for its exception, a CancelledError traceback on stderr from
    paho's callback (found by the Ctrl-C test during the demo's start, under load)."""
    from typing import Any

    import paho.mqtt.client as paho
    from paho.mqtt.reasoncodes import ReasonCode

    config = Config.model_validate({"table": {"id": "T1"}, "mqtt": {"port": 1}})
    client = make_client(config, client_id="")
    client._connected.cancel()  # what a cancelled __aenter__ leaves
    await asyncio.sleep(0)
    on_disconnect: Any = client._client.on_disconnect  # paho's call, as in _do_on_disconnect
    on_disconnect(
        client._client, None, paho.DisconnectFlags(False), ReasonCode(PacketTypes.DISCONNECT)
    )
    assert not client._disconnected.done()
