"""Live control of an SS2: the controller alone, then the daemon on a simulated wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from wheeld.core.events import WheelReply
from wheeld.testing.fixtures import TableFactory
from wheeld.testing.rig import Broker, DaemonProcess, Subscriber, running, wait_for
from wheeld_cammegh.control import ControlSettings, SS2Controller
from wheeld_cammegh.decoder import Status

BASE = "wheeld/T9"


def test_connect_sets_mode_powers_on_and_asks_for_sensors() -> None:
    controller = SS2Controller(ControlSettings(operating_mode=1159))
    assert controller.on_connect(0.0) == [b"*o 1159\r\n"]
    assert controller.on_timer(0.5) == []  # one command in flight at a time
    assert controller.on_event(WheelReply("o", "1159"), 0.6) == [b"*P 1\r\n"]
    assert controller.on_event(WheelReply("P", "OK"), 0.8) == [b"*I 4\r\n"]
    assert controller.on_event(WheelReply("I", "OK"), 0.95) == []
    assert controller.on_timer(1.0) == []


def test_busy_means_later_and_silence_means_retry_then_alarm() -> None:
    controller = SS2Controller(ControlSettings(sensor_events=False))
    controller.on_connect(0.0)
    assert controller.on_event(WheelReply("o", "BUSY"), 0.1) == []
    assert controller.next_deadline() == pytest.approx(1.1)
    assert controller.on_timer(1.1) == [b"*o 1159\r\n"]
    assert controller.on_timer(2.2) == [b"*o 1159\r\n"]  # no reply: retried
    assert controller.on_timer(3.3) == [b"*o 1159\r\n"]
    controller.on_timer(4.4)
    assert controller.unanswered == ["*o 1159"]


def test_polls_without_automatic_status_no_faster_than_100_ms() -> None:
    controller = SS2Controller(ControlSettings(operating_mode=3, sensor_events=False, poll_s=0.01))
    out = controller.on_connect(0.0)
    sent = []
    now = 0.0
    while now < 2.0:
        for command in out:
            if command == b"*X\r\n":
                sent.append(now)
                controller.on_status(Status(2, 1, None, 0, 170, "cw"), now + 0.005)
            else:  # the wheel answers at once
                controller.on_event(WheelReply(chr(command[1]), "OK"), now + 0.005)
        now += 0.01
        out = controller.on_timer(now)
    gaps = [b - a for a, b in pairwise(sent)]
    assert sent and min(gaps) >= 0.1 - 1e-9


def test_starts_a_game_once_bets_have_been_open_long_enough() -> None:
    controller = SS2Controller(ControlSettings(bets_open_s=10, sensor_events=False))
    controller.on_connect(0.0)
    controller.on_event(WheelReply("o", "1159"), 0.1)
    controller.on_event(WheelReply("P", "OK"), 0.2)
    assert controller.on_status(Status(2, 5, None, 0, 170, "cw"), 1.0) == []
    assert controller.next_deadline() == pytest.approx(11.0)
    assert controller.on_timer(11.0) == [b"*u 1\r\n"]
    controller.on_event(WheelReply("u", "OK"), 11.1)
    assert controller.on_status(Status(2, 5, None, 0, 170, "cw"), 12.0) == []  # not twice


def _started(controller: SS2Controller, spin: int, at: float) -> list[bytes]:
    """The start command the controller sends for ``spin`` once bets have been open."""
    controller.on_status(Status(2, spin, None, 0, 170, "cw"), at)
    sent = controller.on_timer(at + 20)
    controller.on_event(WheelReply("u", "OK"), at + 20.1)
    controller.on_status(Status(3, spin, None, 0, 170, "cw"), at + 21)
    return sent


def test_with_direction_control_the_next_game_turns_against_the_last_result() -> None:
    """Firmware 2.52, ``*T g`` bit 16 and mode bit 1: *u 1 clockwise, *u 3 anticlockwise."""
    controller = SS2Controller(ControlSettings(sensor_events=False, game_options=16))
    assert controller.on_connect(0.0) == [b"*o 1159\r\n"]
    assert controller.on_event(WheelReply("o", "1159"), 0.1) == [b"*T g 16\r\n"]
    assert controller.on_event(WheelReply("T", "OK"), 0.2) == [b"*P 1\r\n"]
    controller.on_event(WheelReply("P", "OK"), 0.3)
    assert _started(controller, 5, 1.0) == [b"*u 1\r\n"]  # nothing to alternate with
    controller.last_result = "cw"
    assert _started(controller, 6, 100.0) == [b"*u 3\r\n"]
    controller.last_result = "ccw"
    assert _started(controller, 7, 200.0) == [b"*u 1\r\n"]
    # Without direction control (older firmware), always *u 1: the wheel alternates.
    plain = SS2Controller(ControlSettings(sensor_events=False))
    plain.on_connect(0.0)
    plain.on_event(WheelReply("o", "1159"), 0.1)
    plain.on_event(WheelReply("P", "OK"), 0.2)
    plain.last_result = "cw"
    assert _started(plain, 5, 1.0) == [b"*u 1\r\n"]


def test_the_session_learns_each_result_and_the_journals_last() -> None:
    from wheeld.core.game import Result
    from wheeld_cammegh.decoder import CammeghDecoder
    from wheeld_cammegh.session import CammeghSession

    session = CammeghSession(CammeghDecoder(), ControlSettings(game_options=16))
    session.on_last_result("ccw")
    assert session._controller.last_result == "ccw"
    session.on_connect(0.0)
    session.after_decisions([Result(1, 1.0, "17", None, "cw", "ccw")], 1.0)
    learnt: object = session._controller.last_result
    assert learnt == "cw"


def test_the_wheels_clock_is_read_said_when_off_and_set_when_asked() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 12, 1, 14, 0, 30, tzinfo=UTC).timestamp()
    controller = SS2Controller(ControlSettings(sensor_events=False, set_clock=True))
    controller.on_connect(now)
    controller.on_event(WheelReply("o", "1159"), now + 0.2)
    assert controller.on_event(WheelReply("P", "OK"), now + 0.4) == [b"*d g\r\n"]
    # The guide's en dash arrives as whatever the line made of it.
    sent = controller.on_event(WheelReply("d", "g 13:58:00 \ufffd 01/12/26"), now + 0.6)
    assert controller.alarms == [
        ("wheel_clock_off", {"wheel_time": "2026-12-01T13:58:00+00:00", "offset_s": -150.6})
    ]
    assert sent == [b"*d s 0 30\r\n"]  # then minutes, hours, day, month, year
    for at, field in enumerate(("1 00", "2 14", "3 01", "4 12", "5 26"), 1):
        sent = controller.on_event(WheelReply("d", "OK"), now + 0.6 + at * 0.2)
        assert sent == [f"*d s {field}\r\n".encode()]
    # Within 2 s: nothing to say; and without set_clock, only said.
    checking = SS2Controller(ControlSettings(sensor_events=False, check_clock=True))
    checking.on_connect(now)
    checking.on_event(WheelReply("o", "1159"), now + 0.2)
    checking.on_event(WheelReply("P", "OK"), now + 0.4)
    assert checking.on_event(WheelReply("d", "g 14:00:31 - 01/12/26"), now + 0.6) == []
    assert checking.alarms == []


def test_a_session_alarm_goes_out_on_the_alarm_topic() -> None:
    from datetime import UTC, datetime

    from wheeld.table.pipeline import TablePipeline, TableSettings
    from wheeld_cammegh.decoder import CammeghDecoder
    from wheeld_cammegh.session import CammeghSession

    now = datetime(2026, 12, 1, 14, 0, 30, tzinfo=UTC).timestamp()
    decoder = CammeghDecoder()
    session = CammeghSession(decoder, ControlSettings(sensor_events=False, check_clock=True))
    settings = TableSettings(table="T1", base_topic="w/T1", driver="cammegh-ss2", port="x")
    pipeline = TablePipeline(settings, decoder, session)
    pipeline.on_link_up(now)
    pipeline.on_bytes(b"*o 1159\r\n", now + 0.2)
    assert pipeline.on_bytes(b"*P OK\r\n", now + 0.4).writes == [b"*d g\r\n"]
    effects = pipeline.on_bytes(b"*d g 10:00:00 - 01/12/26\r\n", now + 0.6)
    alarms = [json.loads(m.payload) for m in effects.messages if m.topic == "w/T1/alarm"]
    assert [(a["alarm"], a["offset_s"]) for a in alarms] == [("wheel_clock_off", -14430.6)]


# -- the daemon driving a simulated SS2 on a pty ------------------------------------------


@pytest.fixture
def broker(shared_broker: Broker) -> Broker:
    """One mosquitto for the module's daemons (``wheeld.testing.fixtures``)."""
    return shared_broker


