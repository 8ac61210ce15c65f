"""Golden replays: what ``wheeld replay`` prints for a capture, to compare with the
``.expected.jsonl`` kept beside it.

A driver's distribution keeps its captures with their golden outputs and checks
them with ``replay_output``; a changed line is a changed decision. ``regenerate``
rewrites them after an intended change, without the repository's ``tests.captures``.
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


def regenerate(folders: Iterable[Path]) -> list[Path]:
    """Rewrite the golden output of every capture under ``folders`` after an intended
    change in decisions; the outputs that changed, for the commit to explain."""
    changed = []
    for capture, expected in golden_pairs(folders):
        output = replay_output(capture)
        if not expected.exists() or expected.read_text(encoding="utf-8") != output:
            expected.write_text(output, encoding="utf-8")
            changed.append(expected)
    return changed
