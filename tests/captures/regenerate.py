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
from pathlib import Path

from tests.captures.scenarios import SCENARIOS
from wheeld.testing.golden import golden_pairs as pairs_under
from wheeld.testing.golden import replay_output

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def golden_pairs() -> list[tuple[Path, Path]]:
    """Every capture, here and with each driver, with the golden output beside it."""
    return pairs_under([HERE, *sorted(REPO.glob("drivers/*/tests/captures"))])


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
