"""The rule parameters: the ``[rules]`` section of the configuration.

Every duration has bounds, and the durations are checked against each other,
so that no valid configuration voids every game: each bound says which
cadence of the wheel it must clear (``docs/configuration.md`` lists them).
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

#: The regulations' floor: "no ha dado como mínimo tres (3) vueltas".
MIN_BALL_REVOLUTIONS_FLOOR = 3
#: A ball leaves the rim after some 8 to 15 revolutions: a higher minimum voids
#: nearly every game.
MIN_BALL_REVOLUTIONS_CEILING = 15
#: "vuelva a lanzarla una vez que la ruleta ha girado al menos 3 vueltas".
RESPIN_ROTOR_REVOLUTIONS = 3
#: The longest a ball takes from its last pass of the sensor to a pocket: one
#: slow last revolution (about 2 s) and the drop. ``result_timeout_ms`` counts
#: from that last pass, so it must leave this much room before ``settle_ms``.
BALL_DROP_MS = 4000
#: A wheel is expected to send something at least every 500 ms (a heartbeat or
#: a status frame, whatever its protocol); the link timeout must outlast three.
FRAME_INTERVAL_MS = 500
LINK_TIMEOUT_FLOOR_MS = 3 * FRAME_INTERVAL_MS


def cross_field_error(key: str, message: str) -> PydanticCustomError:
    """A problem between keys, blamed on ``key`` (dotted, relative to the model)."""
    return PydanticCustomError("cross_field", message, {"key": key})


class RulesConfig(BaseModel):
    """``[rules]``: the rule parameters; durations in milliseconds (wheel time, except the
    link). Each bound keeps a valid configuration from voiding every game, or from
    announcing a result the wheel did not give."""

    # Strict: a TOML boolean is not a number of milliseconds (``true`` is not 1).
    # ``defer_build`` as every configuration section; built at import all the same, by
    # ``Config``'s default ``RulesConfig()``.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    min_ball_revolutions: int = Field(
        default=3,
        ge=MIN_BALL_REVOLUTIONS_FLOOR,
        le=MIN_BALL_REVOLUTIONS_CEILING,
        description="Revolutions the ball must complete. Regulations refuse fewer than 3; a "
        "ball leaves the rim after some 8 to 15 revolutions, so a higher minimum would void "
        "nearly every game.",
    )
    #: A bouncing ball rests up to some 400 ms in a pocket before it hops on:
    #: below 500 ms a bounce can be announced as the result;
    #: automatic wheels start the next game some 2 s after the ball rests, and
    #: a longer settle time would void every game when the rotor reverses.
    settle_ms: int = Field(
        default=1000,
        ge=500,
        le=2_000,
        description="How long a pocket reading must hold (wheel time). A bouncing ball rests "
        "up to some 400 ms in a pocket before it hops on, so less could announce a bounce; "
        "automatic wheels start the next game some 2 s after the ball rests (the rotor "
        "reverses), so more would void every game.",
    )
    #: The ball's first revolution takes some 600 ms and it leaves the rim near
    #: 2 s; outside 500..5000 the threshold closes betting at the first pass or
    #: only ever at the drop.
    no_more_bets_period_ms: int = Field(
        default=1400,
        ge=500,
        le=5_000,
        description="The ball's period that closes betting. The ball's first revolution "
        "takes some 600 ms and it leaves the rim near 2 s: outside these bounds betting "
        "closes at the first pass or only ever at the drop.",
    )
    #: At least ``settle_ms + BALL_DROP_MS`` (checked below) and the 5 s sensor
    #: timeout of wheels that judge their own games; two minutes is past any ball.
    result_timeout_ms: int = Field(
        default=15000,
        ge=5_000,
        le=120_000,
        description="`ball_not_settled` after this long without a pass or a rest. At least "
        "`settle_ms` + 4000: it counts from the ball's last pass, and the ball may take a "
        "slow last revolution (about 2 s) and the drop before it rests, then must hold "
        "`settle_ms`; the Cammegh SS2's own sensor timeout is 5 s.",
    )
    #: The slowest rotor (15 rpm) takes 4 s a revolution.
    rotor_timeout_ms: int = Field(
        default=8000,
        ge=5_000,
        le=60_000,
        description="`rotor_stopped` after this long without a rotor datum. The slowest "
        "rotor, 15 rpm, takes 4 s a revolution.",
    )
    #: Host time; see ``LINK_TIMEOUT_FLOOR_MS``. A minute of silence is a lost link.
    link_timeout_ms: int = Field(
        default=2000,
        ge=LINK_TIMEOUT_FLOOR_MS,
        le=60_000,
        description="`wheel_link_lost` after this long without a frame (host time). Both "
        "protocols send a frame at least every 500 ms (WRP/1 `HBT`, SS2 status with mode "
        "bit 128): the timeout outlasts three, so one late frame voids nothing. A polled "
        "Cammegh SS2 (`wheel.control.enabled`, an `operating_mode` without bit 128) needs at "
        "least 3 x `wheel.control.poll_s`: it speaks only when polled.",
    )

    @model_validator(mode="after")
    def _room_to_settle(self) -> Self:
        if self.result_timeout_ms < self.settle_ms + BALL_DROP_MS:
            raise cross_field_error(
                "result_timeout_ms",
                f"must be at least settle_ms + {BALL_DROP_MS} "
                f"({self.settle_ms + BALL_DROP_MS}), or a ball that drops on its last "
                "revolution is voided before its settle time ends",
            )
        return self
