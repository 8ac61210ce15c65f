"""The kiosk recipe of docs/marquee.md: its shell parses, and its script keeps the board up.

The script is run as the recipe gives it, with stand-ins for Chromium and X
and a real marquee server that goes away and comes back.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_marquee import ServedBoard
from wheeld.testing.rig import free_port, wait_for

DOC = Path(__file__).parent.parent / "docs" / "marquee.md"
CURL = shutil.which("curl")


def _recipe_blocks() -> list[str]:
    """The ``sh`` blocks of the kiosk section, as they are copied out of the page."""
    section = DOC.read_text().partition("## The kiosk")[2]
    assert section, "docs/marquee.md has no kiosk section"
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```", section, re.S | re.M)
    return [textwrap.dedent(body) for _, body in blocks]


def _kiosk_script() -> str:
    (script,) = [block for block in _recipe_blocks() if block.startswith("#!/bin/sh\n")]
    return script


def test_every_step_of_the_recipe_is_valid_shell(tmp_path: Path) -> None:
    blocks = _recipe_blocks()
    assert len(blocks) >= 5  # packages, user, autologin, .profile, the script
    for number, block in enumerate(blocks):
        path = tmp_path / f"step{number}.sh"
        path.write_text(block)
        out = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, (block, out.stderr)


def _stand_in(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def kiosk(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The kiosk script, polling fast, for a board on a free port; yields the port and its log."""
    port = free_port()
    log = tmp_path / "kiosk.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Chromium: says when it opens and when it is closed, then shows the page until then.
    _stand_in(
        bin_dir,
        "chromium",
        f'echo "open $$ $*" >> {log}\n'
        f"trap 'echo closed >> {log}; exit 0' TERM\n"
        "sleep 600 &\nwait\n",
    )
    _stand_in(bin_dir, "xset", "exit 0\n")
    _stand_in(
        bin_dir,
        "xrandr",
        "echo 'Screen 0: minimum 8 x 8, current 1080 x 1920, maximum 32767 x 32767'\n",
    )
    _stand_in(bin_dir, "curl", f'echo asked >> {log}\nexec {CURL} "$@"\n')
    script = _kiosk_script()
    assert 'url="http://127.0.0.1:8080/"' in script and "poll=10" in script
    script = script.replace("127.0.0.1:8080", f"127.0.0.1:{port}").replace("poll=10", "poll=0.1")
    script = script.replace("sleep 2", "sleep 0.1")
    path = tmp_path / "wheeld-kiosk"
    path.write_text(script)
    path.chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    process = subprocess.Popen([str(path)], env=environ, start_new_session=True)
    try:
        yield port, log
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the script and its stand-ins, started here
        process.wait(10)


def _lines(log: Path, word: str) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if line.split()[:1] == [word]]


def _board(port: int) -> ServedBoard:
    board = ServedBoard(port)
    board.publish({"online": False})
    return board


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_the_kiosk_opens_the_board_once_it_answers_and_afresh_after_an_outage(
    kiosk: tuple[int, Path],
) -> None:
    port, log = kiosk
    # No board yet: the kiosk keeps asking, and opens nothing (an error page never retries).
    wait_for(lambda: len(_lines(log, "asked")) >= 3, 10, "the kiosk asking for the board")
    assert _lines(log, "open") == []

    board = _board(port)
    try:
        wait_for(lambda: len(_lines(log, "open")) == 1, 10, "the board opened")
        assert _lines(log, "open")[0].endswith(f"http://127.0.0.1:{port}/")
        assert "--kiosk" in _lines(log, "open")[0]
        assert "--window-size=1080,1920" in _lines(log, "open")[0]  # the screen, turned
    finally:
        board.stop()
    # The board unreachable, then back: the page is opened afresh.
    asked = len(_lines(log, "asked"))
    wait_for(lambda: len(_lines(log, "asked")) >= asked + 3, 10, "the kiosk noticing the outage")
    assert len(_lines(log, "open")) == 1  # nothing to open while there is no board
    board = _board(port)
    try:
        wait_for(lambda: len(_lines(log, "open")) == 2, 10, "the board opened again")
        assert len(_lines(log, "closed")) == 1  # the old page closed first

        # Chromium gone (a crash): opened again.
        pid = int(_lines(log, "open")[-1].split()[1])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(_lines(log, "open")) == 3, 10, "Chromium started again")
    finally:
        board.stop()
