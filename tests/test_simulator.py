"""The simulated wheel: every fault gets its reason, reproducibly from a seed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from tests.helpers import decide, outcomes
from wheeld.cli import main as wheeld
from wheeld.core.game import Result
from wheeld.testing.rig import Broker, DaemonProcess, Subscriber, running, wait_for, write_config
from wheeld_simulators.faults import FAULTS, WHEEL_FAULTS
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator
from wheeld_simulators.targets import TcpSink, play


def _session(faults: list[str | None], seed: int = 11, pockets: int = 37) -> WheelSimulator:
    simulator = WheelSimulator(SimulatorSettings(seed=seed, pockets=pockets))
    simulator.plans = []  # type: ignore[attr-defined]
    for fault in faults:
        simulator.plans += simulator.play(fault)  # type: ignore[attr-defined]
    return simulator


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_decided_with_its_reason(fault: str) -> None:
    simulator = _session([None, fault, None])
    plans = simulator.plans  # type: ignore[attr-defined]
    got = outcomes(decide(simulator.wheel))
    assert [o for _, o in got] == [p.expected for p in plans]
    assert WHEEL_FAULTS[fault] in [o for _, o in got]
    assert got[-1][1].isdigit()  # the clean game after the fault gives a result


def test_plain_games_give_the_pocket_the_ball_rests_in() -> None:
    simulator = _session([None] * 30, pockets=38)
    got = outcomes(decide(simulator.wheel))
    plans = simulator.plans  # type: ignore[attr-defined]
    assert [o for _, o in got] == [p.number for p in plans]
    revolutions = [d.revolutions for d in decide(simulator.wheel) if isinstance(d, Result)]
    assert all(r is not None and 8 <= r <= 15 for r in revolutions)


def test_the_rotor_alternates_from_result_to_result() -> None:
    decisions = decide(_session([None] * 10).wheel)
    rotors = [d.rotor_direction for d in decisions if isinstance(d, Result)]
    assert len(rotors) == 10
    assert all(a != b for a, b in pairwise(rotors))


def test_a_seed_reproduces_the_session() -> None:
    one, two = (
        WheelSimulator(SimulatorSettings(seed=5, fault_rate=0.3, noise_rate=0.0)),
        WheelSimulator(SimulatorSettings(seed=5, fault_rate=0.3, noise_rate=0.0)),
    )
    assert [one.play() for _ in range(10)] == [two.play() for _ in range(10)]
    assert one.wheel.lines == two.wheel.lines


def test_file_target_replays_to_the_simulated_outcomes(tmp_path: Path) -> None:
    capture = tmp_path / "sim.cap"
    simulate = subprocess.run(
        [
            sys.executable,
            "-m",
            "wheeld",
            "simulate",
            "--target",
            "file",
            "--output",
            str(capture),
            "--games",
            "15",
            "--seed",
            "3",
            "--fault-rate",
            "0.4",
            "--noise-rate",
            "0.05",
            "--fault",
            "none",
            "--fault",
            "disconnect",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = [line.split()[-1] for line in simulate.stdout.splitlines()]
    replay = subprocess.run(
        [sys.executable, "-m", "wheeld", "replay", str(capture)],
        capture_output=True,
        text=True,
        check=True,
    )
    ends = [json.loads(line) for line in replay.stdout.splitlines()]
    got = [e.get("number") or e["reason"] for e in ends if e["event"] in ("result", "no_spin")]
    assert got == expected
    assert "wheel_link_lost" in got


def test_tcp_target_serves_every_client() -> None:
    async def scenario() -> bytes:
        sink = TcpSink()
        await sink.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", sink.port)
        await asyncio.sleep(0)  # let the server accept
        simulator = WheelSimulator(SimulatorSettings(seed=1))
        while not sink.clients:
            await asyncio.sleep(0.01)
        await play(simulator, sink, games=1, paced=False)
        data = await asyncio.wait_for(reader.readuntil(b"$WRBAL"), 5)
        writer.close()
        sink.close()
        return data

    assert b"$WRHEL" in asyncio.run(scenario())


def test_simulate_help_and_bad_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wheeld", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for fault in FAULTS:
        assert fault in out
    # Found by an attack: NaN and infinite speeds played as fast as they could, --games 0
    # played 20 and -1 none, a port past 65535 or no port at all was a traceback.
    for args in (
        ("--speed", "0"),
        ("--speed", "nan"),
        ("--speed", "inf"),
        ("--fault-rate", "nan"),
        ("--games", "0"),
        ("--games", "-1"),
        ("--target", "tcp", "--listen", "127.0.0.1:99999"),
        ("--target", "tcp", "--listen", "garbage"),
    ):
        bad = subprocess.run(
            [sys.executable, "-m", "wheeld", "simulate", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, (args, bad)


_INTERRUPTIBLE = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from wheeld.cli import main; sys.exit(main())"
)


@pytest.mark.parametrize("driver", ["wrp", "cammegh-mercury", "cammegh-ss2"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_wheel_takes_its_link_with_it(
    tmp_path: Path, driver: str, stop: signal.Signals
) -> None:
    """Found on the first day: a simulator stopped by SIGTERM, or by Ctrl-C while it
    waited for the daemon, left its --link naming a pty number soon another program's,
    and the daemon reopening the link opened that one. Stopped, the link goes with it."""
    link = tmp_path / "wheel"
    # SIGINT as a terminal gives it: a suite run in the background (no job control) has
    # it ignored, and an ignored SIGINT is inherited, so Python would not stop on it.
    simulate = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTIBLE, "simulate", "--driver", driver, "--link", str(link)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(link.exists, 30, "the simulated wheel's link")
        simulate.send_signal(stop)
        _, err = simulate.communicate(timeout=30)
    finally:
        simulate.kill()
        simulate.wait()
    assert not os.path.lexists(link)
    assert "Traceback" not in err and "never awaited" not in err
    # Ctrl-C is said in one line; SIGTERM is a stop asked for, said by nobody.
    assert ("wheeld simulate: interrupted" in err) == (stop == signal.SIGINT), err


def test_a_link_path_that_is_no_symlink_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an attack: ``--link`` on a file replaced it with the pty's link, and the
    close removed that, the file (a signing key) lost. Only a link is replaced."""
    precious = tmp_path / "signing.key"
    precious.write_text("the key")
    (tmp_path / "dir").mkdir()
    for path in (precious, tmp_path / "dir"):
        assert wheeld(["simulate", "--link", str(path), "--quiet"]) == 1
        assert capsys.readouterr().err == (
            f"wheeld simulate: --link {path}: exists and is no symlink; not replaced\n"
        )
    assert precious.read_text() == "the key"


