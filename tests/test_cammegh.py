"""The Cammegh SS2 driver: lines, the mapping to the rules, and real captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cammegh.wheel_games import games_owed_a_result, wheel_games
from tests.captures.regenerate import replay_output
from wheeld.drivers.cammegh_ss2 import CammeghDecoder, Status, encode_status, parse_status
from wheeld.engine import EngineState, GameEngine
from wheeld.events import WheelEvent, WheelReply
from wheeld.game import Decision, NoMoreBets, NoSpin, Result, Spinning
from wheeld.rules import RulesConfig
from wheeld.simulators.ss2 import ScriptedSS2

CAPTURES = Path(__file__).parent / "captures" / "cammegh-ss2"


def decide(wheel: ScriptedSS2, engine: GameEngine | None = None) -> list[Decision]:
    engine = engine or GameEngine(RulesConfig(), pockets=37)
    decoder = CammeghDecoder()
    out: list[Decision] = []
    for at, line in wheel.lines:
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
        b"*X;7;001;  ;0;000;0",
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


def _wire_events(pieces: list[bytes]) -> list[WheelEvent]:
    decoder = CammeghDecoder()
    out: list[WheelEvent] = []
    for piece in pieces:
        out += decoder.feed(piece, 5.0)
    return out


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=30),
            st.sampled_from(
                [
                    b"*X;2;001;  ;0;170;0\r\n",
                    b"*X;3;001;  ;0;170;0\r\n",
                    b"*u OK\r\n",
                    b" 7\r\n",
                    b"*F 5\r\n",
                    b"\r",
                    b"\n",
                    b"*bs 1\r\n",
                ]
            ),
        ),
        max_size=30,
    ).map(b"".join),
    st.lists(st.integers(0, 2000), max_size=10),
)
def test_any_bytes_split_anywhere_decode_as_unsplit(data: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert _wire_events(pieces) == _wire_events([data])


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
    assert all(d.extra == {"spin": 10} for d in decisions)  # type: ignore[union-attr]


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


def test_a_status_stream_that_stops_is_wheel_link_lost() -> None:
    wheel = _wheel()
    wheel.reverse()
    wheel.run(2000, state=3)
    wheel.silence(30_000)
    wheel.run(1000, state=4)
    assert ends(decide(wheel)) == ["wheel_link_lost"]


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
