"""The rule parameters: the ``[rules]`` section of the configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The regulations' floor: "no ha dado como mínimo tres (3) vueltas".
MIN_BALL_REVOLUTIONS_FLOOR = 3
#: "vuelva a lanzarla una vez que la ruleta ha girado al menos 3 vueltas".
RESPIN_ROTOR_REVOLUTIONS = 3


class RulesConfig(BaseModel):
    """Rule parameters; durations in milliseconds (wheel time, except the link)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_ball_revolutions: int = Field(
        default=3,
        ge=MIN_BALL_REVOLUTIONS_FLOOR,
        le=1000,
        description="revolutions the ball must complete; regulations refuse fewer than 3",
    )
    settle_ms: int = Field(default=1000, ge=0, le=60_000)
    no_more_bets_period_ms: int = Field(default=1400, ge=1, le=60_000)
    result_timeout_ms: int = Field(default=15000, ge=1, le=600_000)
    rotor_timeout_ms: int = Field(default=8000, ge=1, le=600_000)
    link_timeout_ms: int = Field(default=2000, ge=1, le=600_000)
