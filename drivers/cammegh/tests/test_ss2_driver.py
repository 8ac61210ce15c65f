"""The Cammegh SS2 driver: lines, the mapping to the rules, and real captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from ss2_games import games_owed_a_result, wheel_games
from wheeld.core.engine import EngineState, GameEngine
from wheeld.core.events import (
    DisplayMismatch,
    ResultContradicted,
    WheelEvent,
    WheelReply,
    WinningNumber,
)
from wheeld.core.game import Decision, NoMoreBets, NoSpin, Result, Spinning
from wheeld.core.rules import RulesConfig
from wheeld.testing.golden import replay_output
from wheeld_cammegh.decoder import (
    MAX_TICK_STEP_MS,
    CammeghDecoder,
    Status,
    encode_status,
    parse_status,
)
from wheeld_simulators.ss2 import ScriptedSS2
from wire_chunks import Feeder, split, streams

CAPTURES = Path(__file__).parent / "captures"


def decide(wheel: ScriptedSS2, engine: GameEngine | None = None) -> list[Decision]:
    engine = engine or GameEngine(RulesConfig(), pockets=37)
    decoder = CammeghDecoder()
    out: list[Decision] = []
    for index, (at, line) in enumerate(wheel.lines):
        if index in wheel.clock_steps:
            engine.on_clock_step(wheel.clock_steps[index])
        out += engine.on_host_time(at)
        for event in decoder.feed(line + b"\r\n", at):
            out += engine.on_event(event, at)
    return out


def ends(decisions: list[Decision]) -> list[str]:
    return [
        d.number if isinstance(d, Result) else d.reason
        for d in decisions
        if isinstance(d, Result | NoSpin)
    ]


# -- lines -------------------------------------------------------------------------


def test_status_frames_parse() -> None:
    assert parse_status(b"*X;4;011;15;0;176;0") == Status(4, 11, "15", 0, 176, "cw")
    assert parse_status(b"*X;5;011; 4;0;175;1") == Status(5, 11, "4", 0, 175, "ccw")
    assert parse_status(b"*X;6;001;  ;4;000;0") == Status(6, 1, None, 4, 0, "cw")
    for bad in (
        b"*X;2 WARNING detected! Sending error signal...",
        b"*X;4;14*X;*X;4;146; 9;0;158;0",
        b"*X;8;001;  ;0;000;0",
        b"*X;4;011;15;0;176;2",
        b"4;146; 9;0;159;0",
    ):
        assert parse_status(bad) is None


def test_status_roundtrips() -> None:
    status = Status(3, 7, "32", 8, 165, "ccw")
    assert parse_status(encode_status(status).rstrip(b"\r\n")) == status


def test_replies_faults_and_garbage_are_told_apart() -> None:
    decoder = CammeghDecoder()
    got = decoder.feed(b"*u OK\r\n*o BUSY\r\n*Y 1 2 3\r\n\xff\xfe junk\r\n*bn 17\r\n 7\r\n", 1.0)
    assert got == [WheelReply("u", "OK"), WheelReply("o", "BUSY")]
    counters = decoder.counters
    assert (counters.replies, counters.bonus_lines, counters.malformed) == (2, 1, 1)
    assert counters.winning_number_lines == 1 and decoder.last_bare_number == "7"


def test_a_bare_line_naming_no_pocket_is_malformed() -> None:
    """Found by the attack (issue 19): a bare ``37`` or ``99`` stood as the displays'
    number (a display mismatch naming no pocket)."""
    decoder = CammeghDecoder()
    assert decoder.feed(b"0000\r\n37\r\n99\r\n", 1.0) == []
    assert decoder.last_bare_number == "0000"
    assert (decoder.counters.winning_number_lines, decoder.counters.malformed) == (1, 2)


_wire_events = Feeder(CammeghDecoder)


#: Lines a game is made of, so that generated streams reach every branch.
_WIRE_LINES = [
    b"*X;2;001;  ;0;170;0",
    b"*X;3;001;  ;0;170;0",
    b"*X;4;001;  ;0;170;0",
    b"*X;5;001;17;0;170;0",
    b"*X;5;001; 7;0;170;0",
    b"*u OK",
    b" 7",
    b"17",
    b"*F 5",
    b"*bs 1",
    b"*u " + b"x" * 130,  # over-long
]


@settings(max_examples=300)
@given(streams(_WIRE_LINES))
def test_any_bytes_split_anywhere_decode_as_unsplit(stream: tuple[bytes, list[int]]) -> None:
    data, cuts = stream
    assert _wire_events(split(data, cuts)) == _wire_events([data])


def test_an_overlong_line_is_dropped_whole_however_it_arrives() -> None:
    line = b"*u " + b"x" * 200 + b"\r\n*u OK\r\n"
    whole = _wire_events([line])
    assert whole == _wire_events([line[i : i + 7] for i in range(0, len(line), 7)])
    events, counters = whole
    assert events == [WheelReply("u", "OK")]
    assert counters["overlong_lines"] == 1 and counters["garbage_bytes"] == 203


# -- the mapping to the rules ----------------------------------------------------------


def _wheel() -> ScriptedSS2:
    wheel = ScriptedSS2(spin=10)
    wheel.run(2000)
    return wheel


def test_a_whole_game_is_spinning_no_more_bets_result() -> None:
    wheel = _wheel()
    wheel.game("17")
    decisions = decide(wheel)
    assert [type(d) for d in decisions] == [Spinning, NoMoreBets, Result]
    result = decisions[-1]
    assert isinstance(result, Result)
    assert (result.number, result.revolutions, result.rotor_direction) == ("17", None, "ccw")
    assert result.ball_direction == "cw"
    # The wheel's spin number, and the rotor's speed it reported at launch (170 = 17.0 rpm).
    assert all(d.extra == {"spin": 10, "rotor_rpm": 17.0} for d in decisions)  # type: ignore[union-attr]


def test_games_alternate_and_ids_grow() -> None:
    wheel = _wheel()
    for number in ("1", "2", "3"):
        wheel.game(number)
    assert ends(decide(wheel)) == ["1", "2", "3"]


def test_a_rotor_that_did_not_reverse_is_not_alternated() -> None:
    wheel = _wheel()
    wheel.game("1")
    wheel.game("2", reverse=False)
    wheel.game("3")
    assert ends(decide(wheel)) == ["1", "direction_not_alternated", "3"]


def test_unseen_spins_do_not_void_for_alternation() -> None:
    wheel = _wheel()
    wheel.game("1")
    wheel.status.spin += 3  # the wheel played spins we never heard
    wheel.game("2", reverse=False)
    assert ends(decide(wheel)) == ["1", "2"]


def test_flag_2_in_state_3_is_ball_same_direction() -> None:
    wheel = _wheel()
    wheel.game("5", flags_in_rim=2)
    assert ends(decide(wheel)) == ["ball_same_direction"]


def test_flag_8_persisting_3_s_in_state_3_voids() -> None:
    wheel = _wheel()
    wheel.game("5", flags_in_rim=8, in_rim_ms=2500)
    wheel.game("6", flags_in_rim=8, in_rim_ms=3500)
    assert ends(decide(wheel)) == ["5", "rotor_malfunction"]


def test_flag_1_persisting_5_s_in_state_4_is_ball_out() -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(4500, state=4, flags=1)
    wheel.run(1500, flags=0)
    wheel.run(3000, state=5, win="9")
    wheel.run(500, state=2, spin=11, flags=0)
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(6000, state=4, flags=1)
    assert ends(decide(wheel)) == ["9", "ball_out_of_wheel"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"*F 2", "ball_out_of_wheel"),
        (b"*F 5", "rotor_malfunction"),
        (b"*F 12", "rotor_malfunction"),
        (b"*F 4", "ball_same_direction"),
    ],
)
def test_fault_codes_during_a_game(line: bytes, reason: str) -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(2000, state=3)
    wheel.line(line)
    wheel.run(2000, state=4)
    assert ends(decide(wheel)) == [reason]


def test_flag_4_and_state_6_void() -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(2000, state=3)
    wheel.run(1000, state=4, flags=4)
    wheel.run(12_000, state=2, flags=0, spin=11)  # three rotor turns before the re-spin
    wheel.reverse()
    wheel.run(2000, state=3)
    wheel.run(1000, state=6, speed=0)
    assert ends(decide(wheel)) == ["rotor_malfunction", "rotor_malfunction"]


# -- trusting a number on a line without a checksum -------------------------------------


def _game_lines(number: str = "17", *, bare: bytes | None = None) -> ScriptedSS2:
    """A whole game, its bare line replaced by ``bare`` when given."""
    wheel = ScriptedSS2(spin=10, bare_numbers=bare is None)
    wheel.run(2000)
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(10_000, state=4)
    if bare is not None:
        wheel.line(bare)
    wheel.run(3000, state=5, win=number)
    wheel.run(500, state=2, spin=11)
    return wheel


def _corrupt(wheel: ScriptedSS2, index: int, old: bytes, new: bytes) -> None:
    at, line = wheel.lines[index]
    assert old in line
    wheel.lines[index] = (at, line.replace(old, new, 1))


def _indexes(wheel: ScriptedSS2, prefix: bytes) -> list[int]:
    return [i for i, (_, line) in enumerate(wheel.lines) if line.startswith(prefix)]


def test_a_state_4_frame_flipped_to_state_5_publishes_nothing() -> None:
    wheel = _game_lines("17")
    wheel.lines = [(at, line.replace(b";  ;", b";24;")) for at, line in wheel.lines]
    mid_run = _indexes(wheel, b"*X;4;")[5]
    _corrupt(wheel, mid_run, b"*X;4;", b"*X;5;")  # the previous game's 24, 8 s early
    assert ends(decide(wheel)) == ["frame_loss"]


def test_a_wrong_digit_in_the_first_state_5_frame_is_outvoted() -> None:
    wheel = _game_lines("28")
    _corrupt(wheel, _indexes(wheel, b"*X;5;")[0], b";28;", b";29;")
    assert ends(decide(wheel)) == ["28"]


def test_one_state_5_frame_agreeing_with_the_bare_line_is_enough() -> None:
    wheel = _game_lines("28", bare=b"28")
    first = _indexes(wheel, b"*X;5;")[0]
    wheel.lines = wheel.lines[: first + 1]
    assert ends(decide(wheel)) == ["28"]


def test_a_lone_state_5_frame_without_the_bare_line_is_not_enough() -> None:
    wheel = _game_lines("28")
    wheel.lines = [line for line in wheel.lines if line[1] != b"28"]
    for index in _indexes(wheel, b"*X;5;")[1:]:
        _corrupt(wheel, index, b"*X;5;010;", b"*X;2;011;")  # the next spin at once
    assert ends(decide(wheel)) == ["frame_loss"]


def test_state_5_frames_that_never_agree_void_the_game() -> None:
    wheel = _game_lines("28")
    for n, index in enumerate(_indexes(wheel, b"*X;5;")):
        _corrupt(wheel, index, b";28;", b";%d;" % (10 + n))
    assert ends(decide(wheel)) == ["frame_loss"]


def test_state_5_then_4_in_one_spin_is_void() -> None:
    wheel = _game_lines("28")
    _corrupt(wheel, _indexes(wheel, b"*X;5;")[1], b"*X;5;", b"*X;4;")
    first = _indexes(wheel, b"*X;5;")[0]
    _corrupt(wheel, first, b";28;", b";27;")  # nothing confirmed before the 4
    assert ends(decide(wheel)) == ["frame_loss"]


def test_a_display_line_that_disagrees_is_reported_and_the_frames_stand() -> None:
    wheel = _game_lines("17", bare=b" 7")
    decoder = CammeghDecoder()
    events = [e for at, line in wheel.lines for e in decoder.feed(line + b"\r\n", at)]
    (mismatch,) = [e for e in events if isinstance(e, DisplayMismatch)]
    assert (mismatch.number, mismatch.display) == ("17", "7")
    assert decoder.counters.display_mismatches == 1
    assert ends(decide(wheel)) == ["17"]


def test_a_bare_line_ending_lf_cr_confirms_the_first_frame() -> None:
    decoder = CammeghDecoder()
    wheel = _game_lines("17", bare=b"17")
    events: list[WheelEvent] = []
    for at, line in wheel.lines:
        events += decoder.feed(line + (b"\n\r" if line == b"17" else b"\r\n"), at)
        if line.startswith(b"*X;5;"):
            break  # only the first state-5 frame
    assert [e.number for e in events if isinstance(e, WinningNumber)] == ["17"]


def _ball_running_after_a_24() -> ScriptedSS2:
    """A game the wheel gave 24, then the next one up to 5 s of state 4 (its frames' win: 24)."""
    wheel = _game_lines("24", bare=b"24")
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(5000, state=4)
    return wheel


def test_a_display_line_from_an_earlier_game_vouches_for_nothing() -> None:
    wheel = _ball_running_after_a_24()
    wheel.run(500, state=5)  # a 4 flipped to 5: still the previous game's 24
    wheel.run(500, state=4)
    assert ends(decide(wheel)) == ["24", "frame_loss"]


def test_two_flipped_state_4_frames_do_not_publish_the_previous_number() -> None:
    wheel = _ball_running_after_a_24()
    wheel.run(1000, state=5)  # two state-4 frames flipped: the previous game's 24, twice
    wheel.run(1000, state=4)
    wheel.line(b"28")
    wheel.run(3000, state=5, win="28")
    assert ends(decide(wheel)) == ["24", "frame_loss"]


def test_the_previous_number_again_takes_three_state_5_frames() -> None:
    wheel = _game_lines("24", bare=b"24")
    wheel.game("24")  # the wheel's 24 again, with its bare line
    first_state_5, _, third_state_5 = [
        wheel.lines[i][0] for i in _indexes(wheel, b"*X;5;011;24;")[:3]
    ]
    results = [(d.number, d.at) for d in decide(wheel) if isinstance(d, Result)]
    assert [number for number, _ in results] == ["24", "24"]
    # Neither the bare line nor a second frame is enough for the previous number.
    assert results[1][1] == third_state_5 > first_state_5


def test_a_stray_previous_bare_line_does_not_confirm_a_flipped_frame() -> None:
    wheel = _ball_running_after_a_24()
    wheel.line(b"24")  # a stray copy of the previous game's bare line
    wheel.run(500, state=5)  # one flipped state-4 frame
    wheel.run(1000, state=4)
    assert ends(decide(wheel)) == ["24", "frame_loss"]


def test_a_state_5_frame_of_another_spin_does_not_count() -> None:
    wheel = _ball_running_after_a_24()
    wheel.run(1000, state=5, spin=12)  # a flipped state and a wrong spin digit, twice
    wheel.run(3000, state=5, win="28", spin=11)
    assert ends(decide(wheel)) == ["24", "frame_loss"]


def test_state_5_frames_that_outvote_a_published_number_are_counted() -> None:
    # Three flipped frames in a row are past what the rule can tell from the
    # wheel: the previous number is published, and the contradiction counted.
    wheel = _ball_running_after_a_24()
    wheel.run(1500, state=5)
    wheel.run(1000, state=4)
    wheel.line(b"28")
    wheel.run(3000, state=5, win="28")
    decoder = CammeghDecoder()
    events = [e for at, line in wheel.lines for e in decoder.feed(line + b"\r\n", at)]
    assert decoder.counters.contradicted_results == 1
    (said,) = [e for e in events if isinstance(e, ResultContradicted)]
    assert (said.number, said.later) == ("24", "28")
    assert ends(decide(wheel)) == ["24", "24"]


# -- the link and the host clock -----------------------------------------------------------


def test_a_status_stream_that_stops_is_wheel_link_lost() -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(2000, state=3)
    wheel.silence(5_000)
    wheel.run(1000, state=4)
    assert ends(decide(wheel)) == ["wheel_link_lost"]


def test_a_status_stream_that_stops_for_good_is_wheel_link_lost_at_the_deadline() -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(2000, state=3)
    engine = GameEngine(RulesConfig(), pockets=37)
    decide(wheel, engine)
    last = wheel.lines[-1][0]
    # Silence watched by the host (its link timer), however late it is judged.
    assert engine.on_host_time(last + 1.0) == []
    (void,) = engine.on_host_time(last + 60.0)
    assert isinstance(void, NoSpin) and void.reason == "wheel_link_lost"
    assert void.at == pytest.approx(last + 2.0)


def test_a_wall_clock_step_of_20_s_mid_game_keeps_the_result(tmp_path: Path) -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(4000, state=4)
    wheel.clock_step(20_000)  # host time jumps; the frames keep coming every 500 ms
    wheel.run(6000, state=4)
    wheel.line(b"17")
    wheel.run(3000, state=5, win="17")
    wheel.run(500, state=2, spin=11)
    assert ends(decide(wheel)) == ["17"]
    capture = tmp_path / "clock-step.cap"
    capture.write_text(wheel.capture(["a 20 s wall-clock step in state 4"]))
    payloads = [json.loads(line) for line in replay_output(capture).splitlines()]
    assert [p.get("number") for p in payloads if p["event"] == "result"] == ["17"]
    assert not [p for p in payloads if p["event"] == "no_spin"]


def test_a_gap_without_a_clock_step_is_silence(tmp_path: Path) -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(4000, state=4)
    wheel.silence(20_000)  # the same gap, but the host's clock did not step: nothing came
    wheel.run(6000, state=4)
    wheel.line(b"17")
    wheel.run(3000, state=5, win="17")
    assert ends(decide(wheel)) == ["wheel_link_lost"]
    capture = tmp_path / "silence.cap"
    capture.write_text(wheel.capture())
    payloads = [json.loads(line) for line in replay_output(capture).splitlines()]
    assert [p.get("reason") for p in payloads if p["event"] == "no_spin"] == ["wheel_link_lost"]


def test_a_host_clock_jump_counts_as_a_bounded_wheel_time() -> None:
    decoder = CammeghDecoder()
    decoder.feed(b"*X;2;001;  ;0;170;0\r\n", 100.0)
    (event,) = decoder.feed(b"*X;2;001;  ;0;170;0\r\n", 3700.0)
    assert event.tick == 100_000 + MAX_TICK_STEP_MS  # type: ignore[union-attr]
    (event,) = decoder.feed(b"*X;2;001;  ;0;170;0\r\n", 3600.0)  # stepped back
    assert event.tick == 100_000 + MAX_TICK_STEP_MS  # type: ignore[union-attr]
    assert decoder.counters.status_gaps == 1


def test_without_no_more_bets_the_wheel_does_not_vouch_for_revolutions() -> None:
    wheel = _wheel()
    wheel.game("5", skip_no_more_bets=True)
    assert ends(decide(wheel)) == ["insufficient_revolutions"]


def test_streamed_ball_passes_are_counted() -> None:
    wheel = _wheel()
    wheel.game("5", sensor_passes=8)
    wheel.game("6", sensor_passes=2)
    decisions = decide(wheel)
    assert ends(decisions) == ["5", "insufficient_revolutions"]
    result = next(d for d in decisions if isinstance(d, Result))
    assert result.revolutions == 7  # eight passes of one sensor: seven whole turns


def test_the_launch_needs_the_2_to_3_change_to_be_seen() -> None:
    wheel = ScriptedSS2(spin=4)
    wheel.run(3000, state=3)  # the daemon joined in the middle of a game
    wheel.run(5000, state=4)
    wheel.run(2000, state=5, win="8")
    assert ends(decide(wheel)) == []


def test_a_respin_needs_three_rotor_turns_after_a_no_spin() -> None:
    wheel = _wheel()
    wheel.game("1")
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(9000, state=4)
    wheel.line(b"*F 5")  # void at the end of the run
    wheel.run(500, state=2, spin=12)
    wheel.run(1000, state=3)  # re-spun after a fraction of a rotor turn
    state = EngineState()
    assert ends(decide(wheel, GameEngine(RulesConfig(), pockets=37, state=state))) == [
        "1",
        "rotor_malfunction",
        "respin_too_early",
    ]


# -- real traffic ------------------------------------------------------------------------


def test_studio_capture_gives_every_owed_game_its_result() -> None:
    capture = CAPTURES / "studio-games-2025.cap"
    games = wheel_games(capture)
    payloads = [json.loads(line) for line in replay_output(capture).splitlines()]
    results = [p for p in payloads if p["event"] == "result"]
    owed = games_owed_a_result(games)
    assert len(owed) > 150
    for game in owed:
        got = [
            r
            for r in results
            if r["spin"] == game.spin
            and r["number"] == game.number
            and r["rotor_direction"] == game.direction
        ]
        assert got, f"spin {game.spin} ({game.number}, {game.direction}) has no result"
    finished = {(g.spin, g.number) for g in games if g.number is not None}
    for result in results:
        assert (result["spin"], result["number"]) in finished, result
        assert result["revolutions"] is None


@pytest.mark.parametrize("name", ["power-and-setup-2025", "parameter-queries-2025"])
def test_other_captures_replay_without_error_and_no_invented_result(name: str) -> None:
    capture = CAPTURES / f"{name}.cap"
    games = wheel_games(capture)
    finished = {(g.spin, g.number) for g in games if g.number is not None}
    for line in replay_output(capture).splitlines():
        payload = json.loads(line)
        if payload["event"] == "result":
            assert (payload["spin"], payload["number"]) in finished


def test_state_7_of_firmware_2_52_holds_the_game_undecided() -> None:
    """``*T g`` bit 32: state 7, however long, is no decision; then state 5 gives the number."""
    wheel = ScriptedSS2()
    wheel.reverse()
    wheel.run(3000, state=3)
    wheel.run(3000, state=4)
    wheel.run(20_000, state=7)  # longer than result_timeout_ms
    wheel.line(b"17")
    wheel.run(3000, state=5, win="17")
    assert ends(decide(wheel)) == ["17"]


def test_the_ss2_says_its_output_level_and_what_it_leaves_to_the_wheel() -> None:
    from wheeld.core.events import WheelProfile

    decoder = CammeghDecoder()
    said = [
        e.facts
        for e in decoder.feed(b"*X;2;001;  ;0;170;0\r\n*X;2;001;  ;0;170;0\r\n*bs 1\r\n", 1.0)
        if isinstance(e, WheelProfile)
    ]
    assert said == [
        {
            "output_level": "advanced",
            "rules_judged_by_wheel": ["ball_same_direction", "insufficient_revolutions"],
            "flag_table": "ss2-v2.10",
        },
        {
            "output_level": "advanced",
            "rules_judged_by_wheel": ["ball_same_direction"],  # *bs passes: counted by wheeld
            "flag_table": "ss2-v2.10",
        },
    ]


def test_bonus_numbers_all_go_with_the_result_never_as_the_number() -> None:
    """Mode bit 32768: *Y;1-2 in state 3, *Y;3 and 6 in state 4, *Y;4-5 after the first
    state-5 frame and the bare line; all six are in the result's bonus."""
    wheel = ScriptedSS2()
    wheel.reverse()
    wheel.run(500, state=3)
    wheel.line(b"*Y;1;017")
    wheel.line(b"*Y;2;250")
    wheel.run(2500)
    wheel.run(500, state=4)
    wheel.line(b"*Y;3;003")
    wheel.line(b"*Y;6;999;00")  # a licence run out: 999, days left 00
    wheel.run(3000)
    wheel.line(b"17")
    wheel.run(500, state=5, win="17")
    wheel.line(b"*Y;4;100")
    wheel.line(b"*Y;5;101;30")
    wheel.run(2500)
    results = [d for d in decide(wheel) if isinstance(d, Result)]
    assert [r.number for r in results] == ["17"]
    assert results[0].extra["bonus"] == {"1": 17, "2": 250, "3": 3, "6": 999, "4": 100, "5": 101}


@pytest.mark.parametrize(("pockets", "zero"), [(39, "000"), (40, "0000")])
def test_extra_zeros_of_firmware_2_52(pockets: int, zero: str) -> None:
    """The bare line and the status frame write the extra zeros in three or four characters."""
    assert parse_status(f"*X;5;011;{zero};0;175;1".encode()) == Status(5, 11, zero, 0, 175, "ccw")
    wheel = ScriptedSS2()
    wheel.game(zero)
    assert ends(decide(wheel, GameEngine(RulesConfig(), pockets=pockets))) == [zero]
    # A 37-pocket wheel has no such pocket.
    assert ends(decide(wheel)) == ["invalid_pocket"]
