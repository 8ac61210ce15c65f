"""``direction_unchanged``: launches in a row with the rotor turning as at the last result."""

from __future__ import annotations

from pydantic import Field

from wheeld.core.game import NoSpin, Result, Spinning
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import GONE, Alert, Verdict
from wheeld.table.keys import AlertKeys


class DirectionUnchangedKeys(AlertKeys):
    direction_unchanged: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="This many launches in a row with the rotor turning as at the last "
        "result set the `direction_unchanged` alert. Unset: not judged.",
    )


class DirectionUnchanged(Alert):
    """Set at ``direction_unchanged`` launches in a row turning as at the last result;
    cleared by a launch that turns the other way."""

    code = "direction_unchanged"
    keys = DirectionUnchangedKeys

    def __init__(self, keys: DirectionUnchangedKeys, statistics: Statistics | None = None) -> None:
        self.threshold = keys.direction_unchanged
        #: The last result's rotor direction, and launches in a row turning the same way.
        self.run: tuple[str | None, int] = (None, 0)

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        if isinstance(outcome, Result) and outcome.rotor_direction is not None:
            self.run = (outcome.rotor_direction, 0)
        return None

    def on_launch(self, launch: Spinning) -> Verdict | None:
        if self.threshold is None or launch.rotor_direction is None:
            return None
        last, count = self.run
        if last is None:
            return None  # no result yet to alternate from
        count = count + 1 if launch.rotor_direction == last else 0
        self.run = (last, count)
        if count >= self.threshold:
            return Verdict(True, {"rotor_direction": last, "count": count})
        if count == 0:
            return GONE
        return None

    def gone(self) -> bool:
        return self.threshold is None
