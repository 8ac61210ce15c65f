"""Shared helpers for driving the engine from WRP/1 traffic."""

from __future__ import annotations

from wheeld.core.engine import EngineState, GameEngine
from wheeld.core.game import Alarm, Decision, GameEvent, NoSpin, Result
from wheeld.core.messages import event_name
from wheeld.core.rules import RulesConfig
from wheeld.drivers.wrp import WrpDecoder
from wheeld_simulators.scripted import ScriptedWheel


def decide(
    wheel: ScriptedWheel,
    *,
    rules: RulesConfig | None = None,
    pockets: int | None = None,
    state: EngineState | None = None,
    engine: GameEngine | None = None,
) -> list[Decision]:
    """Feed everything the wheel sent, line by line at its host time, through decoder and engine."""
    engine = engine or GameEngine(rules or RulesConfig(), pockets=pockets, state=state)
    decoder = WrpDecoder()
    out: list[Decision] = []
    for at, frame in wheel.lines:
        out += engine.on_host_time(at)
        for event in decoder.feed(frame + b"\r\n"):
            out += engine.on_event(event, at)
    return out


def games(decisions: list[Decision]) -> list[GameEvent]:
    return [d for d in decisions if not isinstance(d, Alarm)]


def outcomes(decisions: list[Decision]) -> list[tuple[int, str]]:
    """(game id, number or reason) of every game's end, in order."""
    ends: list[tuple[int, str]] = []
    for d in decisions:
        if isinstance(d, Result):
            ends.append((d.game_id, d.number))
        elif isinstance(d, NoSpin):
            ends.append((d.game_id, d.reason))
    return ends


def kinds(decisions: list[Decision]) -> list[str]:
    """The event names of the game decisions, in order (the registry's, never a class's)."""
    return [event_name(d) for d in games(decisions)]


def warmed_up(**kwargs: object) -> ScriptedWheel:
    """A wheel that said hello and whose rotor has turned for a while."""
    wheel = ScriptedWheel(**kwargs)  # type: ignore[arg-type]
    wheel.hello()
    wheel.advance(3000)
    return wheel


def clean_game_after_fault(wheel: ScriptedWheel, number: str = "26") -> None:
    """Let the rotor turn the three revolutions a re-spin needs, then play a clean game."""
    wheel.pocket(None)
    wheel.advance(wheel.rotor_period_ms * 3 + 100)
    wheel.game(number)