CONTROL = """[wheel.control]
enabled = true
bets_open_s = 3.0
"""


def _session(
    tmp_path: Path,
    table: TableFactory,
    broker: Broker,
    *sim_args: str,
    games: int,
    control: str = CONTROL,
) -> tuple[subprocess.Popen[str], DaemonProcess, Subscriber]:
    link = tmp_path / "wheel"
    simulate = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheeld",
            "simulate",
            "--driver",
            "cammegh-ss2",
            "--link",
            str(link),
            "--speed",
            "5",
            "--seed",
            "2",
            "--mode",
            "0",
            "--games",
            str(games),
            *sim_args,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # A limit, not a duration: a Python start under a loaded suite took over 10 s.
        wait_for(link.exists, 30, "the simulated SS2")
        wheel = table(broker, link, driver="cammegh-ss2", control=control)
    except BaseException:
        simulate.kill()  # the test's own finally is not reached: no simulator left behind
        raise
    return simulate, wheel.daemon, wheel.subscriber


def _ends(sub: Subscriber) -> list[dict[str, object]]:
    return [p for p in sub.on(f"{BASE}/game") if p["event"] in ("result", "no_spin")]


def test_daemon_starts_games_and_counts_revolutions(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    simulate, daemon, sub = _session(tmp_path, table, broker, games=2)
    try:
        with running(daemon):
            wait_for(lambda: len(_ends(sub)) >= 2, 60, "two games")
            results = [p for p in _ends(sub) if p["event"] == "result"]
            assert len(results) == 2
            assert all(isinstance(r["revolutions"], int) and r["revolutions"] >= 8 for r in results)
            assert [r["spin"] for r in results] == [1, 2]
        out, _ = simulate.communicate(timeout=30)
        assert "*o 1159" in out and "*P 1" in out and "*I 4" in out and "*u 1" in out
    finally:
        simulate.kill()
        sub.close()


def test_a_2_52_wheel_under_direction_control_alternates_as_wheeld_picks(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    """*T g 16 with mode bit 1: the wheel no longer alternates by itself; wheeld does
    (and with 32 the wheel passes through state 7, held undecided)."""
    control = CONTROL + "game_options = 48\nsensor_events = false\n"
    simulate, daemon, sub = _session(tmp_path, table, broker, games=3, control=control)
    try:
        with running(daemon):
            wait_for(lambda: len(_ends(sub)) >= 3, 90, "three games")
            ends = _ends(sub)
            assert [p["event"] for p in ends] == ["result"] * 3, ends
            rotors = [p["rotor_direction"] for p in ends]
            assert rotors[0] != rotors[1] != rotors[2], rotors
        out, _ = simulate.communicate(timeout=30)
        assert "*T g 48" in out and "*u 3" in out
    finally:
        simulate.kill()
        sub.close()


def test_a_miss_spin_is_void_and_acknowledged_with_r(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    simulate, daemon, sub = _session(tmp_path, table, broker, "--miss-spin", "1", games=2)
    try:
        with running(daemon):
            wait_for(
                lambda: any(p["event"] == "result" for p in _ends(sub)),
                90,
                "a result after the re-spin",
            )
            ends = _ends(sub)
            assert ends[0]["event"] == "no_spin" and ends[0]["reason"] == "ball_same_direction"
            assert ends[1]["event"] == "result"
        out, _ = simulate.communicate(timeout=30)
        assert "*R" in out
    finally:
        simulate.kill()
        sub.close()


def test_busy_replies_are_retried(tmp_path: Path, broker: Broker, table: TableFactory) -> None:
    simulate, daemon, sub = _session(tmp_path, table, broker, "--busy", "2", games=1)
    try:
        with running(daemon):
            wait_for(lambda: any(p["event"] == "result" for p in _ends(sub)), 60, "a result")
        out, _ = simulate.communicate(timeout=30)
        assert out.count("*o 1159") >= 3  # BUSY, BUSY, then accepted
    finally:
        simulate.kill()
        sub.close()


def test_a_wheel_that_stops_answering_raises_an_alarm(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    simulate, daemon, sub = _session(tmp_path, table, broker, "--mute", games=1)
    try:
        with running(daemon):
            alarm = sub.wait(
                f"{BASE}/alarm", lambda p: p["alarm"] == "wheel_not_answering", timeout=60
            )
            assert alarm["command"] == "*o 1159"
            assert daemon.process is not None and daemon.process.poll() is None
    finally:
        simulate.kill()
        sub.close()


def test_the_pipeline_tells_the_session_the_journals_last_result_on_connect() -> None:
    from wheeld.core.engine import EngineState
    from wheeld.table.pipeline import TablePipeline, TableSettings
    from wheeld_cammegh.decoder import CammeghDecoder
    from wheeld_cammegh.session import CammeghSession

    decoder = CammeghDecoder()
    session = CammeghSession(decoder, ControlSettings(game_options=16))
    settings = TableSettings(table="T1", base_topic="w/T1", driver="cammegh-ss2", port="x")
    state = EngineState(last_result_rotor="cw")
    pipeline = TablePipeline(settings, decoder, session, state=state)
    pipeline.on_link_up(1.0)
    assert session._controller.last_result == "cw"


def test_a_wheel_that_closes_has_its_log_read_and_a_misslogged_game_raised(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    """The simulated SS2 closes after two games, its log saying another number for the
    second than it announced: wheeld reads the log and says so, with both records, and
    publishes the wheel's chi-squared beside its own."""
    control = CONTROL + "read_log = true\nsensor_events = false\n"
    simulate, daemon, sub = _session(
        tmp_path, table, broker, "--close-after", "2", "--misslog", "2", games=3, control=control
    )
    try:
        with running(daemon):

            def alarms() -> list[dict[str, Any]]:
                said = sub.on(f"{BASE}/alarm")
                return [a for a in said if a["alarm"] == "wheel_log_mismatch"]

            wait_for(alarms, 90, "the wheel's log read")
            results = [str(p["number"]) for p in _ends(sub) if p["event"] == "result"]
            assert len(results) == 2, _ends(sub)
            (alarm,) = alarms()
            assert alarm["kind"] == "published_differently"
            assert alarm["wheeld_record"] == {"number": results[1], "results_back": 0}
            logged = alarm["wheel_record"]
            assert logged["number"] == str((int(results[1].replace("00", "37")) + 1) % 37)
            assert (logged["page"], logged["slot"]) == (0, 1)
            wait_for(lambda: any("wheel" in s for s in sub.on(f"{BASE}/stats")), 10, "stats")
            stats = [s for s in sub.on(f"{BASE}/stats") if "wheel" in s][-1]
            assert stats["wheel"]["chi_squared"]["value"] >= 0
    finally:
        simulate.kill()
        sub.close()


def test_a_40_pocket_wheel_is_played_to_results(
    tmp_path: Path, broker: Broker, table: TableFactory
) -> None:
    from wheeld.core.layout import layout_for

    control = CONTROL + "sensor_events = false\n"
    simulate, daemon, sub = _session(
        tmp_path, table, broker, "--pockets", "40", games=3, control=control
    )
    config = daemon.config
    config.write_text(config.read_text().replace("[wheel]\n", "[wheel]\npockets = 40\n", 1))
    try:
        with running(daemon):
            wait_for(lambda: len(_ends(sub)) >= 3, 90, "three games")
            ends = _ends(sub)
            assert [p["event"] for p in ends] == ["result"] * 3, ends
            assert all(layout_for(40).has_pocket(str(p["number"])) for p in ends)
        out, _ = simulate.communicate(timeout=30)
        assert "*o 1159" in out
    finally:
        simulate.kill()
        sub.close()
