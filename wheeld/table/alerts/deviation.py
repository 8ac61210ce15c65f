"""``deviation``: the whole result series against a fair wheel, a chi-squared test."""

from __future__ import annotations

from pydantic import Field

from wheeld.core.game import NoSpin, Result
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import GONE, Alert, Verdict
from wheeld.table.keys import AlertKeys


class DeviationKeys(AlertKeys):
    deviation_p_value: float = Field(
        default=0.001,
        gt=0,
        le=0.05,
        description="A chi-squared p-value under this, over the whole result series, sets "
        "the `deviation` alert. Judged only once every expected count is at least 5 "
        "(docs/statistics.md); above 0.05 it would be set on a fair wheel one time in "
        "twenty.",
    )


class Deviation(Alert):
    """Set while the series' p-value is under ``deviation_p_value``."""

    code = "deviation"
    keys = DeviationKeys

    def __init__(self, keys: DeviationKeys, statistics: Statistics | None) -> None:
        self.threshold = keys.deviation_p_value
        self.statistics = statistics

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        if self.statistics is None or not isinstance(outcome, Result):
            return None
        test = self.statistics.chi_squared
        if test.p_value is None:
            return None  # too few games to judge
        if test.p_value < self.threshold:
            return Verdict(True, {"p_value": test.p_value, "games": test.games})
        return GONE

    def gone(self) -> bool:
        if self.statistics is None:
            return False
        p_value = self.statistics.chi_squared.p_value
        return p_value is None or p_value >= self.threshold
