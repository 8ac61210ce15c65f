"""The open game: what a game under way holds, and what it decides as the wheel reports.

A game lives from its launch to its end. It counts the ball's revolutions,
keeps the pocket the ball rests in, closes betting, and judges its own rules:
what a launch breaks at once, the wheel-time timers (``settle_ms`` of rest
make the result; a ball or rotor silent too long voids the game), too few
revolutions. It never touches the engine's state: a decision that ends the
game (a ``Result`` or a ``NoSpin``) is returned, and the engine
(``engine.GameEngine``) announces it, closes the game and moves its state on;
one that does not (``NoMoreBets``) is appended to ``out`` as it is made.

Pure like the engine: wheel time comes with the events, host time is handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wheeld.core.game import NoMoreBets, NoSpin, Result, in_rule_order
from wheeld.core.rules import RESPIN_ROTOR_REVOLUTIONS

if TYPE_CHECKING:
    from wheeld.core.events import (
        BallLaunched,
        BallPassed,
        Direction,
        PocketReading,
        WinningNumber,
    )
    from wheeld.core.game import Decision, ReasonCode
    from wheeld.core.layout import WheelLayout
    from wheeld.core.rules import RulesConfig

_TICK_MASK = (1 << 32) - 1
_HALF_TICK_RANGE = 1 << 31


def ticks_since(now: int, then: int) -> int:
    """Wheel milliseconds from ``then`` to ``now`` on the wrapping 32-bit clock."""
    elapsed = (now - then) & _TICK_MASK
    # A tick slightly behind the reference (reordering, a sloppy head) is "no
    # time", not four billion milliseconds.
    return 0 if elapsed >= _HALF_TICK_RANGE else elapsed


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The rule parameters a game is judged by, copied once from ``RulesConfig``: the
    hot path reads plain ints on every event of a game, not model attributes."""

    min_revolutions: int
    settle_ms: int
    no_more_bets_ms: int
    result_timeout_ms: int
    rotor_timeout_ms: int

    @classmethod
    def of(cls, rules: RulesConfig) -> Thresholds:
        return cls(
            rules.min_ball_revolutions,
            rules.settle_ms,
            rules.no_more_bets_period_ms,
            rules.result_timeout_ms,
            rules.rotor_timeout_ms,
        )


