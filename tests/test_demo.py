"""The demo as a new user runs it: live results soon, and Ctrl-C ends all of it.

Each demo here gets the test's own broker (or its own embedded one) and its
own temporary directory (TMPDIR), so these pass while another demo runs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig import Broker, Subscriber, wait_for
from wheeld.cli import main as wheeld
from wheeld_simulators.demo import Dealer
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator
from wheeld_simulators.scripted import opposite


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


def _demo_until_a_result(tmp_path: Path, *demo_args: str) -> tuple[str, str]:
    """Run a demo until it shows a result, Ctrl-C it; its output and its directory."""
    demo = subprocess.Popen(
        [
            *(sys.executable, "-m", "wheeld", "demo", "--seed", "3", "--fault-rate", "0"),
            *("--speed", "5", "--marquee-port", "0", *demo_args),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert demo.stdout is not None
    seen: list[str] = []
    work = ""

    def shown_a_result() -> bool:
        nonlocal work
        while line := demo.stdout.readline():  # type: ignore[union-attr]
            seen.append(line)
            match = re.search(r"daemon log in (\S+)/wheeld.log", line)
            work = match.group(1) if match else work
        return any("RESULT" in line for line in seen)

    try:
        os.set_blocking(demo.stdout.fileno(), False)
        wait_for(shown_a_result, 15, "a result shown")
        assert Path(work).parent == tmp_path, "the demo's directory is its own"
        assert _processes_mentioning(work), "the daemon runs"
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        assert demo.wait(20) in (0, 130)
        leftover = _processes_mentioning(work)
        assert leftover == [], f"processes left behind: {leftover}"
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    os.set_blocking(demo.stdout.fileno(), True)
    return "".join(seen) + demo.stdout.read(), work


def test_demo_on_a_given_broker_stops_on_ctrl_c_and_leaves_it_clean(
    tmp_path: Path, broker: Broker
) -> None:
    output, _ = _demo_until_a_result(tmp_path, "--broker", f"127.0.0.1:{broker.port}")
    table = re.search(r"-t 'wheeld/(DEMO-[^/]+)/#'", output)
    assert table, output
    # Retained messages arrive before anything published after subscribing.
    sub = Subscriber(broker.port, "#")
    try:
        wait_for(sub.client.is_connected, 10, "the subscriber")
        sub.client.publish("marker", b"1", qos=1)
        sub.wait("marker", lambda _: True)
        left = [topic for topic, _, _ in sub.seen if table.group(1) in topic]
        assert left == [], f"retained messages left on the broker: {left}"
    finally:
        sub.close()


def test_demo_with_its_own_embedded_broker(tmp_path: Path) -> None:
    output, _ = _demo_until_a_result(tmp_path, "--broker", "embedded")
    assert "embedded MQTT broker" in output


def test_demo_without_a_broker_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "amqtt", None)  # amqtt not installed
    monkeypatch.setitem(sys.modules, "amqtt.broker", None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert wheeld(["demo", "--broker", "embedded"]) == 1
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1 and "pip install amqtt" in error, error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "option",
    [
        ["--speed", "0"],
        ["--speed", "1000"],
        ["--speed", "nan"],
        ["--fault-rate", "1.5"],
        ["--seconds", "0"],
        ["--broker", "localhost"],
    ],
)
def test_demo_refuses_bad_options(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        wheeld(["demo", *option])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"wheeld demo: error: argument {option[0]}:"), error


def test_dealer_alternates_from_the_result_the_daemon_published() -> None:
    """A game the daemon voided, though played cleanly, does not count for alternation."""
    simulator = WheelSimulator(SimulatorSettings(seed=7))
    dealer = Dealer("wheeld/D", simulator)
    simulator.play()
    first = simulator.wheel.rotor
    assert first is not None
    dealer.hear("wheeld/D/game", {"event": "spinning"})
    assert not dealer.decided.is_set()
    dealer.hear("wheeld/D/result", {"event": "result", "rotor_direction": first})
    dealer.hear("wheeld/D/game", {"event": "result", "rotor_direction": first})
    assert dealer.decided.is_set()
    simulator.play()
    assert simulator.wheel.rotor == opposite(first)
    # The daemon voids that second game (a cause of its own): its last result is still `first`.
    dealer.hear("wheeld/D/game", {"event": "no_spin", "reason": "frame_loss"})
    simulator.play()
    assert simulator.wheel.rotor == opposite(first), "alternated from the last real result"
