"""Every fault the simulator injects, through a real pty and the real daemon."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wheeld.testing.rig import Broker, DaemonProcess, Subscriber, running, wait_for, write_config
from wheeld_simulators.faults import FAULTS

BASE = "wheeld/T9"


#: Every fault is decided in-process by tests/test_simulator.py; through a real
#: pty and daemon, the ones that live on the line, and one game rule as a smoke test.
THROUGH_THE_DAEMON = ("disconnect", "corrupted_frame", "dropped_frame", "foreign_object")


def test_the_daemon_faults_are_simulator_faults() -> None:
    assert set(THROUGH_THE_DAEMON) <= set(FAULTS)


@pytest.mark.parametrize("fault", THROUGH_THE_DAEMON)
def test_fault_through_pty_and_daemon(fault: str, tmp_path: Path, shared_broker: Broker) -> None:
    broker = shared_broker
    link = tmp_path / "wheel"
    games = 4 if fault == "early_respin" else 3
    simulate = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheeld",
            "simulate",
            "--link",
            str(link),
            "--speed",
            "20",
            "--seed",
            "4",
            "--games",
            str(games),
            "--fault",
            "none",
            "--fault",
            fault,
            "--fault",
            "none",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert simulate.stdout is not None
        wait_for(link.exists, 10, "the simulator's pty")
        config = write_config(
            tmp_path / "c.toml", port=link, broker=broker.port, state=tmp_path / "state"
        )
        sub = Subscriber(broker.port, f"{BASE}/game")
        daemon = DaemonProcess(config, tmp_path)
        try:
            with running(daemon):
                out, _ = simulate.communicate(timeout=60)
                expected = [
                    line.split()[-1] for line in out.splitlines() if line.startswith("game ")
                ]
                assert len(expected) == games

                def ends() -> list[str]:
                    return [
                        p.get("number") or p["reason"]
                        for p in sub.on(f"{BASE}/game")
                        if p["event"] in ("result", "no_spin")
                    ]

                wait_for(lambda: len(ends()) >= games, 20, f"{games} game ends")
                assert ends() == expected
        finally:
            sub.close()
    finally:
        if simulate.poll() is None:
            simulate.kill()
            simulate.wait()
