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
