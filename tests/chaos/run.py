"""The chaos suite's long run: random faults, one after another, then the check.

    python -m tests.chaos.run --minutes 30 [--seed S] [--fault NAME ...] [--workdir DIR]

Faults are drawn from ``tests.chaos.faults.FAULTS`` (or only those named), each
at a random point of play, and each followed by games ending again. At the end
the journal is checked against what the persistent subscriber received. The
work directory keeps every log (daemon, wheel, broker) and the journal; exit
status 1 names what went wrong.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.chaos.faults import FAULTS, inject, unavailable
from tests.chaos.harness import chaos_rig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to throw faults")
    parser.add_argument("--seed", type=int, help="random seed (default: from the clock)")
    parser.add_argument(
        "--fault",
        action="append",
        choices=sorted(FAULTS),
        help="throw only this fault (repeatable; default: every fault)",
    )
    parser.add_argument("--speed", type=float, default=20.0, help="simulated wheel speed-up")
    parser.add_argument(
        "--workdir", type=Path, help="where logs and state go (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    names = args.fault or sorted(FAULTS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wheeld-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {seed}, faults {', '.join(names)}, logs in {workdir}", flush=True)
    choose = random.Random(seed)
    thrown: Counter[str] = Counter()
    started = time.monotonic()
    deadline = started + args.minutes * 60
    try:
        with chaos_rig(workdir, seed=seed, speed=args.speed) as rig:
            for name, why in ((n, unavailable(rig, n)) for n in list(names)):
                if why is not None:
                    print(f"chaos: not throwing {name}: {why}", file=sys.stderr)
                    names.remove(name)
            if not names:
                print("chaos: no fault can be thrown here", file=sys.stderr)
                return 1
            while time.monotonic() < deadline:
                name = choose.choice(names)
                print(f"{time.monotonic() - started:7.1f} s  {name}", flush=True)
                inject(rig, name)
                thrown[name] += 1
            verdict = rig.finish()
    except AssertionError as exc:  # a wait timed out: the rig stopped recovering
        print(f"chaos: FAILED after {sum(thrown.values())} faults: {exc}", file=sys.stderr)
        return 1
    print(
        f"chaos: {sum(thrown.values())} faults ({', '.join(f'{n} {c}' for n, c in thrown.items())})"
    )
    print(f"chaos: {verdict.summary()}")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
