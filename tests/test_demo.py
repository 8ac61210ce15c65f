"""The demo as a new user runs it: live results soon, and Ctrl-C ends all of it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


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


@pytest.mark.parametrize("broker", ["embedded", "auto"])
def test_demo_shows_results_and_stops_on_ctrl_c(broker: str) -> None:
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheeld",
            "demo",
            "--broker",
            broker,
            "--seed",
            "3",
            "--fault-rate",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert demo.stdout is not None
    seen: list[str] = []
    work = ""
    deadline = time.monotonic() + 30
    try:
        os.set_blocking(demo.stdout.fileno(), False)
        while time.monotonic() < deadline and not any("RESULT" in line for line in seen):
            line = demo.stdout.readline()
            if line:
                seen.append(line)
                match = re.search(r"daemon log in (\S+)/wheeld.log", line)
                work = match.group(1) if match else work
            else:
                time.sleep(0.05)
        assert any("RESULT" in line for line in seen), "".join(seen)
        assert work and _processes_mentioning(work), "the daemon runs"
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        assert demo.wait(20) in (0, 130)
        leftover = _processes_mentioning(work)
        assert leftover == [], f"processes left behind: {leftover}"
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
