"""The game cycle's named phases: which event each takes, and the refusal of the rest."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from tests.helpers import warmed_up
from wheeld.core.engine import ANY_PHASE, PHASE_EVENTS, GameEngine, Phase
from wheeld.core.events import (
    WHEEL_EVENT_NAMES,
    BallLaunched,
    BallPassed,
    RotorDatum,
    WheelEvent,
)
from wheeld.core.rules import RulesConfig
from wheeld.drivers.wrp import WrpDecoder

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules.md"


def phase_table() -> str:
    """The markdown table docs/rules.md carries, made from the engine's own table."""
    rows = ["| phase | wheel event | what it does there |", "|---|---|---|"]
    for event, does in ANY_PHASE.items():
        rows.append(f"| any | `{WHEEL_EVENT_NAMES[event]}` | {does} |")
    every = set(ANY_PHASE) | {e for events in PHASE_EVENTS.values() for e in events}
    for phase, events in PHASE_EVENTS.items():
        for event, does in events.items():
            if event not in ANY_PHASE:
                rows.append(f"| `{phase.value}` | `{WHEEL_EVENT_NAMES[event]}` | {does} |")
        for event in sorted(every - set(events), key=lambda e: WHEEL_EVENT_NAMES[e]):
            rows.append(
                f"| `{phase.value}` | `{WHEEL_EVENT_NAMES[event]}` | refused: counted, logged |"
            )
    return "\n".join(rows)


def test_docs_rules_md_mirrors_the_engine_phase_table() -> None:
    regenerate = "regenerate it: python -m tests.test_engine_phases"
    assert phase_table() in DOCS.read_text(), regenerate


def test_a_game_goes_betting_no_more_bets_settling_idle() -> None:
    wheel = warmed_up()
    wheel.game("17")
    engine = GameEngine(RulesConfig())
    decoder = WrpDecoder()
    seen: list[Phase] = []
    for at, frame in wheel.lines:
        for event in decoder.feed(frame + b"\r\n"):
            engine.on_event(event, at)
            if not seen or seen[-1] != engine.phase:
                seen.append(engine.phase)
    assert seen == [Phase.IDLE, Phase.BETTING, Phase.NO_MORE_BETS, Phase.SETTLING, Phase.IDLE]


def test_a_launch_reported_during_a_game_is_refused_and_counted() -> None:
    engine = GameEngine(RulesConfig())
    engine.on_event(BallLaunched(1000, "cw", "ccw", counts_revolutions=False), 1.0)
    assert engine.phase is Phase.BETTING
    assert engine.on_event(BallLaunched(1500, "cw", "ccw", counts_revolutions=False), 1.5) == []
    assert engine.refused == {("betting", "BallLaunched"): 1}
    ((phase, event),) = engine.take_refusals()
    assert phase is Phase.BETTING and isinstance(event, BallLaunched)
    assert engine.take_refusals() == []
    assert engine.game_in_progress == 1


def test_a_second_launch_during_a_game_is_refused_not_counted() -> None:
    engine = GameEngine(RulesConfig())
    engine.on_event(RotorDatum(0, 500, "cw", 2400), 0.5)
    engine.on_event(BallPassed(1, 1000, "ccw", 0), 1.0)
    assert engine.phase is Phase.BETTING
    assert engine.on_event(BallPassed(2, 1600, "ccw", 0), 1.6) == []
    assert engine.refused == {("betting", "BallPassed"): 1}


def test_every_wheel_event_has_one_name_of_its_own() -> None:
    assert set(WHEEL_EVENT_NAMES) == set(get_args(WheelEvent))
    assert len(set(WHEEL_EVENT_NAMES.values())) == len(WHEEL_EVENT_NAMES)


def test_a_refused_event_is_counted_by_its_name_never_its_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``refused_events`` and the metrics' label say the registry's name: a class renamed
    (``BettingClosed`` became ``WheelNoMoreBets``) need not change what consumers read."""
    monkeypatch.setitem(WHEEL_EVENT_NAMES, BallLaunched, "launch_reported")
    engine = GameEngine(RulesConfig())
    engine.on_event(BallLaunched(1000, "cw", "ccw", counts_revolutions=False), 1.0)
    engine.on_event(BallLaunched(1500, "cw", "ccw", counts_revolutions=False), 1.5)
    assert engine.refused == {("betting", "launch_reported"): 1}


if __name__ == "__main__":
    print(phase_table())
