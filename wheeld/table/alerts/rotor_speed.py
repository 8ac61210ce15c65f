"""``rotor_speed``: the rotor's speed at launch, where the wheel reports it."""

from __future__ import annotations

import math

from pydantic import Field, ValidationInfo, field_validator

from wheeld.core.game import NoSpin, Result
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import Alert, Verdict, above_minimum, outside
from wheeld.table.keys import AlertKeys


class RotorSpeedKeys(AlertKeys):
    rotor_rpm_min: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="The rotor's speed at launch under this sets the `rotor_speed` alert. "
        "Where the wheel reports it (`rotor_rpm`: the Cammegh SS2 does, WRP/1 does not); "
        "unset: not judged.",
    )
    rotor_rpm_max: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="The rotor's speed at launch over this sets the `rotor_speed` alert. "
        "Above `rotor_rpm_min`; unset: not judged.",
    )

    @field_validator("rotor_rpm_max")
    @classmethod
    def _rpm_above_minimum(cls, value: float | None, info: ValidationInfo) -> float | None:
        return above_minimum(value, info.data.get("rotor_rpm_min"))


class RotorSpeed(Alert):
    """Set by a game whose rotor turned outside ``rotor_rpm_min``/``max`` at launch
    (the outcome's ``rotor_rpm``), cleared by one inside."""

    code = "rotor_speed"
    keys = RotorSpeedKeys

    def __init__(self, keys: RotorSpeedKeys, statistics: Statistics | None = None) -> None:
        self.low, self.high = keys.rotor_rpm_min, keys.rotor_rpm_max

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        reported = outcome.extra.get("rotor_rpm")
        if (self.low is None and self.high is None) or not isinstance(reported, int | float):
            return None
        if isinstance(reported, bool) or not math.isfinite(reported):
            return None  # a stray true or a NaN is no speed
        rpm = float(reported)
        if outside(rpm, self.low, self.high):
            detail = {"rpm": rpm, "min": self.low, "max": self.high, "game_id": outcome.game_id}
            return Verdict(True, detail)
        return Verdict(False, {})

    def gone(self) -> bool:
        return self.low is None and self.high is None
