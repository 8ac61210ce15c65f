"""The WRP/1 golden captures, written as scripts.

Each function plays one scenario on a scripted wheel. ``regenerate.py`` writes
them to ``wrp/<name>.cap`` (only with ``--captures``) and replays every capture
to its ``.expected.jsonl``.
"""

from __future__ import annotations

from collections.abc import Callable

from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel, opposite


def _start(**kwargs: object) -> ScriptedWheel:
    wheel = ScriptedWheel(**kwargs)  # type: ignore[arg-type]
    wheel.hello()
    wheel.advance(3000)
    return wheel


def _respin(wheel: ScriptedWheel, number: str) -> None:
    wheel.pocket(None)
    wheel.advance(wheel.rotor_period_ms * 3 + 100)
    wheel.game(number)


def _launched(wheel: ScriptedWheel, passes: int = 3) -> None:
    wheel.pocket(None)
    wheel.advance(700)
    wheel.launch()
    wheel.run_ball(opposite(wheel.rotor or "cw"), DEFAULT_BALL_PERIODS[:passes])


def _finish(wheel: ScriptedWheel, number: str = "17", passes: int = 3) -> None:
    wheel.run_ball(opposite(wheel.rotor or "cw"), DEFAULT_BALL_PERIODS[passes:])
    wheel.drop(number)
    wheel.advance(1500)


def normal_games() -> ScriptedWheel:
    wheel = _start()
    for number, bounces in (("17", ()), ("0", ("32", "15")), ("36", ("11",)), ("5", ())):
        wheel.game(number, bounces=bounces)
        wheel.reverse_rotor()
    return wheel


def double_zero() -> ScriptedWheel:
    wheel = _start(pockets=38)
    for number in ("00", "0", "27"):
        wheel.game(number, bounces=("1",))
        wheel.reverse_rotor()
    return wheel


def garbage() -> ScriptedWheel:
    wheel = _start()
    wheel.noise(b"\x00\x00\xff\xfe")
    wheel.game("23")
    wheel.noise(b"$WRBAL,12,99")  # a frame cut short, then a line break
    wheel.noise(b"AT+RESET\r")
    wheel.reverse_rotor()
    wheel.noise(b"$WRXYZ,1,2,3*00")
    wheel.noise(b"\x1b[2J" + b"#" * 120)
    wheel.game("8", bounces=("30",))
    return wheel


def fault_ball_same_direction() -> ScriptedWheel:
    wheel = _start()
    wheel.game("17", ball="cw")
    _respin(wheel, "4")
    return wheel


def fault_direction_not_alternated() -> ScriptedWheel:
    wheel = _start()
    wheel.game("17")
    wheel.pocket(None)
    wheel.advance(3000)
    wheel.game("9")
    wheel.reverse_rotor()
    wheel.game("21")
    return wheel


def fault_insufficient_revolutions() -> ScriptedWheel:
    wheel = _start()
    wheel.game("13", periods=[700, 900])
    _respin(wheel, "31")
    return wheel


def _incident(code: str) -> Callable[[], ScriptedWheel]:
    def scenario() -> ScriptedWheel:
        wheel = _start()
        _launched(wheel)
        wheel.incident(code)  # type: ignore[arg-type]
        _finish(wheel)
        _respin(wheel, "33")
        return wheel

    return scenario


def fault_ball_not_settled() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel, passes=len(DEFAULT_BALL_PERIODS))
    wheel.advance(16_000)
    _respin(wheel, "6")
    return wheel


def fault_rotor_stopped() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel)
    wheel.set_rotor(None)
    _finish(wheel)
    wheel.set_rotor("ccw")
    _respin(wheel, "19")
    return wheel


def fault_rotor_reversed() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel)
    wheel.set_rotor("ccw")
    wheel.run_ball("ccw", DEFAULT_BALL_PERIODS[3:])
    wheel.drop("2")
    wheel.advance(1500)
    _respin(wheel, "19")
    return wheel


def fault_respin_too_early() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel, passes=len(DEFAULT_BALL_PERIODS))
    wheel.incident("ball_out")
    wheel.pocket(None)
    wheel.advance(wheel.rotor_period_ms + 200)
    wheel.game("14")
    _respin(wheel, "20")
    return wheel


def fault_invalid_pocket() -> ScriptedWheel:
    wheel = _start()
    wheel.game("00")
    _respin(wheel, "10")
    return wheel


def fault_frame_loss() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel)
    wheel.lose_frame()
    wheel.lose_frame()
    _finish(wheel)
    _respin(wheel, "25")
    wheel.reverse_rotor()
    _launched(wheel)
    wheel.corrupt_next()
    _finish(wheel)
    _respin(wheel, "29")
    return wheel


def fault_wheel_link_lost() -> ScriptedWheel:
    wheel = _start()
    _launched(wheel)
    wheel.silence(4000)
    _finish(wheel)
    _respin(wheel, "35")
    return wheel


SCENARIOS: dict[str, Callable[[], ScriptedWheel]] = {
    "normal-games": normal_games,
    "double-zero": double_zero,
    "garbage": garbage,
    "fault-ball-same-direction": fault_ball_same_direction,
    "fault-direction-not-alternated": fault_direction_not_alternated,
    "fault-insufficient-revolutions": fault_insufficient_revolutions,
    "fault-foreign-object": _incident("object"),
    "fault-ball-out-of-wheel": _incident("ball_out"),
    "fault-rotor-fault": _incident("rotor_fault"),
    "fault-sensor-fault": _incident("sensor_fault"),
    "fault-ball-not-settled": fault_ball_not_settled,
    "fault-rotor-stopped": fault_rotor_stopped,
    "fault-rotor-reversed": fault_rotor_reversed,
    "fault-respin-too-early": fault_respin_too_early,
    "fault-invalid-pocket": fault_invalid_pocket,
    "fault-frame-loss": fault_frame_loss,
    "fault-wheel-link-lost": fault_wheel_link_lost,
}
