"""The simulated wheel is fair: every pocket as likely as any other (chi-squared, 1%).

By default 60 games a pocket (seconds: enough to catch a wheel that favours a
pocket or a sector); `pytest --long tests/test_simulator_fairness.py` plays
1,000 a pocket (a few minutes) through the decoder and the engine.
"""

from __future__ import annotations

from collections import Counter

import pytest

from wheeld.core.engine import GameEngine
from wheeld.core.game import Result
from wheeld.core.rules import RulesConfig
from wheeld.drivers.wrp import WrpDecoder
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator

# Upper 1% points of the chi-squared distribution (scipy.stats.chi2.ppf(0.99, df)).
CHI2_99 = {36: 58.619, 37: 59.893}
BATCH = 1000


GAMES_PER_POCKET = 60
GAMES_PER_POCKET_LONG = 1000


@pytest.mark.timeout(900)
@pytest.mark.parametrize("pockets", [37, 38])
def test_every_pocket_is_equally_likely(pockets: int, long_run: bool) -> None:
    games = pockets * (GAMES_PER_POCKET_LONG if long_run else GAMES_PER_POCKET)
    simulator = WheelSimulator(SimulatorSettings(seed=pockets, pockets=pockets))
    decoder = WrpDecoder()
    engine = GameEngine(RulesConfig(), pockets=pockets)
    counts: Counter[str] = Counter()
    for start in range(0, games, BATCH):
        # Decided batch by batch, so the scripted wheel's memory stays small.
        simulator.wheel.lines.clear()
        for _ in range(min(BATCH, games - start)):
            simulator.play()
        for at, frame in simulator.wheel.lines:
            for event in decoder.feed(frame + b"\r\n"):
                counts.update(d.number for d in engine.on_event(event, at) if isinstance(d, Result))
    assert sum(counts.values()) == games
    expected = games / pockets
    statistic = sum((counts[p] - expected) ** 2 / expected for p in simulator.layout.order)
    assert statistic < CHI2_99[pockets - 1], (statistic, counts.most_common(3))
