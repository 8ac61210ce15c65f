"""Signed golden outputs: ``wheeld replay --key tests/keys/test-signing.key CAPTURE``.

Ed25519 signatures are deterministic, so the same capture and the same (test)
key always give the same bytes. ``python -m tests.captures.signed`` rewrites them.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from wheeld.cli import main as wheeld

HERE = Path(__file__).parent
CAPTURES = HERE.parent
#: The fixed test key (published: never a real table's).
TEST_KEY = CAPTURES.parent / "keys" / "test-signing.key"
TEST_PUBLIC_KEY = TEST_KEY.with_suffix(".pub")
#: The captures whose signed replay is pinned: games, a double-zero wheel, a lost link.
SIGNED = ("wrp/normal-games", "wrp/double-zero", "wrp/fault-wheel-link-lost")


def signed_pairs() -> list[tuple[Path, Path]]:
    """Each pinned capture and its signed golden output."""
    return [
        (CAPTURES / f"{name}.cap", HERE / f"{Path(name).name}.expected.jsonl") for name in SIGNED
    ]


def signed_replay(capture: Path, key: Path = TEST_KEY) -> str:
    """What ``wheeld replay --key KEY CAPTURE`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = wheeld(["replay", "--key", str(key), str(capture)])
    if status:
        raise SystemExit(f"wheeld replay --key {key} {capture} failed with status {status}")
    return out.getvalue()
