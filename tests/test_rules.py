"""Every rule of rules.md, driven from WRP/1 frames, with a clean game beside it.

Each test fails when its rule is removed from the engine: the faulty game would
otherwise end with a result (or a different reason).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.helpers import clean_game_after_fault, decide, kinds, outcomes, warmed_up
from wheeld.core.engine import EngineState, GameEngine
from wheeld.core.game import NoSpin, Result
from wheeld.core.rules import RulesConfig
from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel


def _launch(wheel: ScriptedWheel) -> None:
    """The ball is picked up and launched against the rotor: a game is open."""
    wheel.pocket(None)
    wheel.advance(500)
    wheel.launch()


def _result_then_reverse(wheel: ScriptedWheel, number: str = "17") -> None:
    """Game 1: a clean result with the rotor clockwise; then the rotor reverses."""
    wheel.game(number)
    wheel.reverse_rotor()


def _fault_then_clean(wheel: ScriptedWheel) -> list[tuple[int, str]]:
    clean_game_after_fault(wheel)
    return outcomes(decide(wheel))


# -- the normal cycle ----------------------------------------------------------


def test_a_clean_game_goes_spinning_no_more_bets_result() -> None:
    wheel = warmed_up()
    wheel.game("17")
    decisions = decide(wheel)
    assert kinds(decisions) == ["spinning", "no_more_bets", "result"]
    result = decisions[-1]
    assert isinstance(result, Result)
    assert (result.number, result.revolutions) == ("17", len(DEFAULT_BALL_PERIODS))
    assert (result.rotor_direction, result.ball_direction) == ("cw", "ccw")


def test_no_more_bets_comes_at_the_threshold_period() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 900, 1399])
    before = decide(wheel)
    wheel.run_ball("ccw", [1400])
    after = decide(wheel)
    assert kinds(before) == ["spinning"]
    assert kinds(after) == ["spinning", "no_more_bets"]


def test_no_more_bets_at_the_latest_when_the_ball_drops() -> None:
    wheel = warmed_up()
    wheel.game("5", periods=[600, 700, 800, 900])
    assert kinds(decide(wheel)) == ["spinning", "no_more_bets", "result"]


def test_bounces_between_pockets_settle_on_the_last() -> None:
    wheel = warmed_up()
    wheel.game("4", bounces=["19", "21", "2"])
    assert outcomes(decide(wheel)) == [(1, "4")]


def test_a_reading_must_hold_for_the_settle_time() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.pocket("8")
    wheel.heartbeat_ms = None
    wheel.advance(999)
    wheel.heartbeat()
    assert outcomes(decide(wheel)) == []
    wheel.advance(1)
    wheel.heartbeat()
    assert outcomes(decide(wheel)) == [(1, "8")]


def test_a_game_id_grows_by_one_per_game() -> None:
    wheel = warmed_up()
    for number in ("1", "2", "3"):
        wheel.game(number)
        wheel.reverse_rotor()
    assert outcomes(decide(wheel)) == [(1, "1"), (2, "2"), (3, "3")]


def test_double_zero_wheel_results_in_00() -> None:
    wheel = warmed_up(pockets=38)
    wheel.game("00")
    assert outcomes(decide(wheel)) == [(1, "00")]


# -- ball_same_direction ---------------------------------------------------------


def test_ball_launched_with_the_rotor_is_void() -> None:
    wheel = warmed_up()
    wheel.game("17", ball="cw")
    assert _fault_then_clean(wheel) == [(1, "ball_same_direction"), (2, "26")]


def test_ball_turning_with_the_rotor_midway_is_void() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650])
    wheel.run_ball("cw", [700])
    assert _fault_then_clean(wheel) == [(1, "ball_same_direction"), (2, "26")]


# -- direction_not_alternated ----------------------------------------------------


def test_rotor_must_alternate_from_the_last_result() -> None:
    wheel = warmed_up()
    wheel.game("17")  # rotor clockwise
    wheel.pocket(None)
    wheel.advance(3000)
    wheel.game("9")  # clockwise again
    wheel.reverse_rotor()
    wheel.game("26")
    assert outcomes(decide(wheel)) == [(1, "17"), (2, "direction_not_alternated"), (3, "26")]


def test_alternation_is_judged_against_a_persisted_last_result() -> None:
    wheel = warmed_up()
    wheel.game("17")
    wheel.reverse_rotor()
    wheel.game("26")
    state = EngineState(next_game_id=41, last_result_rotor="cw")
    assert outcomes(decide(wheel, state=state)) == [(41, "direction_not_alternated"), (42, "26")]


def test_the_first_game_ever_has_nothing_to_alternate_with() -> None:
    for direction in ("cw", "ccw"):
        wheel = warmed_up(rotor=direction)
        wheel.game("3")
        assert outcomes(decide(wheel)) == [(1, "3")]


def test_a_no_spin_does_not_count_for_alternation() -> None:
    wheel = warmed_up()
    _result_then_reverse(wheel)  # result with cw, rotor now ccw
    wheel.game("5", ball="ccw")  # void: ball with the rotor
    clean_game_after_fault(wheel)  # still ccw: alternates from the cw result
    assert outcomes(decide(wheel)) == [(1, "17"), (2, "ball_same_direction"), (3, "26")]


# -- insufficient_revolutions ----------------------------------------------------


@pytest.mark.parametrize(
    ("minimum", "passes", "expected"),
    [
        (3, 2, "insufficient_revolutions"),
        (3, 3, "12"),
        (4, 3, "insufficient_revolutions"),
        (4, 4, "12"),
    ],
)
def test_the_ball_must_complete_the_minimum_revolutions(
    minimum: int, passes: int, expected: str
) -> None:
    wheel = warmed_up()
    wheel.game("12", periods=[800] * passes)
    clean_game_after_fault(wheel)
    got = outcomes(decide(wheel, rules=RulesConfig(min_ball_revolutions=minimum)))
    assert got[0] == (1, expected)
    assert got[1][1] in ("26", "direction_not_alternated")  # a result, or judged after one
    if expected != "12":
        assert got[1] == (2, "26")


def test_fewer_than_three_revolutions_cannot_be_configured() -> None:
    with pytest.raises(ValidationError, match="min_ball_revolutions"):
        RulesConfig(min_ball_revolutions=2)


# -- incidents: foreign_object, ball_out_of_wheel, rotor_malfunction -------------


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("object", "foreign_object"),
        ("ball_out", "ball_out_of_wheel"),
        ("rotor_fault", "rotor_malfunction"),
        ("sensor_fault", "rotor_malfunction"),
    ],
)
def test_an_incident_during_the_game_voids_it(code: str, reason: str) -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650, 700])
    wheel.incident(code)  # type: ignore[arg-type]
    wheel.run_ball("ccw", [760, 830])
    wheel.drop("17")
    wheel.advance(1500)
    assert _fault_then_clean(wheel) == [(1, reason), (2, "26")]


def test_an_incident_between_games_voids_nothing() -> None:
    wheel = warmed_up()
    wheel.incident("object")
    wheel.incident("rotor_fault")
    wheel.game("17")
    assert outcomes(decide(wheel)) == [(1, "17")]


def test_the_rotor_changing_direction_during_the_game_is_a_malfunction() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650, 700])
    wheel.set_rotor("ccw")
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[3:])
    wheel.drop("17")
    wheel.advance(1500)
    # The clean game after it turns anticlockwise with a clockwise ball.
    clean_game_after_fault(wheel)
    assert outcomes(decide(wheel)) == [(1, "rotor_malfunction"), (2, "26")]


# -- ball_not_settled ---------------------------------------------------------------


def test_a_suspended_ball_is_void_after_the_result_timeout() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.advance(14_900)
    assert outcomes(decide(wheel)) == []
    wheel.advance(200)
    assert _fault_then_clean(wheel) == [(1, "ball_not_settled"), (2, "26")]


def test_a_ball_that_never_stops_bouncing_is_not_settled() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    for _ in range(40):
        wheel.pocket("7")
        wheel.advance(400)
        wheel.pocket(None)
        wheel.advance(100)
    assert _fault_then_clean(wheel) == [(1, "ball_not_settled"), (2, "26")]


# -- rotor_stopped ----------------------------------------------------------------


def test_a_launch_with_the_rotor_stopped_is_void() -> None:
    wheel = warmed_up()
    wheel.set_rotor(None)
    wheel.advance(8000)
    wheel.game("17")
    wheel.set_rotor("ccw")
    clean_game_after_fault(wheel)
    decisions = decide(wheel)
    assert outcomes(decisions) == [(1, "rotor_stopped"), (2, "26")]
    spinning = decisions[0]
    assert kinds(decisions)[:2] == ["spinning", "no_spin"]
    assert getattr(spinning, "rotor_direction", "x") is None


def test_a_launch_before_any_rotor_frame_is_void() -> None:
    wheel = ScriptedWheel(rotor=None)
    wheel.hello()
    wheel.advance(1000)
    wheel.game("17")
    assert outcomes(decide(wheel)) == [(1, "rotor_stopped")]


def test_the_rotor_stopping_during_the_game_voids_it() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.set_rotor(None)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.drop("17")
    wheel.advance(1500)
    wheel.set_rotor("ccw")
    clean_game_after_fault(wheel)
    assert outcomes(decide(wheel)) == [(1, "rotor_stopped"), (2, "26")]


def test_a_ball_that_rested_before_the_rotor_timeout_keeps_its_result() -> None:
    wheel = warmed_up(rotor_period_ms=4000)
    wheel.pocket(None)
    wheel.advance(2500)
    wheel.launch()
    wheel.run_ball("ccw", [600, 700, 800, 900])
    wheel.drop("11")
    wheel.set_rotor(None)
    wheel.heartbeat_ms = None
    wheel.silence(9000)  # the settle time and the rotor timeout both pass unseen...
    wheel.heartbeat()
    _, frame = wheel.lines[-1]  # ...while the host heard the head all along
    wheel.lines[-1] = (wheel.lines[-2][0] + 0.5, frame)
    assert outcomes(decide(wheel)) == [(1, "11")]


# -- respin_too_early ------------------------------------------------------------------


def test_a_respin_needs_three_rotor_revolutions_after_a_no_spin() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.incident("ball_out")  # no-spin
    wheel.pocket(None)
    wheel.advance(wheel.rotor_period_ms * 2 + 100)  # only two datum passes
    wheel.game("8")
    clean_game_after_fault(wheel)
    assert outcomes(decide(wheel)) == [
        (1, "ball_out_of_wheel"),
        (2, "respin_too_early"),
        (3, "26"),
    ]


def test_the_respin_count_survives_a_restart() -> None:
    wheel = warmed_up()
    wheel.game("8")
    state = EngineState(next_game_id=7, rotor_revolutions_since_no_spin=0)
    assert outcomes(decide(wheel, state=state)) == [(7, "respin_too_early")]


# -- invalid_pocket ---------------------------------------------------------------------


@pytest.mark.parametrize("pocket", ["00", "37", "x", "01", "-1"])
def test_a_pocket_the_wheel_does_not_have_is_void(pocket: str) -> None:
    wheel = warmed_up()
    wheel.game(pocket)
    assert _fault_then_clean(wheel) == [(1, "invalid_pocket"), (2, "26")]


def test_00_is_a_pocket_of_a_double_zero_wheel_only() -> None:
    wheel = warmed_up(pockets=38)
    wheel.game("00")
    assert outcomes(decide(wheel, pockets=37)) == [(1, "invalid_pocket")]


def test_pockets_come_from_the_wheel_hello_when_not_configured() -> None:
    wheel = warmed_up(pockets=38)
    wheel.game("00")
    assert outcomes(decide(wheel)) == [(1, "00")]


def test_a_hello_naming_another_pocket_count_mid_game_voids_it() -> None:
    """Launched on a 37-pocket wheel, a game was settled on 00 after a hello said 38."""
    wheel = warmed_up()
    _launch(wheel)
    wheel.pockets = 38
    wheel.hello()
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.drop("00")
    wheel.advance(1500)
    assert _fault_then_clean(wheel) == [(1, "frame_loss"), (2, "26")]


def test_a_hello_naming_the_same_count_mid_game_changes_nothing() -> None:
    """A link reopened mid-game: its QRY is answered with the same hello."""
    wheel = warmed_up()
    _launch(wheel)
    wheel.hello()
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.drop("17")
    wheel.advance(1500)
    assert outcomes(decide(wheel)) == [(1, "17")]


# -- frame_loss ---------------------------------------------------------------------------


def test_a_sequence_gap_during_a_game_voids_it() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650])
    wheel.lose_frame()
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[2:])
    wheel.drop("17")
    wheel.advance(1500)
    assert _fault_then_clean(wheel) == [(1, "frame_loss"), (2, "26")]


def test_a_bad_checksum_during_a_game_voids_it() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650])
    wheel.corrupt_next()
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[2:])
    wheel.drop("17")
    wheel.advance(1500)
    assert _fault_then_clean(wheel) == [(1, "frame_loss"), (2, "26")]


def test_frames_lost_between_games_void_nothing() -> None:
    wheel = warmed_up()
    wheel.lose_frame()
    wheel.advance(1000)
    wheel.game("17")
    assert outcomes(decide(wheel)) == [(1, "17")]


def test_noise_between_frames_voids_nothing() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.noise(b"\x00\xff garbage $$ \x1b[0m")
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS)
    wheel.noise(b"~~~")
    wheel.drop("17")
    wheel.advance(1500)
    assert outcomes(decide(wheel)) == [(1, "17")]


# -- wheel_link_lost ----------------------------------------------------------------------


def test_silence_past_the_link_timeout_during_a_game_voids_it() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650])
    wheel.silence(2500)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[2:])
    wheel.drop("17")
    wheel.advance(1500)
    assert _fault_then_clean(wheel) == [(1, "wheel_link_lost"), (2, "26")]


def test_silence_shorter_than_the_link_timeout_is_tolerated() -> None:
    wheel = warmed_up()
    _launch(wheel)
    wheel.run_ball("ccw", [600, 650])
    wheel.silence(1500)
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[2:])
    wheel.drop("17")
    wheel.advance(1500)
    assert outcomes(decide(wheel)) == [(1, "17")]


def test_link_lost_is_judged_in_host_time_and_stamped_at_the_deadline() -> None:
    engine = GameEngine(RulesConfig())
    wheel = warmed_up()
    _launch(wheel)
    decide(wheel, engine=engine)
    heard = wheel.lines[-1][0]
    assert engine.link_deadline() == pytest.approx(heard + 2.0)
    assert engine.on_host_time(heard + 1.9) == []
    (void,) = engine.on_host_time(heard + 60)
    assert isinstance(void, NoSpin)
    assert void.reason == "wheel_link_lost"
    assert void.at == pytest.approx(heard + 2.0)


def test_the_port_going_away_during_a_game_voids_it() -> None:
    engine = GameEngine(RulesConfig())
    wheel = warmed_up()
    _launch(wheel)
    decide(wheel, engine=engine)
    (void,) = engine.on_link_down(wheel.host_time())
    assert isinstance(void, NoSpin) and void.reason == "wheel_link_lost"
    assert engine.on_link_down(wheel.host_time()) == []


# -- declared ------------------------------------------------------------------------------


def test_the_pit_boss_declares_a_no_spin_with_a_note() -> None:
    engine = GameEngine(RulesConfig())
    wheel = warmed_up()
    _launch(wheel)
    decide(wheel, engine=engine)
    (void,) = engine.declare_no_spin("chip on the wheelhead", wheel.host_time())
    assert isinstance(void, NoSpin)
    assert (void.reason, void.reasons, void.note) == (
        "declared",
        ("declared",),
        "chip on the wheelhead",
    )
    assert engine.declare_no_spin("again", wheel.host_time()) == []


# -- controller_restart ---------------------------------------------------------------------


def test_a_game_open_at_a_restart_is_void() -> None:
    engine = GameEngine(RulesConfig(), state=EngineState(next_game_id=12, open_game=11))
    (void,) = engine.resume(1.0)
    assert isinstance(void, NoSpin)
    assert (void.game_id, void.reason) == (11, "controller_restart")
    assert engine.resume(2.0) == []
    assert engine.state.open_game is None and engine.state.next_game_id == 12


def test_after_a_restart_play_continues_with_fresh_ids() -> None:
    first = GameEngine(RulesConfig())
    wheel = warmed_up()
    wheel.game("17")
    wheel.reverse_rotor()
    _launch(wheel)
    decide(wheel, engine=first)
    assert first.state.open_game == 2
    stored = EngineState.from_dict(first.state.to_dict())

    second = GameEngine(RulesConfig(), state=stored)
    assert outcomes(second.resume(5.0)) == [(2, "controller_restart")]
    later = warmed_up(rotor="cw")
    later.game("9")  # same direction as game 1's result
    later.reverse_rotor()
    later.game("10")
    assert outcomes(decide(later, engine=second)) == [(3, "direction_not_alternated"), (4, "10")]


# -- several causes ----------------------------------------------------------------------------


def test_causes_seen_together_are_all_listed_in_rule_order() -> None:
    wheel = warmed_up()
    _result_then_reverse(wheel)
    wheel.set_rotor("cw")  # not alternated...
    wheel.advance(3000)
    wheel.game("4", ball="cw")  # ...and the ball with the rotor
    decisions = decide(wheel)
    void = decisions[-1]
    assert isinstance(void, NoSpin)
    assert void.reason == "ball_same_direction"
    assert void.reasons == ("ball_same_direction", "direction_not_alternated")
