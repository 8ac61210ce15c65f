"""``python -m benchmarks.history``: the journal it builds the fast way is one the daemon's
tools take as the daemon's (found: its between-game blocks were hashed with an older
``block_hash``, and the build died with a TypeError; a failed build then hung)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from wheeld.cli import main


def test_a_history_built_the_fast_way_verifies(tmp_path: Path) -> None:
    out = tmp_path / "history"
    build = ["benchmarks.history", "--games", "12", "--build-only", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", *build],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    key = out / "signing.pub"
    assert main(["verify", "--key", str(key), "--state-dir", str(out / "state")]) == 0


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args] if not code else [sys.executable, "-c", code, *args],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_fast_build_writes_the_rows_the_daemon_writes(tmp_path: Path) -> None:
    """``--check``: the daemon's way line by line and the fast way (one transaction a batch,
    the open block's lines in memory) give the same rows (it failed at once when the
    epoch moved to ``wheeld.shell.journal.state``)."""
    done = _python("", "-m", "benchmarks.history", "--check", "--games", "30")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert "the journals are the same, row for row" in done.stdout


_COUNT_STATS = """
import math, sys, time
from pathlib import Path
import benchmarks.history as history
from wheeld.core.stats import Statistics

real = Statistics.to_json_text
calls = []

def counted(self, **extra):
    calls.append(1)
    return real(self, **extra)

Statistics.to_json_text = counted
games = 6
plan = history.Plan(games, 4.0, start=math.floor(time.time() - history.Plan.span_s(games) - 60))
history.build(Path(sys.argv[1]), plan)
print(len(calls))
"""


def test_the_fast_build_computes_the_statistics_text_for_its_last_game_only(
    tmp_path: Path,
) -> None:
    """``<base>/stats`` after every game is acknowledged and dropped from the outbox but
    the last: the build computes its text (a quarter of the pipeline's process) once."""
    done = _python(_COUNT_STATS, str(tmp_path / "history"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "1", done.stdout
