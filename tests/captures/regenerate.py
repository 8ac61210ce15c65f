"""Regenerate the golden outputs after an intended change.

    python -m tests.captures.regenerate             # every .expected.jsonl from its capture
    python -m tests.captures.regenerate --captures  # also rewrite the scripted WRP/1 captures

Every capture is here or with its driver's distribution
(``drivers/*/tests/captures/``); replaying one needs its driver installed.
Review the diff (``git diff tests/captures drivers``) before committing: every
changed line is a changed decision.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

from tests.captures.scenarios import SCENARIOS
from wheeld.cli import main as wheeld

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def golden_pairs() -> list[tuple[Path, Path]]:
    """Every capture, here and with each driver, with the golden output beside it."""
    folders = [HERE, *sorted(REPO.glob("drivers/*/tests/captures"))]
    captures = [cap for folder in folders for cap in sorted(folder.rglob("*.cap"))]
    return [(cap, cap.with_suffix(".expected.jsonl")) for cap in captures]


def replay_output(capture: Path) -> str:
    """What ``wheeld replay CAPTURE`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = wheeld(["replay", str(capture)])
    if status:
        raise SystemExit(f"wheeld replay {capture} failed with status {status}")
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", action="store_true", help="rewrite scripted captures too")
    args = parser.parse_args()
    if args.captures:
        for name, scenario in SCENARIOS.items():
            path = HERE / "wrp" / f"{name}.cap"
            path.write_text(scenario().capture([f"scenario: {name} (tests/captures/scenarios.py)"]))
            print(f"wrote {path.relative_to(HERE)}")
    for capture, golden in golden_pairs():
        golden.write_text(replay_output(capture))
        print(f"wrote {golden.relative_to(REPO)}")


if __name__ == "__main__":
    main()
