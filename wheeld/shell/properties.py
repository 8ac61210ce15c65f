"""The MQTT 5 properties of what the daemon publishes (none on MQTT 3.1.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paho.mqtt.properties import Properties

#: The MQTT 5 user property on <base>/status naming the daemon that said it
#: (the payload's ``instance`` says it too, on MQTT 3.1.1 as well).
INSTANCE_PROPERTY = "wheeld-instance"


def json_properties(protocol: str) -> Properties | None:
    """A JSON payload's: its content type and that it is UTF-8."""
    if protocol != "5":
        return None
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.ContentType = "application/json"
    properties.PayloadFormatIndicator = 1
    return properties


def status_properties(protocol: str, instance: str) -> Properties | None:
    """The status's: JSON, and who we are, as user property."""
    properties = json_properties(protocol)
    if properties is not None and instance:
        properties.UserProperty = [(INSTANCE_PROPERTY, instance)]
    return properties
