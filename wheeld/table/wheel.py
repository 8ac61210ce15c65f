"""What the table knows of its wheel, for the retained ``<base>/wheel``: the link,
the wheel's identity (``WheelHello``) and what its driver said of its output
(``WheelProfile``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wheeld.core.events import WheelHello


class WheelFacts:
    """One wheel: its link, its identity and its profile."""

    def __init__(self, driver: str, port: str, order: tuple[str, ...] | None = None) -> None:
        self.driver = driver
        self.port = port
        #: A custom pocket order (``wheel.pocket_order``), clockwise; None: the standard one.
        self.order = order
        self.link_up = False
        #: What the wheel said of itself (model, firmware, serial, its pockets).
        self.info: dict[str, Any] = {}
        #: What the driver said of the wheel's output (``WheelProfile``).
        self.profile: dict[str, Any] = {}

    def hello(self, event: WheelHello) -> None:
        """The wheel said who it is."""
        self.info.update(
            model=event.model,
            firmware=event.firmware,
            serial=event.serial,
            wheel_pockets=event.pockets,
        )

    def profiled(self, facts: Mapping[str, Any]) -> bool:
        """The driver said ``facts`` of the wheel's output: True when that changed anything."""
        if self.profile == {**self.profile, **facts}:
            return False
        self.profile.update(facts)
        return True

    def state(
        self, pockets: int, counters: dict[str, int], refused: Mapping[tuple[str, str], int]
    ) -> dict[str, Any]:
        """The wheel's state as ``<base>/wheel`` says it (without its time and version)."""
        refused_events = {f"{phase}/{name}": count for (phase, name), count in refused.items()}
        return {
            "link": "up" if self.link_up else "down",
            "driver": self.driver,
            "port": self.port,
            "model": self.info.get("model"),
            "firmware": self.info.get("firmware"),
            "serial": self.info.get("serial"),
            "pockets": pockets,
            # Said only when custom: what the statistics' arcs and sectors were taken by.
            **({"pocket_order": list(self.order)} if self.order else {}),
            **self.profile,
            "counters": counters,
            "refused_events": refused_events,
        }
