"""``repeated_no_spins``: no-spins of one cause, one after another."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from wheeld.core.game import NoSpin, Result
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import GONE, Alert, Verdict
from wheeld.table.keys import AlertKeys


class RepeatedNoSpinsKeys(AlertKeys):
    repeated_no_spins: int = Field(
        default=3,
        ge=2,
        le=100,
        description="This many no-spins of one cause in a row set the `repeated_no_spins` alert.",
    )


class RepeatedNoSpins(Alert):
    """Set at ``repeated_no_spins`` no-spins of one cause in a row; cleared by a result or
    a no-spin of another cause."""

    code = "repeated_no_spins"
    keys = RepeatedNoSpinsKeys

    def __init__(self, keys: RepeatedNoSpinsKeys, statistics: Statistics | None = None) -> None:
        self.threshold = keys.repeated_no_spins
        #: The no-spin cause repeating now, and how many times in a row.
        self.run: tuple[str | None, int] = (None, 0)

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        if isinstance(outcome, NoSpin):
            same = self.run[0] == outcome.reason
            self.run = (outcome.reason, self.run[1] + 1 if same else 1)
        else:
            self.run = (None, 0)
        reason, count = self.run
        if count >= self.threshold:
            return Verdict(True, {"reason": reason, "count": count})
        if count in {0, 1}:
            return GONE
        return None

    def gone(self) -> bool:
        return self.run[1] < self.threshold

    def restore(self, detail: Mapping[str, Any]) -> None:
        # The run goes on from where it stood: one more no-spin of that cause is no new one.
        if isinstance(detail.get("reason"), str) and type(detail.get("count")) is int:
            self.run = (detail["reason"], detail["count"])
