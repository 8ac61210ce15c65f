"""Live control of an SS2: the controller alone, then the daemon on a simulated wheel."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from tests.rig import Broker, DaemonProcess, Subscriber, running, wait_for, write_config
from wheeld.events import WheelReply
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


# -- the daemon driving a simulated SS2 on a pty ------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = Broker(tmp_path_factory.mktemp("broker"))
    broker.start()
    yield broker
    broker.stop()


CONTROL = """[wheel.control]
enabled = true
bets_open_s = 3.0
"""


def _session(
    tmp_path: Path, broker: Broker, *sim_args: str, games: int
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
    wait_for(link.exists, 10, "the simulated SS2")
    config = write_config(
        tmp_path / "c.toml",
        port=link,
        broker=broker.port,
        state=tmp_path / "state",
        control=CONTROL,
    )
    config.write_text(config.read_text().replace('driver = "wrp"', 'driver = "cammegh-ss2"'))
    sub = Subscriber(broker.port, f"{BASE}/#")
    return simulate, DaemonProcess(config, tmp_path), sub


def _ends(sub: Subscriber) -> list[dict[str, object]]:
    return [p for p in sub.on(f"{BASE}/game") if p["event"] in ("result", "no_spin")]


def test_daemon_starts_games_and_counts_revolutions(tmp_path: Path, broker: Broker) -> None:
    simulate, daemon, sub = _session(tmp_path, broker, games=2)
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


def test_a_miss_spin_is_void_and_acknowledged_with_r(tmp_path: Path, broker: Broker) -> None:
    simulate, daemon, sub = _session(tmp_path, broker, "--miss-spin", "1", games=2)
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


def test_busy_replies_are_retried(tmp_path: Path, broker: Broker) -> None:
    simulate, daemon, sub = _session(tmp_path, broker, "--busy", "2", games=1)
    try:
        with running(daemon):
            wait_for(lambda: any(p["event"] == "result" for p in _ends(sub)), 60, "a result")
        out, _ = simulate.communicate(timeout=30)
        assert out.count("*o 1159") >= 3  # BUSY, BUSY, then accepted
    finally:
        simulate.kill()
        sub.close()


def test_a_wheel_that_stops_answering_raises_an_alarm(tmp_path: Path, broker: Broker) -> None:
    simulate, daemon, sub = _session(tmp_path, broker, "--mute", games=1)
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
