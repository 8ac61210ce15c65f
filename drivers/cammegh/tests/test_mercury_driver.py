"""The Cammegh Mercury driver: levels, wheeld's own rules on Extended, flags, corners."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from wheeld.core.events import (
    BallLaunched,
    BallPassed,
    WheelEvent,
    WheelProfile,
    WheelReply,
    WheelVerdict,
    WinningNumber,
)
from wheeld.core.rules import RulesConfig
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld_cammegh.mercury import (
    MercuryDecoder,
    MercuryStatus,
    Sensors,
    encode_mercury_status,
    number_text,
    parse_mercury_status,
)
from wheeld_simulators.mercury import DONE_WHEN, ScriptedMercury
from wire_chunks import Feeder, split, streams

CAPTURES = Path(__file__).parent / "captures" / "mercury"


def play(
    wheel: ScriptedMercury | list[tuple[float, bytes]],
    rules: RulesConfig | None = None,
    decoder: MercuryDecoder | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Every message the pipeline publishes for the wheel's lines: (topic end, payload)."""
    pipeline = TablePipeline(
        TableSettings(
            table="T1",
            base_topic="w/T1",
            driver="cammegh-mercury",
            port="test",
            rules=rules or RulesConfig(),
        ),
        decoder or MercuryDecoder(),
    )
    lines = wheel.lines if isinstance(wheel, ScriptedMercury) else wheel
    out = [pipeline.on_link_up(lines[0][0])]
    for at, line in lines:
        while (deadline := pipeline.next_deadline()) is not None and deadline <= at:
            out.append(pipeline.on_timer(deadline))
        out.append(pipeline.on_bytes(line + b"\r\n", at))
    return [
        (message.topic.rsplit("/", 1)[1], json.loads(message.payload))
        for effects in out
        for message in effects.messages
    ]


