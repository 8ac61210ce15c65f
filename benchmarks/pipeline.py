"""The table pipeline alone: CPU a game and a frame, with no journal, broker or loop.

``wheeld run`` spends a game's CPU in three places: the pure pipeline (the
driver's decoder, the engine, the decisions, statistics and their payloads,
signing), the journal, and MQTT. This measures the first on its own, over
games a scripted WRP/1 wheel plays (a launch, a ball's passes, a drop, the
rest and the rotor's reversal, with heartbeats at 4 a second throughout),
each line fed as the daemon feeds it and what the pipeline asks after a
commit (``committed``) asked at once. Its figure is the floor under the
daemon's CPU a game (``benchmarks.daemon``): the pipeline's part of the 2 ms
issue 21 allows, measured by ``time.process_time`` in rounds (their median,
and the spread, since CPU time moves with the machine's load).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from wheeld.config import Config
from wheeld.core.signing import Signer
from wheeld.core.stats import Statistics
from wheeld.drivers import driver_named
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld_simulators.scripted import ScriptedWheel


@dataclass(frozen=True, slots=True)
class Figures:
    games: int
    frames: int
    cpu_s: float
    messages: int

    @property
    def ms_a_game(self) -> float:
        return self.cpu_s / self.games * 1000

    @property
    def us_a_frame(self) -> float:
        return self.cpu_s / self.frames * 1e6


def played(games: int, seed: int = 7) -> list[tuple[float, bytes]]:
    """``games`` whole games (results in turn round the wheel), line by line with their times."""
    wheel = ScriptedWheel(start=1_760_000_000.0)
    wheel.hello()
    wheel.advance(3000)
    for game in range(games):
        wheel.game(str((game * seed) % 37))
        wheel.reverse_rotor()
        wheel.advance(20_000)  # the bets of the next game: heartbeats and the rotor
    return [(at, frame + b"\r\n") for at, frame in wheel.lines]


def pipeline(signed: bool) -> TablePipeline:
    """A table as ``wheeld run`` makes it from the default configuration (statistics kept)."""
    config = Config.model_validate({"table": {"id": "BENCH"}, "wheel": {"port": "/dev/null"}})
    settings = TableSettings(
        table=config.table.id,
        base_topic=config.base_topic,
        driver="wrp",
        port="/dev/null",
        pockets=37,
        pocket_order=None,
        rules=config.rules,
        history_length=config.mqtt.history_length,
        after_commit=True,  # as the daemon: what follows a decision, after its commit
    )
    signer = Signer.generate() if signed else None
    stats = Statistics(37, arcs=config.alerts.sector_arcs)
    driver = driver_named("wrp")
    decoder = driver.new_decoder(None)
    # The driver's session too, as the daemon makes it: the table tells it of every line.
    session = driver.session(decoder, None) if driver.session is not None else None
    return TablePipeline(settings, decoder, session, signer=signer, statistics=stats)


def run_once(lines: list[tuple[float, bytes]], games: int, signed: bool) -> Figures:
    table = pipeline(signed)
    messages = 0
    started = time.process_time()
    now = lines[0][0]
    effects = table.start(now)
    for at, line in lines:
        effects = table.on_bytes(line, at)
        messages += len(effects.messages)
        if effects.games:
            messages += len(table.committed().messages)
    spent = time.process_time() - started
    return Figures(games, len(lines), spent, messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unsigned", action="store_true", help="no signer (replay's way)")
    args = parser.parse_args()
    lines = played(args.games)
    runs = [run_once(lines, args.games, not args.unsigned) for _ in range(args.rounds)]
    per_game = [run.ms_a_game for run in runs]
    per_frame = [run.us_a_frame for run in runs]
    print(
        f"pipeline alone, {args.games} games, {runs[0].frames:,} lines"
        f" ({runs[0].frames / args.games:.0f} a game), {runs[0].messages:,} messages,"
        f" {'signed' if not args.unsigned else 'unsigned'}, {args.rounds} rounds"
    )
    print(
        f"CPU a game: median {statistics.median(per_game):.3f} ms"
        f" (spread {min(per_game):.3f}-{max(per_game):.3f}); a line:"
        f" {statistics.median(per_frame):.1f} us (the daemon's whole target: 2 ms a game)"
    )


if __name__ == "__main__":
    main()
