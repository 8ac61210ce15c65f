"""The statistics alone: CPU an outcome to count it and write ``<base>/stats``.

After each outcome the daemon calls ``Statistics.add`` with the game's payloads
(launch, no more bets, the result or no-spin) and ``to_json_text`` for the
retained ``<base>/stats``. This times exactly that, per outcome, over a random
table (a no-spin in fifty, the rotor turning each way in turn) after a warm-up
long enough to fill the default windows (so they slide, as in a long-running
daemon), by ``time.process_time`` in rounds: their median and spread, since CPU
time moves with the machine's load.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from wheeld.core.layout import layout_for
from wheeld.core.stats import Statistics


def games(count: int, seed: int) -> Iterator[list[dict[str, Any]]]:
    """``count`` games' payloads, a list a game, as the table publishes them."""
    rng = random.Random(seed)
    order = layout_for(37).order
    clock = datetime(2026, 1, 1, tzinfo=UTC)

    def ts() -> str:
        return clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    for game in range(1, count + 1):
        clock += timedelta(seconds=rng.uniform(15, 60))
        launch = {"event": "spinning", "game_id": game, "ts": ts(), "rotor_rpm": 24.5}
        clock += timedelta(seconds=rng.uniform(8, 12))
        closed = {"event": "no_more_bets", "game_id": game, "ts": ts()}
        clock += timedelta(seconds=rng.uniform(12, 25))
        outcome: dict[str, Any]
        if rng.random() < 0.02:
            outcome = {"event": "no_spin", "game_id": game, "ts": ts(), "reason": "misfire"}
        else:
            outcome = {
                "event": "result",
                "game_id": game,
                "ts": ts(),
                "number": rng.choice(order),
                "rotor_direction": ("cw", "ccw")[game % 2],
                "revolutions": rng.randint(8, 16),
            }
        yield [launch, closed, outcome]


def run_once(warm: list[list[dict[str, Any]]], timed: list[list[dict[str, Any]]]) -> float:
    """Microseconds of CPU an outcome over ``timed``, after ``warm`` (not timed)."""
    table = Statistics(37)
    for game in warm:
        for event in game:
            table.add(event)
    table.to_json_text(schema_version=1)
    started = time.process_time()
    for game in timed:
        for event in game:
            table.add(event)
        table.to_json_text(schema_version=1)
    return (time.process_time() - started) / len(timed) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", type=int, default=10_000)
    parser.add_argument("--warm", type=int, default=1_500, help="games before the timing")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    played = list(games(args.warm + args.outcomes, seed=21))
    warm, timed = played[: args.warm], played[args.warm :]
    per_outcome = [run_once(warm, timed) for _ in range(args.rounds)]
    print(
        f"statistics alone, {args.outcomes:,} outcomes after {args.warm:,}, {args.rounds} rounds:"
        f" add + to_json_text median {statistics.median(per_outcome):.0f} us an outcome"
        f" (spread {min(per_outcome):.0f}-{max(per_outcome):.0f})"
    )


if __name__ == "__main__":
    main()
