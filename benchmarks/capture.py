"""``--capture``'s writer on a line with no end: the cost of each half of 20 MiB of noise.

A writer that rescanned what it holds of an unfinished line would take ever
longer; this one cuts it into marked pieces of ``CUT_BYTES`` as it comes, so the
second half costs about what the first did. Measured, not asserted (the test of
the same code, tests/test_capture.py, checks the pieces, not the time).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from wheeld.shell.capture_writer import CaptureWriter

#: Line noise with no line end, a third of it escaped in the capture.
CHUNK = b"$WR\xff\x00\x13noise;" * 85


def halves(mebibytes: int = 20) -> tuple[float, float]:
    """CPU seconds for the first and the second half of ``mebibytes`` written with no end."""
    per_half = mebibytes * 1024 * 1024 // (2 * len(CHUNK))
    with tempfile.TemporaryDirectory() as scratch:
        writer = CaptureWriter(Path(scratch) / "r.cap", "wrp")
        spent = []
        for _ in range(2):
            started = time.process_time()
            for _ in range(per_half):
                writer.received(CHUNK, 1.0)
            spent.append(time.process_time() - started)
        writer.received(b"$WRHBT\r\n", 2.0)
        writer.close()
    return spent[0], spent[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mebibytes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    for _ in range(args.rounds):
        first, second = halves(args.mebibytes)
        ratios.append(second / first if first else float("nan"))
        print(
            f"capture, {args.mebibytes} MiB with no line end: first half {first:.3f} s,"
            f" second half {second:.3f} s (CPU), ratio {ratios[-1]:.2f}"
        )
    print(f"median ratio second/first: {statistics.median(ratios):.2f} (linear: about 1)")


if __name__ == "__main__":
    main()
