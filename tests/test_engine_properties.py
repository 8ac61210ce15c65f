"""Properties of the game engine over arbitrary wheel behaviour."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import decide
from wheeld.core.engine import GameEngine
from wheeld.core.game import NoMoreBets, NoSpin, Result, Spinning
from wheeld.core.rules import RulesConfig
from wheeld_simulators.scripted import ScriptedWheel

POCKET_READINGS = [None, "0", "00", "7", "17", "36", "37", "x"]

action = st.one_of(
    st.tuples(st.just("launch"), st.sampled_from(["cw", "ccw"])),
    st.tuples(st.just("ball"), st.sampled_from(["cw", "ccw"]), st.integers(1, 2500)),
    st.tuples(st.just("pocket"), st.sampled_from(POCKET_READINGS)),
    st.tuples(st.just("advance"), st.integers(0, 4000)),
    st.tuples(
        st.just("incident"),
        st.sampled_from(
            ["object", "ball_out", "rotor_fault", "sensor_fault", "cover_open", "launch"]
        ),
    ),
    st.tuples(st.just("rotor"), st.sampled_from(["cw", "ccw", None])),
    st.tuples(st.just("lose")),
    st.tuples(st.just("corrupt")),
    st.tuples(st.just("silence"), st.integers(0, 5000)),
)


def play(actions: list[tuple[object, ...]], pockets: int) -> ScriptedWheel:
    wheel = ScriptedWheel(pockets=pockets)
    wheel.hello()
    for name, *args in actions:
        match name:
            case "launch":
                wheel.ball(args[0], 0)  # type: ignore[arg-type]
            case "ball":
                wheel.advance(args[1])  # type: ignore[arg-type]
                wheel.ball(args[0], args[1])  # type: ignore[arg-type]
            case "pocket":
                wheel.pocket(args[0])  # type: ignore[arg-type]
            case "advance":
                wheel.advance(args[0])  # type: ignore[arg-type]
            case "incident":
                wheel.incident(args[0])  # type: ignore[arg-type]
            case "rotor":
                wheel.set_rotor(args[0])  # type: ignore[arg-type]
            case "lose":
                wheel.lose_frame()
            case "corrupt":
                wheel.corrupt_next()
            case "silence":
                wheel.silence(args[0])  # type: ignore[arg-type]
    return wheel


@settings(max_examples=300, deadline=None)
@given(
    st.lists(action, max_size=80),
    st.sampled_from([37, 38]),
    st.integers(3, 6),
)
def test_every_game_ends_once_and_every_result_is_vouched_for(
    actions: list[tuple[object, ...]], pockets: int, minimum: int
) -> None:
    wheel = play(actions, pockets)
    engine = GameEngine(RulesConfig(min_ball_revolutions=minimum), pockets=pockets)
    decisions = decide(wheel, engine=engine)
    decisions += engine.on_link_down(wheel.host_time() + 10)

    started: list[int] = []
    ended: list[int] = []
    last_result_rotor = None
    for decision in decisions:
        if isinstance(decision, Spinning):
            assert decision.game_id == len(started) + 1, "ids grow by one"
            assert len(ended) == len(started), "a game starts only after the last ended"
            started.append(decision.game_id)
        elif isinstance(decision, NoMoreBets):
            assert started and decision.game_id == started[-1] and len(ended) < len(started)
        elif isinstance(decision, Result | NoSpin):
            assert decision.game_id == started[-1], "the open game is the one that ends"
            ended.append(decision.game_id)
        if isinstance(decision, Result):
            assert decision.revolutions is not None and decision.revolutions >= minimum
            assert decision.rotor_direction is not None
            assert decision.ball_direction != decision.rotor_direction
            assert decision.rotor_direction != last_result_rotor
            assert engine.layout.has_pocket(decision.number)
            last_result_rotor = decision.rotor_direction
        if isinstance(decision, NoSpin):
            assert decision.reason == decision.reasons[0]
            assert len(set(decision.reasons)) == len(decision.reasons)
    assert started == ended
    assert engine.game_in_progress is None
