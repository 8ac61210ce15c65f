"""``PackedOnce``: the MQTT 5 properties every outbox entry goes with, made and packed
once. What goes on the wire is what paho packs for the properties it copies."""

from __future__ import annotations

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wheeld.shell.mqtt_client import PackedOnce


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
