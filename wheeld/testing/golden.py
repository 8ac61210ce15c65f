"""Golden replays: what ``wheeld replay`` prints for a capture, to compare with the
``.expected.jsonl`` kept beside it.

A driver's distribution keeps its captures with their golden outputs and checks
them with ``replay_output``; a changed line is a changed decision.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable
from pathlib import Path


def golden_pairs(folders: Iterable[Path]) -> list[tuple[Path, Path]]:
    """Every capture (``*.cap``) under ``folders``, with the golden output beside it."""
    captures = [cap for folder in folders for cap in sorted(Path(folder).rglob("*.cap"))]
    return [(cap, cap.with_suffix(".expected.jsonl")) for cap in captures]


def replay_output(capture: Path) -> str:
    """What ``wheeld replay CAPTURE`` prints (the capture's driver must be installed)."""
    from wheeld.cli import main as wheeld

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = wheeld(["replay", str(capture)])
    if status:
        raise SystemExit(f"wheeld replay {capture} failed with status {status}")
    return out.getvalue()