def test_a_wheel_without_a_link_named_leaves_no_directory_behind() -> None:
    """Without --link it makes a directory for the link: removed with it (found on the
    first day: /tmp held an empty wheeld-sim-* directory for every run, or a stale link)."""
    simulate = subprocess.Popen(
        [sys.executable, "-m", "wheeld", "simulate", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert simulate.stdout is not None
        said = simulate.stdout.readline()  # wheel on /dev/pts/N: set wheel.port = "LINK"
        link = Path(said.rstrip().rpartition(" = ")[2].strip('"'))
        assert link.is_symlink() and link.parent.name.startswith("wheeld-sim-"), said
        simulate.send_signal(signal.SIGTERM)
        simulate.communicate(timeout=30)
    finally:
        simulate.kill()
        simulate.wait()
    assert not os.path.lexists(link.parent)


def test_a_mercury_on_extended_plays_to_a_listening_daemon(tmp_path: Path, broker: Broker) -> None:
    """`wheeld simulate --driver cammegh-mercury --level extended`, on a pty, to the daemon:
    revolutions from the wheel's counter, the level said on <base>/wheel."""
    link = tmp_path / "wheel"
    simulate = subprocess.Popen(
        [
            *(sys.executable, "-m", "wheeld", "simulate", "--driver", "cammegh-mercury"),
            *("--level", "extended", "--link", str(link), "--speed", "8", "--games", "2"),
        ],
        stdout=subprocess.DEVNULL,
    )
    sub = Subscriber(broker.port, "wheeld/T9/#")
    try:
        wait_for(link.exists, 10, "the simulated Mercury")
        config = write_config(tmp_path / "c.toml", port=link, broker=broker.port, state=tmp_path)
        config.write_text(
            config.read_text().replace('driver = "wrp"', 'driver = "cammegh-mercury"')
        )

        def ends() -> list[dict[str, object]]:
            return [p for p in sub.on("wheeld/T9/game") if p["event"] in ("result", "no_spin")]

        with running(DaemonProcess(config, tmp_path)):
            wait_for(lambda: len(ends()) >= 2, 60, "two games")
            levels = [p.get("output_level") for p in sub.on("wheeld/T9/wheel")]
        assert [(end["event"], end["revolutions"]) for end in ends()] == [("result", 10)] * 2
        assert "extended" in levels
    finally:
        simulate.kill()
        simulate.wait()
        sub.close()


def test_a_mercury_capture_file_replays_game_by_game(tmp_path: Path) -> None:
    capture = tmp_path / "mercury.cap"
    simulate = [
        *("simulate", "--driver", "cammegh-mercury", "--level", "advanced", "--quiet"),
        *("--target", "file", "--output", str(capture), "--games", "8", "--seed", "5"),
        *("--fault-rate", "0.5"),
    ]
    assert wheeld(simulate) == 0
    replayed = subprocess.run(
        [sys.executable, "-m", "wheeld", "replay", str(capture)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    events = [json.loads(line) for line in replayed.splitlines()]
    ends = [e for e in events if e["event"] in ("result", "no_spin")]
    assert len(ends) == len({e["game_id"] for e in ends}) >= 6
    # The simulator turns the rotor against the last result: alternation never voids.
    assert not [e for e in ends if "direction_not_alternated" in e.get("reasons", [])]


def test_a_default_ss2_alternates_its_rotor_and_gets_results(
    tmp_path: Path, broker: Broker
) -> None:
    """`wheeld simulate --driver cammegh-ss2` as it comes, to a daemon that only listens."""
    link = tmp_path / "wheel"
    simulate = subprocess.Popen(
        [
            *(sys.executable, "-m", "wheeld", "simulate", "--driver", "cammegh-ss2"),
            *("--link", str(link), "--speed", "5", "--seed", "4", "--games", "3"),
        ],
        stdout=subprocess.DEVNULL,
    )
    sub = Subscriber(broker.port, "wheeld/T9/game")
    try:
        wait_for(link.exists, 10, "the simulated SS2")
        config = write_config(tmp_path / "c.toml", port=link, broker=broker.port, state=tmp_path)
        config.write_text(config.read_text().replace('driver = "wrp"', 'driver = "cammegh-ss2"'))

        def ends() -> list[dict[str, object]]:
            return [p for p in sub.on("wheeld/T9/game") if p["event"] in ("result", "no_spin")]

        with running(DaemonProcess(config, tmp_path)):
            wait_for(lambda: len(ends()) >= 3, 60, "three games")
        assert [end["event"] for end in ends()] == ["result"] * 3, ends()
        rotors = [end["rotor_direction"] for end in ends()]
        assert all(a != b for a, b in pairwise(rotors)), rotors
    finally:
        simulate.kill()
        simulate.wait()
        sub.close()


def test_the_ss2_simulator_without_its_driver_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "wheeld_cammegh", None)  # the extra not installed
    assert wheeld(["simulate", "--driver", "cammegh-ss2"]) == 2
    error = capsys.readouterr().err
    assert error == (
        "wheeld simulate: the Cammegh drivers are not installed: "
        "pip install 'wheeld-simulators[cammegh]'\n"
    )
