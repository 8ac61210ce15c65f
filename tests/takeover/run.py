"""The takeover sweep from the command line, with its whole report.

    python -m tests.takeover.run [--successor standby|lost_disk|quick] [--seed S]
        [--workdir DIR] [--speed X]

Records a reference game, cuts the daemon in charge at every boundary found
there (``quick``: the pytest quick subset), a successor taking over each time,
and prints every violation by boundary, with the payloads and who published
them. The exit status is 1 when anything was found. The work directory keeps
every log (both daemons, the wheel, the broker) and both state directories.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.takeover.plans import SUCCESSORS, every_boundary, quick
from tests.takeover.rig import SPEED, run_plan, takeover_rig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--successor", choices=[*SUCCESSORS, "quick"], default="standby")
    parser.add_argument("--seed", type=int, default=3, help="the wheel's random seed")
    parser.add_argument("--speed", type=float, default=SPEED, help="simulated wheel speed-up")
    parser.add_argument("--workdir", type=Path, help="where logs and state go (default: temp)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wheeld-takeover-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"takeover: {args.successor}, seed {args.seed}, logs in {workdir}", flush=True)
    started = time.monotonic()
    with takeover_rig(workdir, seed=args.seed, speed=args.speed) as rig:
        boundaries = rig.reference()
        if args.successor == "quick":
            plan = quick(boundaries)
        else:
            plan = every_boundary(boundaries, args.successor)
        run_plan(rig, plan)
        outcome = rig.finish()
    violations = outcome.violations()
    print(outcome.report(violations))
    print(f"takeover: {time.monotonic() - started:.1f} s")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
