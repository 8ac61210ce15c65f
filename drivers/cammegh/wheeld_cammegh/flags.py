"""Cammegh warning flags: the same bit means different things on different products.

The ``f`` field of a ``*X`` status frame is a sum of bits. Which bit means what
depends on the wheel (Mercury 360 and Mercury II, or an SS2 on the V2.07 or V2.10
guide's firmware), so a driver reads it through a :class:`FlagTable` chosen by
model and firmware (``*V`` when the wheel is asked, else the configuration) and
says which one on ``<base>/wheel``. Each bit names a :data:`FlagRole`: what the
driver does with it is the role's, not the bit's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: What a warning bit stands for, whatever its value on a given wheel.
FlagRole = Literal[
    # Rotor speed outside the wheel's limits: the game goes on (logged by the wheel).
    "speed_warning",
    # The ball runs the same way as the rotor: the wheel will not call no more bets.
    "same_direction",
    # Rim sensors lost the ball or failed, a motor or encoder fault: no number.
    "sensor_fault",
    # The wheel voids the game (Mercury 360 game modes: ball out, slow launch, tampering).
    "void_game",
    # The ball is not detected in the wheel (void once it lasts, in state 4).
    "ball_missing",
    # The launch failed (void once it lasts, in state 3; the wheel retries first).
    "launch_failed",
]

FLAG_BITS = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class FlagTable:
    """What each warning bit means on one family of wheels."""

    name: str
    roles: dict[int, FlagRole]

    def role(self, bit: int) -> FlagRole | None:
        """The role of ``bit`` on these wheels (None: a bit they do not use)."""
        return self.roles.get(bit)


MERCURY = FlagTable(
    "mercury",
    {1: "speed_warning", 2: "same_direction", 4: "sensor_fault", 8: "void_game"},
)
SS2_V2_07 = FlagTable(
    "ss2-v2.07",
    {1: "ball_missing", 2: "same_direction", 4: "sensor_fault", 8: "launch_failed"},
)
SS2_V2_10 = FlagTable(
    "ss2-v2.10",
    {1: "ball_missing", 2: "same_direction", 4: "sensor_fault", 8: "launch_failed"},
)
TABLES = {table.name: table for table in (MERCURY, SS2_V2_07, SS2_V2_10)}

_VERSION = re.compile(r"(\d+)\.(\d+)")


def table_for(model: str | None, firmware: str | None) -> FlagTable:
    """The flag table for a wheel's model and firmware (as ``*V`` or the configuration
    names them); a Mercury 360 or Mercury II, or anything unknown, reads the Mercury's."""
    text = (model or "").lower()
    if "ss2" in text or "slingshot" in text:
        found = _VERSION.search(firmware or model or "")
        if found is not None and int(found.group(1)) < 2:
            return SS2_V2_07  # firmware 1.2x, as the V2.07 guide describes it
        return SS2_V2_10
    return MERCURY
