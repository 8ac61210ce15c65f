"""The demo as a new user runs it: live results soon, and Ctrl-C ends all of it.

Each demo here gets the test's own broker (or its own embedded one) and its
own temporary directory (TMPDIR), so these pass while another demo runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from wheeld.cli import main as wheeld
from wheeld.testing.rig import Broker, Subscriber, wait_for, write_config
from wheeld_simulators import demo as demo_module
from wheeld_simulators.demo import BrokerAddress, Dealer, DemoError
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator
from wheeld_simulators.scripted import opposite


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
        wait_for(shown_a_result, 60, "a result shown")  # a limit: seconds when quiet
        assert Path(work).parent == tmp_path, "the demo's directory is its own"
        assert _processes_mentioning(work), "the daemon runs"
        board = re.search(r"winning-number board\): (http://\S+)", "".join(seen))
        assert board, "".join(seen)
        with urllib.request.urlopen(f"{board.group(1)}state", timeout=5) as page:
            assert page.status == 200, "the URL shown is the demo's own marquee"
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
    output, work = _demo_until_a_result(tmp_path, "--broker", f"127.0.0.1:{broker.port}")
    table = re.search(r"-t 'wheeld/(DEMO-[^/]+)/#'", output)
    assert table, output
    # It stopped what it started: not the broker, which it found running.
    assert "stopped the daemon, the marquee and the wheel\n" in output, output
    assert not Path(work).exists(), "the run's directory is removed"
    assert "Unknown child process" not in output
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


def test_demo_with_its_own_embedded_broker_keeps_its_directory_if_asked(tmp_path: Path) -> None:
    output, work = _demo_until_a_result(tmp_path, "--broker", "embedded", "--keep")
    assert "embedded MQTT broker" in output
    assert "stopped the daemon, the marquee, the wheel and the embedded broker\n" in output
    assert f"the run's directory is kept: {work}\n" in output, output
    assert (Path(work) / "wheeld.log").exists()


@pytest.mark.parametrize(
    ("broker", "said"),
    [
        # Asked for the embedded one: whether 1883 listens is beside the point.
        ("embedded", ["--broker embedded needs amqtt", "pip install amqtt", "--broker auto"]),
        ("auto", ["no MQTT broker listens on 127.0.0.1:1883", "pip install amqtt"]),
    ],
)
def test_demo_without_amqtt_says_what_to_install(
    broker: str,
    said: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setitem(sys.modules, "amqtt", None)  # amqtt not installed
    monkeypatch.setitem(sys.modules, "amqtt.broker", None)
    monkeypatch.setattr(demo_module, "_listening", lambda host, port: False)  # nothing on 1883
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert wheeld(["demo", "--broker", broker]) == 1
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1, error
    assert all(words in error for words in said), error
    assert broker == "auto" or "listens" not in error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("driver", "wheel"),
    [("cammegh-ss2", "a Cammegh SS2"), ("cammegh-mercury", "a Cammegh Mercury 360 (extended")],
)
def test_demo_plays_any_installed_drivers_wheel(
    driver: str, wheel: str, tmp_path: Path, broker: Broker
) -> None:
    output, _ = _demo_until_a_result(
        tmp_path, "--broker", f"127.0.0.1:{broker.port}", "--driver", driver
    )
    assert f"{wheel}" in output, output
    assert "stopped the daemon, the marquee and the wheel\n" in output, output


def test_demo_names_a_driver_no_simulated_wheel_speaks_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert wheeld(["demo", "--driver", "nosuch"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("wheeld demo: no simulated wheel speaks driver 'nosuch'"), error
    assert len(error.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_demo_names_a_broker_it_cannot_find_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert wheeld(["demo", "--broker", "nosuch.invalid:1883"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("wheeld demo: --broker: no such host: nosuch.invalid"), error
    assert len(error.splitlines()) == 1
    with socket.socket(socket.AF_INET6) as free:
        free.bind(("::1", 0))
        port = free.getsockname()[1]
    assert wheeld(["demo", "--broker", f"[::1]:{port}"]) == 1
    error = capsys.readouterr().err
    assert error == f"wheeld demo: --broker: nothing listens on [::1]:{port}\n"
    assert list(tmp_path.iterdir()) == []


def test_an_ipv6_broker_is_given_in_brackets() -> None:
    assert demo_module._broker("[::1]:1883") == BrokerAddress("::1", 1883)
    assert str(BrokerAddress("::1", 1883)) == "[::1]:1883"
    with socket.socket(socket.AF_INET6) as listener:
        listener.bind(("::1", 0))
        listener.listen()
        assert demo_module._listening("::1", listener.getsockname()[1])


@pytest.mark.parametrize(
    "option",
    [
        ["--speed", "0"],
        ["--speed", "1000"],
        ["--speed", "nan"],
        ["--fault-rate", "1.5"],
        ["--seconds", "0"],
        ["--broker", "localhost"],
        ["--broker", "::1:1883"],  # an IPv6 address goes in brackets
        ["--broker", "[localhost]:1883"],
        ["--broker", "no host:1883"],
        ["--broker", "[::1]"],
    ],
)
def test_demo_refuses_bad_options(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        wheeld(["demo", *option])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"wheeld demo: error: argument {option[0]}:"), error


def test_the_live_view_shows_link_changes_not_the_wheel_heartbeat(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = demo_module.LiveView("wheeld/D")
    shows: list[tuple[str, dict[str, Any]]] = [
        ("wheeld/D/status", {"state": "online"}),
        ("wheeld/D/wheel", {"link": "up", "frames": 10}),
        ("wheeld/D/wheel", {"link": "up", "frames": 610}),  # the retained heartbeat, a minute on
        ("wheeld/D/status", {"state": "online"}),  # said again at a reconnect
        ("wheeld/D/wheel", {"link": "down", "frames": 611}),
        ("wheeld/D/wheel", {"link": "up", "frames": 612}),
    ]
    for topic, payload in shows:
        view.show(topic, payload)
    shown = [line.split("  ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert shown == ["wheeld online", "wheel link up", "wheel link down", "wheel link up"]


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


def _marquee_config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "wheeld.toml", port=tmp_path / "wheel", broker=1, state=tmp_path / "state"
    )


def test_a_marquee_that_loses_its_port_shows_no_url_but_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another demo's board on the default port: ours says where it really listens."""
    config = _marquee_config(tmp_path)

    async def scenario(taken: int) -> None:
        marquee, url = await demo_module._start_marquee(tmp_path, config, taken)
        assert url is None and marquee.returncode not in (None, 0)
        # The port is taken between the probe and the bind: the marquee moves.
        monkeypatch.setattr(demo_module, "DEFAULT_MARQUEE_PORT", taken)
        monkeypatch.setattr(demo_module, "_listening", lambda host, port: False)
        marquee, url = await demo_module._marquee(tmp_path, config, None)
        try:
            assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{taken}/")
            with urllib.request.urlopen(f"{url}state", timeout=5) as page:
                assert page.status == 200
        finally:
            await demo_module._stop(marquee)
        # A port the user asked for is that port or nothing.
        with pytest.raises(DemoError, match="Address already in use"):
            await demo_module._marquee(tmp_path, config, taken)

    with socket.socket() as other_demo:
        other_demo.bind(("127.0.0.1", 0))
        other_demo.listen()
        asyncio.run(scenario(other_demo.getsockname()[1]))


def test_an_error_the_embedded_broker_leaves_on_the_loop_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by CI: amqtt, stopping while a client connected, raised inside its own
    connection callback, and asyncio's handler printed that traceback under the demo's
    "interrupted"."""

    async def broker_fails_in_its_callback() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(demo_module._one_line_loop_errors)
        try:
            raise RuntimeError("dictionary changed size during iteration")
        except RuntimeError as error:
            loop.call_exception_handler(
                {"message": "Unhandled exception in client_connected_cb", "exception": error}
            )
        loop.call_exception_handler({"message": "a message alone"})

    asyncio.run(broker_fails_in_its_callback())
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "wheeld demo: Unhandled exception in client_connected_cb: "
        "RuntimeError: dictionary changed size during iteration",
        "wheeld demo: a message alone",
    ]
