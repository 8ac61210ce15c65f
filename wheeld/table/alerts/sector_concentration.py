"""``sector_concentration``: the most-hit arc of neighbouring pockets (docs/statistics.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from wheeld.core.game import NoSpin, Result
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import Alert, Verdict
from wheeld.table.keys import AlertKeys


class SectorConcentrationKeys(AlertKeys):
    sector_p_value: float | None = Field(
        default=None,
        gt=0,
        le=0.05,
        description="The most-hit arc's p-value under this sets the `sector_concentration` "
        "alert. An exact binomial test, Bonferroni-corrected; unset: not judged.",
    )
    sector_min_games: int = Field(
        default=370,
        ge=37,
        le=1_000_000,
        description="Results a series (all, or one rotor direction) needs before its arcs "
        "are judged. At least one game a pocket.",
    )
    sector_arcs: list[int] = Field(
        default_factory=lambda: [3, 5, 9],
        min_length=1,
        max_length=8,
        description="The sizes of the arcs of neighbouring pockets `wheeld stats` and "
        "`<base>/stats` report and the alert judges. 1 to 36 pockets each, each size once.",
    )

    @field_validator("sector_arcs")
    @classmethod
    def _sector_arcs(cls, value: list[int]) -> list[int]:
        if any(not 1 <= k <= 36 for k in value) or len(set(value)) != len(value):
            raise ValueError("each arc is 1 to 36 pockets, each size once")
        return value


class SectorConcentration(Alert):
    """Set while the most-hit arc's p-value is under ``sector_p_value`` (the statistics
    count the arcs ``sector_arcs`` names)."""

    code = "sector_concentration"
    keys = SectorConcentrationKeys

    def __init__(self, keys: SectorConcentrationKeys, statistics: Statistics | None) -> None:
        self.threshold = keys.sector_p_value
        self.min_games = keys.sector_min_games
        self.statistics = statistics

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        if self.statistics is None or not isinstance(outcome, Result) or self.threshold is None:
            return None
        found = self.statistics.sector_concentration(self.min_games)
        if found is None:
            return None
        if found.p_value >= self.threshold:
            return Verdict(False, {})
        detail: dict[str, Any] = {
            "pockets": list(found.pockets),
            "rotor_direction": found.family,
            "count": found.count,
            "games": found.results,
            "p_value": found.p_value,
        }
        return Verdict(True, detail)

    def gone(self) -> bool:
        if self.threshold is None:
            return True
        if self.statistics is None:
            return False
        found = self.statistics.sector_concentration(self.min_games)
        return found is None or found.p_value >= self.threshold