def ends(messages: list[tuple[str, dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """Each game's end: ("result", number, revolutions) or ("no_spin", reason)."""
    found: list[tuple[Any, ...]] = []
    for topic, payload in messages:
        if topic == "game" and payload["event"] == "result":
            found.append(("result", payload["number"], payload["revolutions"]))
        elif topic == "game" and payload["event"] == "no_spin":
            found.append(("no_spin", payload["reason"]))
    return found


def alarms(messages: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [payload for topic, payload in messages if topic == "alarm"]


def wheel_state(messages: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return [payload for topic, payload in messages if topic == "wheel"][-1]


def scripted(level: str, plan: list[tuple[str, dict[str, object]]]) -> ScriptedMercury:
    wheel = ScriptedMercury(level)  # type: ignore[arg-type]
    wheel.games(plan)
    return wheel


# -- the "done when" -----------------------------------------------------------


def test_extended_judges_revolutions_direction_and_rotor_itself() -> None:
    messages = play(scripted("extended", DONE_WHEN))
    assert ends(messages) == [
        ("result", "17", 10),
        ("no_spin", "ball_same_direction"),
        ("no_spin", "rotor_stopped"),
        ("no_spin", "insufficient_revolutions"),
    ]
    # The wheel completed 23 and 8: wheeld voided them by its own rules, and says so.
    assert [
        (a["alarm"], a["game_id"], a["wheel_verdict"], a["wheeld_verdict"])
        for a in alarms(messages)
    ] == [
        ("wheel_verdict_mismatch", 3, "23", "rotor_stopped"),
        ("wheel_verdict_mismatch", 4, "8", "insufficient_revolutions"),
    ]
    state = wheel_state(messages)
    assert state["output_level"] == "extended" and state["rules_judged_by_wheel"] == []
    result = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert (result["rotor_direction"], result["ball_direction"]) == ("ccw", "cw")


def test_advanced_follows_the_wheel_and_publishes_null_revolutions() -> None:
    messages = play(scripted("advanced", DONE_WHEN))
    assert ends(messages) == [
        ("result", "17", None),
        ("no_spin", "ball_same_direction"),  # the wheel's flag 2
        ("no_spin", "rotor_stopped"),  # the speed field, 000: wheeld's rotor timer
        ("result", "8", None),  # two revolutions: the wheel completed it
    ]
    state = wheel_state(messages)
    assert state["output_level"] == "advanced"
    assert state["rules_judged_by_wheel"] == ["ball_same_direction", "insufficient_revolutions"]
    result = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert result["ball_direction"] is None  # not reported at this level: never invented


def test_basic_leaves_every_sensor_rule_to_the_wheel() -> None:
    messages = play(scripted("basic", DONE_WHEN))
    # The same-direction ball never reached no more bets: no game at all.
    assert ends(messages) == [("result", "17", None), ("result", "23", None), ("result", "8", None)]
    spinning = [p for t, p in messages if t == "game" and p["event"] == "spinning"]
    assert all(p["rotor_direction"] is None and p["ball_direction"] is None for p in spinning)
    state = wheel_state(messages)
    assert state["output_level"] == "basic"
    assert "rotor_stopped" in state["rules_judged_by_wheel"]


def test_min_ball_revolutions_applies_to_the_wheels_count() -> None:
    plan: list[tuple[str, dict[str, object]]] = [("17", {"revolutions": 4})]
    assert ends(play(scripted("extended", plan))) == [("result", "17", 4)]
    stricter = RulesConfig(min_ball_revolutions=5)
    assert ends(play(scripted("extended", plan), stricter)) == [
        ("no_spin", "insufficient_revolutions")
    ]


def test_the_rotor_stopped_bit_voids_at_once_on_extended() -> None:
    wheel = scripted("extended", [("23", {"rotor_stops": True})])
    messages = play(wheel)
    stopped_at = next(
        at
        for at, line in wheel.lines
        if line.startswith(b"*X;3;") and line.endswith(b"??") and int(line.split(b";")[7], 16) & 1
    )
    no_spin = next(p for t, p in messages if t == "game" and p["event"] == "no_spin")
    assert no_spin["reason"] == "rotor_stopped"
    # Two frames (500 ms) after the bit, long before the rotor timer's 8 s.
    from datetime import datetime

    voided = datetime.fromisoformat(no_spin["ts"].replace("Z", "+00:00")).timestamp()
    assert voided - stopped_at <= 0.6


def test_one_flipped_rotor_bit_stops_no_rotor() -> None:
    wheel = scripted("extended", [("17", {})])
    lines = list(wheel.lines)
    index = next(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;4;"))
    at, line = lines[index]
    fields = line.split(b";")
    fields[7] = b"%04X" % (int(fields[7], 16) | 1)
    lines[index] = (at, b";".join(fields))
    assert ends(play(lines)) == [("result", "17", 10)]


def test_one_corrupted_revolution_count_adds_nothing() -> None:
    wheel = scripted("extended", [("17", {"revolutions": 2})])
    lines = list(wheel.lines)
    index = next(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;4;"))
    at, line = lines[index]
    fields = line.split(b";")
    fields[8] = b"12"  # 0x12 = 18 revolutions, in one frame only
    lines[index] = (at, b";".join(fields))
    assert ends(play(lines)) == [("no_spin", "insufficient_revolutions")]


def test_a_number_the_wheel_voids_but_wheeld_judges_valid_is_a_mismatch() -> None:
    """Flag 2 on Extended is the wheel's verdict; the ball ran against the rotor."""
    wheel = scripted("extended", [("17", {})])
    lines = [
        (at, line.replace(b";0;", b";2;", 1) if line.startswith(b"*X;3;") else line)
        for at, line in wheel.lines
    ]
    messages = play(lines)
    assert ends(messages) == [("result", "17", 10)]
    (alarm,) = alarms(messages)
    assert alarm["alarm"] == "wheel_verdict_mismatch"
    assert alarm["wheel_verdict"] == "flag 2: ball spun the rotor's way"
    assert alarm["wheeld_verdict"] == "17"
    # On Advanced the same flag is the wheel's word: the game is void.
    advanced = [(at, line) for at, line in lines if not line.startswith(b"*X")] + [
        (at, b";".join(line.split(b";")[:7])) for at, line in lines if line.startswith(b"*X")
    ]
    advanced.sort(key=lambda pair: pair[0])
    assert ends(play(advanced)) == [("no_spin", "ball_same_direction")]


# -- flags by model and firmware ---------------------------------------------------------


def _with_flag(level: str, flag: int, states: bytes = b"34") -> list[tuple[float, bytes]]:
    """A clean game whose frames in ``states`` carry the warning ``flag``."""
    wheel = scripted(level, [("17", {})])
    out = []
    for at, line in wheel.lines:
        fields = line.split(b";")
        if line.startswith(b"*X;") and line[3:4] in states:
            fields[4] = b"%X" % flag
        out.append((at, b";".join(fields)))
    return out


def test_mercury_flag_1_is_a_speed_warning_the_game_goes_on() -> None:
    assert ends(play(_with_flag("advanced", 1))) == [("result", "17", None)]


def test_ss2_flag_1_held_into_state_4_is_a_ball_out_of_the_wheel() -> None:
    decoder = MercuryDecoder()
    decoder.configure("SS2", "2.52", "00")
    messages = play(_with_flag("advanced", 1), decoder=decoder)
    assert ends(messages) == [("no_spin", "ball_out_of_wheel")]
    assert wheel_state(messages)["flag_table"] == "ss2-v2.10"


def test_flag_8_voids_by_the_game_mode() -> None:
    assert ends(play(_with_flag("advanced", 8, b"4"))) == [("no_spin", "rotor_malfunction")]
    decoder = MercuryDecoder()
    decoder.configure("mercury-360", None, "1C")
    assert ends(play(_with_flag("advanced", 8, b"4"), decoder=decoder)) == [
        ("no_spin", "ball_out_of_wheel")
    ]


def test_the_wheels_version_reply_chooses_the_flag_table() -> None:
    decoder = MercuryDecoder()
    lines = _with_flag("advanced", 1)
    lines.insert(1, (lines[0][0], b"*V SS2 V1.22"))
    messages = play(lines, decoder=decoder)
    assert wheel_state(messages)["flag_table"] == "ss2-v2.07"
    assert ends(messages) == [("no_spin", "ball_out_of_wheel")]


# -- state 7, bonus lines, the bare line -------------------------------------------------


def test_dealer_lock_holds_the_game_undecided_until_state_5() -> None:
    # 20 s in state 7: longer than result_timeout_ms, yet no ball_not_settled.
    wheel = scripted("extended", [("17", {"dealer_lock_ms": 20_000})])
    assert ends(play(wheel)) == [("result", "17", 10)]


def test_a_state_7_frame_read_as_state_5_publishes_no_stale_number() -> None:
    """'7' and '5' are one bit apart: a dealer-lock frame carries the previous number."""
    wheel = ScriptedMercury("advanced")
    wheel.games([("17", {}), ("4", {"dealer_lock_ms": 5000})])
    lines = list(wheel.lines)
    index = max(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;7;"))
    at, line = lines[index]
    lines[index] = (at, b"*X;5;" + line[5:])
    assert ends(play(lines)) == [("result", "17", None), ("result", "4", None)]


def test_bonus_lines_come_with_the_result_never_as_the_number() -> None:
    bonus = [b"*Y:P:1", b"*Y:A:03", b"*Y:1:017", b"*Y:2:250"]
    wheel = scripted("advanced", [("17", {"bonus": bonus})])
    messages = play(wheel)
    result = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert result["number"] == "17"
    assert result["bonus"] == {"aurora_prize": 1, "aurora": "03", "1": 17, "2": 250}


@pytest.mark.parametrize(
    ("field", "number"),
    [(b"0", "0"), (b" 0", "0"), (b"00", "00"), (b"07", "7"), (b" 7", "7"), (b"36", "36")],
)
def test_winning_number_forms(field: bytes, number: str) -> None:
    assert number_text(field.rjust(2)) == number


def test_numbers_that_are_none() -> None:
    for field in (b"  ", b"37", b"7 ", b"x1", b"??"):
        assert number_text(field) is None


def test_status_frames_parse_at_both_levels() -> None:
    advanced = parse_mercury_status(b"*X;3;012;07;2;215;1")
    assert advanced == MercuryStatus(3, 12, "7", 2, 215, "ccw")
    extended = parse_mercury_status(b"*X;4;012;  ;0;215;1;0022;0A;0;?????;??")
    assert extended == MercuryStatus(
        4, 12, None, 0, 215, "ccw", Sensors(0x22, 10, "cw", None, None)
    )
    assert parse_mercury_status(b"*X;5;012;17;0;215;1;0122;0B;0;0C000;17") is not None
    for bad in (
        b"*X;8;012;17;0;215;1",
        b"*X;5;012;17;0;215;1;0122;0B;2;0C000;17",
        b"*X;5;012;17;0;215;1;0122;0B",
        b"*X;5;012;99;0;215;1",
    ):
        assert parse_mercury_status(bad) is None


def test_status_roundtrips() -> None:
    status = MercuryStatus(4, 200, "00", 8, 123, "cw", Sensors(0x111, 255, None, 0xFFFFF, "0"))
    assert parse_mercury_status(encode_mercury_status(status).rstrip(b"\r\n")) == status


def test_basic_numbers_and_silence() -> None:
    decoder = MercuryDecoder()
    events = decoder.feed(b"*S\r\n*N\r\n", 1.0) + decoder.feed(b"*W 07\r\n", 30.0)
    launch = next(e for e in events if isinstance(e, BallLaunched))
    assert not launch.rotor_reported and not launch.link_judged
    assert [e.number for e in events if isinstance(e, WinningNumber)] == ["7"]
    # 29 s between *N and *W: Basic says nothing between events, so no link loss.
    messages = play([(1.0, b"*S"), (1.5, b"*N"), (10.0, b"*W 17")])
    assert ends(messages) == [("result", "17", None)]


def test_levels_are_told_apart_line_by_line() -> None:
    decoder = MercuryDecoder()
    said = [
        e.facts["output_level"]
        for chunk in (
            b"*X;2;001;  ;0;170;0\r\n",
            b"*X;2;001;  ;0;170;0;0012;00;?;?????;??\r\n",
            b"*S\r\n",
            b"*X;2;001;  ;0;170;0\r\n",
        )
        for e in decoder.feed(chunk, 1.0)
        if isinstance(e, WheelProfile)
    ]
    assert said == ["advanced", "extended", "basic", "advanced"]


def test_garbage_is_counted_never_fatal() -> None:
    decoder = MercuryDecoder()
    events = decoder.feed(b"\xff\xfe*X;9\r\n*W 99\r\n*Y:Q:1\r\n" + b"x" * 300 + b"\r\n", 1.0)
    assert not [e for e in events if not isinstance(e, WheelReply)]
    counters = decoder.counters
    # "*W 99" is no number: a reply at most, nothing for the rules.
    assert counters.malformed == 1 and counters.overlong_lines == 1 and counters.replies == 1
    assert counters.bonus_malformed == 1


def test_extended_counts_revolutions_as_ball_passes() -> None:
    decoder = MercuryDecoder()
    wheel = scripted("extended", [("17", {"revolutions": 5})])
    events: list[WheelEvent] = []
    for at, line in wheel.lines:
        events += decoder.feed(line + b"\r\n", at)
    passes = [e for e in events if isinstance(e, BallPassed)]
    assert len(passes) == 5 and {p.direction for p in passes} == {"cw"}
    assert [e for e in events if isinstance(e, WheelVerdict)] == [
        WheelVerdict(next(e.tick for e in events if isinstance(e, WinningNumber)), "17", None)
    ]


# -- any chunking ---------------------------------------------------------------------------

_WIRE_LINES = [
    b"*X;2;001;  ;0;170;0",
    b"*X;3;001;  ;0;170;0;0012;01;1;08000;??",
    b"*X;4;001;  ;0;170;0;0012;03;1;0C000;??",
    b"*X;7;001;  ;0;170;0;0112;04;1;?????;17",
    b"*X;5;002;17;0;170;0;0112;04;1;?????;17",
    b"*X;5;002;17;1;000;0",
    b"17",
    b" 0",
    b"*S",
    b"*N",
    b"*W 17",
    b"*Y:A:03",
    b"*V Mercury 360 1.95",
    b"*u " + b"x" * 130,
]


_wire_events = Feeder(MercuryDecoder)


@settings(max_examples=300)
@given(streams(_WIRE_LINES))
def test_any_bytes_split_anywhere_decode_as_unsplit(stream: tuple[bytes, list[int]]) -> None:
    data, cuts = stream
    assert _wire_events(split(data, cuts)) == _wire_events([data])


# -- the golden captures are the simulator's ------------------------------------------------


@pytest.mark.parametrize("level", ["basic", "advanced", "extended"])
def test_golden_captures_are_what_the_simulator_plays(level: str) -> None:
    from mercury_captures import done_when_capture

    path = CAPTURES / f"done-when-{level}.cap"
    assert path.read_text() == done_when_capture(level)  # type: ignore[arg-type]


# -- levels mixed, the verdict's limits, the fuzzer --------------------------------------


def test_a_basic_number_never_settles_a_status_frames_game() -> None:
    """Found by the fuzzer: an Advanced game, then a port speaking Basic."""
    lines = [
        (1.0, b"*X;2;000;  ;0;220;1"),
        (1.5, b"*X;3;000;  ;0;220;1"),
        (2.0, b"*S"),
        (2.5, b"*N"),
        (3.0, b"*W  8"),
    ]
    # (Basic reports no rotor: the respin rule cannot count its turns, so it is not judged.)
    assert ends(play(lines)) == [("no_spin", "frame_loss"), ("result", "8", None)]


def test_a_void_the_wheel_cannot_see_is_no_verdict_mismatch() -> None:
    """A game wheeld voids for lost frames while the wheel completes it: no alarm."""
    wheel = scripted("extended", [("17", {})])
    lines = list(wheel.lines)
    index = next(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;4;"))
    at, line = lines[index]
    lines.insert(index, (at - 0.1, b"*X;4;077" + line[8:]))  # another spin mid-game
    messages = play(lines)
    assert ends(messages) == [("no_spin", "frame_loss")]
    assert alarms(messages) == []


def test_the_mercury_fuzzer_finds_nothing_in_three_seconds() -> None:
    import mercury_fuzz
    import ss2_fuzz

    judged, failure = ss2_fuzz.fuzz(3.0, seed=2026, target=mercury_fuzz.MERCURY)
    assert failure is None, str(failure)
    assert judged > 0


def test_the_fuzz_seeds_are_what_the_simulator_plays() -> None:
    from mercury_captures import CORPUS, fuzz_seed

    for level in ("basic", "advanced", "extended"):
        assert (CORPUS / f"mercury-{level}.mer").read_bytes() == fuzz_seed(level)


# -- the hand-written corners ----------------------------------------------------------------


def _replayed(name: str) -> list[tuple[str, dict[str, Any]]]:
    from wheeld.core.capture import read

    capture = read(CAPTURES / name)
    return play([(line.at, line.data) for line in capture.lines if line.direction == "<"])


def test_the_advanced_corners() -> None:
    assert ends(_replayed("corners-advanced.cap")) == [
        ("result", "7", None),  # flag 1 only, a 07 bare line, the count one more on state 5
        ("result", "0", None),  # held in state 7, then " 0"
        ("no_spin", "ball_same_direction"),  # flag 2 in state 3
        ("no_spin", "ball_not_settled"),  # the respin: state 7, then back to betting
        ("no_spin", "rotor_malfunction"),  # flag 8, game mode 00
    ]


def test_the_extended_corners() -> None:
    messages = _replayed("corners-extended.cap")
    assert ends(messages) == [("result", "32", 6), ("result", "5", 3)]
    first = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert first["bonus"] == {"aurora": "07"} and first["ball_direction"] is None  # b was ?


def test_replay_reads_the_wheel_mercury_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[wheel.mercury] game_mode = "1C"``: flag 8 is a ball error there."""
    from wheeld.cli import main as wheeld
    from wheeld.core.capture import format_line

    capture = tmp_path / "flag8.cap"
    body = "".join(format_line(at, "<", line) for at, line in _with_flag("advanced", 8, b"4"))
    capture.write_text("# wheeld-capture 1\n# driver: cammegh-mercury\n" + body)
    config = tmp_path / "wheeld.toml"
    config.write_text(
        f'[wheel]\ndriver = "cammegh-mercury"\nport = "{tmp_path / "wheel"}"\n'
        "wait_for_device = true\n"
        '[wheel.mercury]\ngame_mode = "1C"\n'
        "[signing]\nrequired = false\n"
    )
    assert wheeld(["check-config", str(config)]) == 0
    capsys.readouterr()
    for args, reason in (
        ([], "rotor_malfunction"),
        (["--config", str(config)], "ball_out_of_wheel"),
    ):
        assert wheeld(["replay", *args, str(capture)]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [e["reason"] for e in events if e["event"] == "no_spin"] == [reason]


def test_asked_for_its_version_the_wheel_says_which_flags_it_has() -> None:
    from wheeld_cammegh.mercury import DRIVER, MercuryConfig

    assert DRIVER.session is not None
    assert DRIVER.session(MercuryDecoder(), MercuryConfig()) is None  # listening only
    session = DRIVER.session(MercuryDecoder(), MercuryConfig(ask_version=True))
    assert session is not None and session.on_connect(0.0) == [b"*V\r\n"]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("advanced", [("no_spin", "ball_same_direction"), ("result", "9", None)]),
        ("extended", [("no_spin", "ball_same_direction"), ("result", "9", 6)]),
        ("basic", [("result", "9", None)]),
    ],
)
def test_a_respin_in_state_3_is_a_new_game(level: str, expected: list[tuple[Any, ...]]) -> None:
    """Flag 2 in state 3, the ball at rest, the flag cleared, the ball spun again."""
    messages = play(
        scripted(level, [("9", {"ball_same_direction": True, "respin": True, "revolutions": 6})])
    )
    assert ends(messages) == expected
    assert alarms(messages) == []  # the wheel's void and wheeld's agree


def _respun_after_flag_8(level: str) -> list[tuple[float, bytes]]:
    """A ball spun the rotor's way and respun in state 3, flagged as mode 3F does (8)."""
    plan: list[tuple[str, dict[str, object]]] = [
        ("9", {"ball_same_direction": True, "respin": True, "revolutions": 6})
    ]
    lines = []
    for at, line in scripted(level, plan).lines:
        fields = line.split(b";")
        if line.startswith(b"*X;3;") and fields[4] == b"2":
            fields[4] = b"8"
        lines.append((at, b";".join(fields)))
    return lines


def test_game_mode_3f_raises_flag_8_for_a_ball_spun_the_rotors_way() -> None:
    """On Extended, flag 8 in state 3 with the ball running with the rotor is mode 3F's
    same-direction flag: its respin (the flag cleared in state 3) is a new game."""
    lines = _respun_after_flag_8("extended")
    decoder = MercuryDecoder()
    decoder.configure("mercury-360", None, "3F")
    messages = play(lines, decoder=decoder)
    assert ends(messages) == [("no_spin", "ball_same_direction"), ("result", "9", 6)]
    assert alarms(messages) == []
    # In mode 1F the same flag is a void of its own: no respin follows it.
    decoder = MercuryDecoder()
    decoder.configure("mercury-360", None, "1F")
    assert ends(play(lines, decoder=decoder)) == [("no_spin", "ball_same_direction")]


def _level_switch(first: str, then: str) -> list[tuple[float, bytes]]:
    """A game launched at ``first`` that the port finishes at ``then`` (the wheel
    completes 17 after two revolutions)."""
    sensors = ";0022;{:02X};0;04CCC;??"
    frames = [(1, 0), (2, 0), (2, 0), (3, 1), (3, 1), (3, 2), (3, 2), (4, 2), (4, 2)]
    lines: list[tuple[float, bytes]] = []
    at = 1.0
    for index, (state, revolutions) in enumerate(frames):
        level = first if index < 4 else then
        line = f"*X;{state};001;  ;0;220;1"
        if level == "extended":
            line += sensors.format(revolutions)
        lines.append((at, line.encode()))
        at += 0.5
    lines.append((at, b"17"))
    for _ in range(2):
        at += 0.5
        line = "*X;5;002;17;0;220;1" + (sensors.format(2) if then == "extended" else "")
        lines.append((at, line.encode()))
    return lines


@pytest.mark.parametrize(("first", "then"), [("extended", "advanced"), ("advanced", "extended")])
def test_an_output_level_switched_mid_game_judges_no_rule_on_half_a_game(
    first: str, then: str
) -> None:
    """Found by the attack (issue 19): a game launched on one level and finished on the
    other was voided for insufficient_revolutions, with a wheel_verdict_mismatch,
    though neither level saw its revolutions whole."""
    messages = play(_level_switch(first, then))
    assert ends(messages) == [("no_spin", "frame_loss")]
    assert alarms(messages) == []
    assert wheel_state(messages)["output_level"] == then


def test_game_mode_3f_on_advanced_follows_the_game_respun_after_flag_8() -> None:
    """Found by the attack (issue 19): on Advanced, mode 3F's flag 8 for a ball spun the
    rotor's way voided the game (rotor_malfunction: Advanced cannot tell which), and the
    respun ball's game, which the wheel completed, was never followed."""
    lines = _respun_after_flag_8("advanced")
    decoder = MercuryDecoder()
    decoder.configure("mercury-360", None, "3F")
    messages = play(lines, decoder=decoder)
    assert ends(messages) == [("no_spin", "rotor_malfunction"), ("result", "9", None)]
    assert alarms(messages) == []


@pytest.mark.parametrize("level", ["advanced", "extended"])
def test_bonus_lines_at_the_start_of_state_3_before_its_first_frame_are_the_games(
    level: str,
) -> None:
    """Found by the attack (issue 19): ``*Y:P`` and ``*Y:k`` come "at the start of state
    3", which may be before the first state-3 frame: they were dropped. A line heard
    while betting that no launch follows is still no game's."""
    lines = list(scripted(level, [("17", {})]).lines)
    launch = next(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;3;"))
    at = lines[launch][0]
    lines[launch:launch] = [(at - 0.2, b"*Y:P:1"), (at - 0.1, b"*Y:1:017")]
    betting = next(i for i, (_, line) in enumerate(lines) if line.startswith(b"*X;2;"))
    lines.insert(betting, (lines[betting][0] - 0.1, b"*Y:2:200"))  # a state-2 frame follows
    messages = play(lines)
    result = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert (result["number"], result["bonus"]) == ("17", {"aurora_prize": 1, "1": 17})


@pytest.mark.parametrize(
    "line", [b"*Y:A:08", b"*Y:A:99", b"*Y:P:2", b"*Y:1:256", b"*Y:3:999", b"*Y;3;998"]
)
def test_a_bonus_outside_the_guides_range_is_counted_never_published(line: bytes) -> None:
    """Found by the attack (issue 19): ``*Y:A:99`` (colours are 00-07) or ``*Y:1:999``
    (Bonus Numbers are 000-255; the SS2 writes 999 once its licence ran out) were published
    as the game's bonus."""
    bonus = [b"*Y:1:017", line]
    decoder = MercuryDecoder()
    messages = play(scripted("advanced", [("17", {"bonus": bonus})]), decoder=decoder)
    result = next(p for t, p in messages if t == "game" and p["event"] == "result")
    assert result["bonus"] == {"1": 17}
    assert decoder.counters.bonus_malformed == 1


@pytest.mark.parametrize(("bare", "number"), [(b"37", " 7"), (b"99", "17"), (b"000", " 0")])
def test_a_bare_line_naming_no_mercury_pocket_is_malformed_never_a_witness(
    bare: bytes, number: str
) -> None:
    """Found by the attack (issue 19): a bare ``37`` raised a display mismatch naming a
    pocket no Mercury has, and ``000`` (no Mercury form) stood witness for single zero."""
    lines = list(scripted("extended", [(number.strip(), {})]).lines)
    index = next(i for i, (_, line) in enumerate(lines) if line.strip() == number.strip().encode())
    lines[index] = (lines[index][0], bare)
    decoder = MercuryDecoder()
    messages = play(lines, decoder=decoder)
    assert ends(messages)[0][:2] == ("result", number.strip())
    assert decoder.last_bare_number is None
    assert (decoder.counters.malformed, decoder.counters.display_mismatches) == (1, 0)
