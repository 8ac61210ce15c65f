"""Game events and alarms: what the game engine decides.

``at`` is host time (seconds since the epoch) of the moment the decision was
made; the engine never reads a clock, it is told the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The reason codes live with the wheel events (a driver names one when it voids a
# game); they are re-exported here, where the decisions that carry them are.
from wheeld.core.events import REASONS, Direction, ReasonCode

__all__ = [
    "REASONS",
    "Alarm",
    "Decision",
    "GameEvent",
    "NoMoreBets",
    "NoSpin",
    "ReasonCode",
    "Result",
    "Spinning",
    "in_rule_order",
]

_REASON_RANK = {reason: rank for rank, reason in enumerate(REASONS)}


def in_rule_order(reasons: set[ReasonCode]) -> tuple[ReasonCode, ...]:
    """Causes seen together, in the order of ``rules.md``."""
    return tuple(sorted(reasons, key=_REASON_RANK.__getitem__))


@dataclass(frozen=True, slots=True)
class Spinning:
    """A ball was launched: a game exists from here and ends exactly once."""

    game_id: int
    at: float
    rotor_direction: Direction | None
    ball_direction: Direction | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NoMoreBets:
    """The ball slowed to the threshold, or dropped: betting closes."""

    game_id: int
    at: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Result:
    """The ball rested in ``number`` and every rule held."""

    game_id: int
    at: float
    number: str
    revolutions: int | None
    rotor_direction: Direction | None
    ball_direction: Direction | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NoSpin:
    """The game is void ("tirada nula"): ``reason`` first cause, ``reasons`` all seen."""

    game_id: int
    at: float
    reason: ReasonCode
    reasons: tuple[ReasonCode, ...]
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


GameEvent = Spinning | NoMoreBets | Result | NoSpin


@dataclass(frozen=True, slots=True)
class Alarm:
    """Something an engineer should know that is not a game decision."""

    at: float
    code: str
    detail: dict[str, Any] = field(default_factory=dict)


Decision = GameEvent | Alarm
