"""``python -m wheeld.contract [--check] [--out DIR]``: rewrite (or check) docs/api/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wheeld.contract.asyncapi import REGENERATE, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wheeld.contract",
        description="Write the AsyncAPI document and the JSON Schemas built from the models.",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("docs/api"), help="where (default: docs/api)"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files are stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        old = stale(args.out)
        for name in old:
            print(f"{args.out / name}: stale (run {REGENERATE})", file=sys.stderr)
        return 1 if old else 0
    written = write(args.out)
    print(f"wrote {len(written)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
