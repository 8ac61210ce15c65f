"""``<base>/status``: who says the table is online, and the rival who says it too.

``{"state": "online", "instance": "<host>:<state dir>", "schema_version": 1}``,
retained, said on every connect (a fault replaces ``online``), ``offline`` at a
clean stop and as the last will. Another instance's status online for the
same table is a second wheeld: one of the two stands down (``RivalDaemon``,
exit ``EX_CONFIG``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wheeld.config import split_server
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.shell.properties import INSTANCE_PROPERTY

if TYPE_CHECKING:
    from paho.mqtt.properties import Properties

    from wheeld.config import Config

ONLINE = json.dumps({"state": "online"})
OFFLINE = json.dumps({"state": "offline"})
#: sysexits EX_CONFIG: systemd does not restart a daemon that exits with it
#: (RestartPreventExitStatus=78 in the units).
EX_CONFIG = 78


class RivalDaemon(Exception):
    """Another wheeld is online for this table: this one must not start (exit EX_CONFIG)."""


def rival_error(config: Config, other: str) -> RivalDaemon:
    """What the daemon says, and exits 78 with, when another wheeld runs the table."""
    # A status no will clears (a broker that died with the other connected, or one
    # published by hand) refused the table for ever, the line promising it would clear.
    where = "-h BROKER"
    if len(config.mqtt.brokers) == 1:
        where = "-h {} -p {}".format(*split_server(config.mqtt.brokers[0]))
    return RivalDaemon(
        f"another wheeld ({other}) is online for table {config.table.id} "
        f"(retained {config.base_topic}/status): only one may run per table id; "
        "stop that one, or give this one its own table.id. If it is gone, its last will "
        f"clears this within about {2 * config.mqtt.keepalive_s:g} s (1.5 x mqtt.keepalive_s "
        "and the broker's own check): "
        "start again then; if it stays, once sure that wheeld is gone, clear it: "
        f"mosquitto_pub {where} -t {config.base_topic}/status -r -n"
    )


def status_json(payload: str | bytes, instance: str) -> str:
    """A status payload as published: ``state`` first, then its other members,
    who says it (``instance``, when known) and ``schema_version``.

    Whoever built it (the pipeline's fault, our own ``online``), it says the same.
    """
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
    if not isinstance(body, dict):
        return json.dumps(body)
    stamped = {"state": body.pop("state", None), **body}
    stamped.pop("instance", None)
    stamped.pop("schema_version", None)
    if instance:
        stamped["instance"] = instance
    stamped["schema_version"] = SCHEMA_VERSION
    return json.dumps(stamped)


class Presence:
    """What we say on ``<base>/status``, and whom else we hear saying it."""

    def __init__(
        self,
        config: Config,
        instance: str,
        log: Any,
        on_rival: Callable[[str], None] | None = None,
    ) -> None:
        self._config = config
        self._log = log
        #: Told the instance of another wheeld this one stands down for (exit 78).
        self._on_rival = on_rival
        #: Who we are (host and state directory): a status that names another
        #: instance means a second wheeld publishes for the table.
        self.instance = instance
        #: The retained status said on every connect (a fault replaces ``online``).
        self.payload: str | bytes = ONLINE
        #: Another wheeld seen publishing this table's status, if any.
        self.rival: str | None = None

    def said(self, payload: str | bytes) -> str:
        """``payload`` as published, who says it stamped in."""
        return status_json(payload, self.instance)

    def offline(self) -> str:
        return status_json(OFFLINE, self.instance)

    def heard(
        self, payload: bytes, properties: Properties | None, *, connecting: bool = False
    ) -> None:
        """A status on ``<base>/status``: ours, or another wheeld's for the same table.

        Another instance online when we (re)connect took the table while we were
        away: we stand down (``on_rival``: the daemon stops, exit 78). Heard while
        we run (two started at once, both past the check at start), the one of the
        two whose instance name sorts last stands down, so exactly one goes on.
        """
        try:
            body = json.loads(payload)
        except (ValueError, RecursionError):  # nested too deep: not a status either
            return
        if not isinstance(body, dict):
            return
        named = dict(getattr(properties, "UserProperty", None) or [])
        other = body.get("instance", named.get(INSTANCE_PROPERTY))
        if body.get("state") == "offline":
            if other is None or other == self.rival:
                self.rival = None  # whoever it was has stopped (clean stop or last will)
            return
        if not isinstance(other, str) or other in (self.instance, self.rival):
            return
        self.rival = other[:200]
        yields = connecting or self.instance > other
        self._log.error(
            "another wheeld publishes for this table: only one may run per table id; "
            "stop one of them, or give each its own table.id",
            table=self._config.table.id,
            client_id=self._config.client_id,
            other_instance=self.rival,
            this_instance=self.instance,
            standing_down=yields,
        )
        if yields and self._on_rival is not None:
            self._on_rival(self.rival)
