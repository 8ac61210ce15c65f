"""``games_per_hour``: the recent rate of play against a floor and a ceiling."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from wheeld.core.game import NoSpin, Result
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import Alert, Verdict, above_minimum, outside
from wheeld.table.keys import AlertKeys


class GamesPerHourKeys(AlertKeys):
    games_per_hour_min: float | None = Field(
        default=None,
        gt=0,
        le=200,
        description="The rate of play under this sets the `games_per_hour` alert. Games an "
        "hour over the last 30 games, pauses over 15 minutes left out; unset: not judged.",
    )
    games_per_hour_max: float | None = Field(
        default=None,
        gt=0,
        le=200,
        description="The rate of play over this sets the `games_per_hour` alert. Above "
        "`games_per_hour_min`; unset: not judged.",
    )

    @field_validator("games_per_hour_max")
    @classmethod
    def _rate_above_minimum(cls, value: float | None, info: ValidationInfo) -> float | None:
        return above_minimum(value, info.data.get("games_per_hour_min"))


class GamesPerHour(Alert):
    """Set while the recent rate of play is outside ``games_per_hour_min``/``max``."""

    code = "games_per_hour"
    keys = GamesPerHourKeys

    def __init__(self, keys: GamesPerHourKeys, statistics: Statistics | None) -> None:
        self.low, self.high = keys.games_per_hour_min, keys.games_per_hour_max
        self.statistics = statistics

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        if self.statistics is None or (self.low is None and self.high is None):
            return None
        rate = self.statistics.recent_rate()["rate"]
        if rate is None:
            return None
        if outside(rate, self.low, self.high):
            return Verdict(True, {"rate": rate, "min": self.low, "max": self.high})
        return Verdict(False, {})

    def gone(self) -> bool:
        return self.low is None and self.high is None