@dataclass(slots=True)
class OpenGame:
    """A game under way (one per launch, never one per frame)."""

    game_id: int
    rotor_direction: Direction | None
    ball_direction: Direction | None
    last_ball_tick: int
    #: False for wheels that do not stream ball passes: revolutions are unknown.
    counted: bool = True
    revolutions: int = 0
    no_more_bets: bool = False
    #: The wheel itself called no more bets (its threshold stands in for a count).
    wheel_closed_betting: bool = False
    #: False when the wheel's output never reports the rotor: unknown is not stopped.
    rotor_reported: bool = True
    #: False when the wheel is silent between its events: silence is not a lost link.
    link_judged: bool = True
    #: The pocket the ball rests in, and the wheel time it came to rest there.
    candidate: str | None = None
    candidate_tick: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    thresholds: Thresholds = field(kw_only=True)

    @classmethod
    def reported(cls, event: BallLaunched, game_id: int, thresholds: Thresholds) -> OpenGame:
        """A launch the wheel reported itself, with what its output can and cannot show."""
        return cls(
            game_id,
            event.rotor_direction,
            event.ball_direction,
            event.tick,
            counted=event.counts_revolutions,
            extra=dict(event.extra),
            rotor_reported=event.rotor_reported,
            link_judged=event.link_judged,
            thresholds=thresholds,
        )

    def faults_at_launch(
        self, last_result_rotor: Direction | None, rotor_revolutions: int | None
    ) -> set[ReasonCode]:
        """What the launch itself breaks, given the last result's rotor and the rotor
        revolutions since the last no-spin (None: no no-spin waits for the rotor)."""
        causes: set[ReasonCode] = set()
        rotor = self.rotor_direction
        if rotor is None:
            if self.rotor_reported:
                causes.add("rotor_stopped")
        else:
            if self.ball_direction == rotor:
                causes.add("ball_same_direction")
            if last_result_rotor == rotor:
                causes.add("direction_not_alternated")
        # A wheel whose output never reports the rotor cannot show its turns either.
        if (
            self.rotor_reported
            and rotor_revolutions is not None
            and rotor_revolutions < RESPIN_ROTOR_REVOLUTIONS
        ):
            causes.add("respin_too_early")
        return causes

    def expire(self, tick: int, last_rotor_tick: int | None, now: float) -> Result | NoSpin | None:
        """The wheel-time rules whose time has come by ``tick``: the game's end, if any."""
        limits = self.thresholds
        # Each entry: how far past its deadline a timer is (>= 0 means expired).
        overdue: dict[ReasonCode, int] = {}
        late = ticks_since(tick, self.last_ball_tick) - limits.result_timeout_ms
        if late >= 0:
            overdue["ball_not_settled"] = late
        if last_rotor_tick is not None:
            late = ticks_since(tick, last_rotor_tick) - limits.rotor_timeout_ms
            if late >= 0:
                overdue["rotor_stopped"] = late
        candidate = self.candidate
        if candidate is not None:
            settled_late = ticks_since(tick, self.candidate_tick) - limits.settle_ms
            # The ball rested before (or as) any timeout struck.
            if settled_late >= 0 and all(settled_late >= late for late in overdue.values()):
                return self.result(candidate, now)
        if overdue:
            return self.void(set(overdue), now)
        return None

    def ball_passed(self, event: BallPassed, now: float, out: list[Decision]) -> NoSpin | None:
        """A revolution (never the launch): counted; slow enough, betting closes."""
        # A wheel that reports its own phases starts counting once passes stream.
        self.counted = True
        self.revolutions += 1
        self.last_ball_tick = event.tick
        if event.direction == self.rotor_direction:
            return self.void({"ball_same_direction"}, now)
        if not self.no_more_bets and event.period_ms >= self.thresholds.no_more_bets_ms:
            self.close_betting(now, out)
        return None

    def pocket_read(
        self, event: PocketReading, layout: WheelLayout, now: float, out: list[Decision]
    ) -> NoSpin | None:
        """The ball rests in a pocket (settling starts afresh in a new one), or in none."""
        pocket = event.pocket
        if pocket is None:
            self.candidate = None
            return None
        self.close_betting(now, out)  # "at the latest when the ball drops"
        if not layout.has_pocket(pocket):
            return self.void({"invalid_pocket"}, now)
        if pocket != self.candidate:
            self.candidate = pocket
            self.candidate_tick = event.tick
        return None

    def wheel_closes_betting(self, now: float, out: list[Decision]) -> None:
        """The wheel's own no more bets: it vouches for a run it did not let us count."""
        self.wheel_closed_betting = True
        self.close_betting(now, out)

    def number_given(
        self, event: WinningNumber, layout: WheelLayout, now: float, out: list[Decision]
    ) -> Result | NoSpin:
        """The wheel's confirmed pocket: the result, if every rule held."""
        self.close_betting(now, out)
        if not layout.has_pocket(event.number):
            return self.void({"invalid_pocket"}, now)
        if event.extra:
            # A new dict: the game's earlier decisions keep the one they were made with.
            self.extra = {**self.extra, **event.extra}
        return self.result(event.number, now)

    def close_betting(self, now: float, out: list[Decision]) -> None:
        if not self.no_more_bets:
            self.no_more_bets = True
            out.append(NoMoreBets(self.game_id, now, self.extra))

    def result(self, number: str, now: float) -> Result | NoSpin:
        """``number`` as the result, unless the ball's run does not vouch for it."""
        if self.counted and self.revolutions < self.thresholds.min_revolutions:
            return self.void({"insufficient_revolutions"}, now)
        if not self.counted and not self.wheel_closed_betting:
            # Without a count, only the wheel's own no-more-bets vouches for the run.
            return self.void({"insufficient_revolutions"}, now)
        revolutions = self.revolutions if self.counted else None
        return Result(
            self.game_id,
            now,
            number,
            revolutions,
            self.rotor_direction,
            self.ball_direction,
            self.extra,
        )

    def void(self, reasons: set[ReasonCode], at: float, note: str | None = None) -> NoSpin:
        """The game is void for ``reasons`` (the first in rule order names it)."""
        ordered = in_rule_order(reasons)
        return NoSpin(self.game_id, at, ordered[0], ordered, note, self.extra)
