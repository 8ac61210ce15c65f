"""The simulated wheel is fair: every pocket as likely as any other (chi-squared, 1%).

Slow (a few minutes): tens of thousands of games through the decoder and the
engine. Run alone with `pytest -m slow`.
"""

from __future__ import annotations

from collections import Counter

import pytest

from wheeld.drivers.wrp import WrpDecoder
from wheeld.engine import GameEngine
from wheeld.game import Result
from wheeld.rules import RulesConfig
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator

# Upper 1% points of the chi-squared distribution (scipy.stats.chi2.ppf(0.99, df)).
CHI2_99 = {36: 58.619, 37: 59.893}
BATCH = 1000


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("pockets", "games"), [(37, 37_000), (38, 38_000)])
def test_every_pocket_is_equally_likely(pockets: int, games: int) -> None:
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
