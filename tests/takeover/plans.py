"""Which boundaries to cut at, and who takes over each time.

Every plan is built from the boundaries the reference run found (so from the
daemon's publish order of the day), never from a list written down here.
"""

from __future__ import annotations

import itertools

from tests.chaos.harness import GAME_TOPIC
from tests.takeover.proxy import Cut
from tests.takeover.rig import WHOLE_GAME, Boundary, Successor

Plan = list[tuple[Boundary, Successor]]
SUCCESSORS: tuple[Successor, ...] = ("standby", "lost_disk", "returning")


def every_boundary(boundaries: list[Boundary], successor: Successor) -> Plan:
    """Each boundary in turn, before and after, each time with ``successor``."""
    return [(boundary, successor) for boundary in boundaries]


def quick(boundaries: list[Boundary]) -> Plan:
    """Just after each game message reached the broker (what consumers saw first), the
    successors taking turns: a few cuts, each at a place where what the broker retains
    matters most."""
    after_game = [b for b in boundaries if b.cut.topic == GAME_TOPIC and b.cut.mode == "after"]
    successors = itertools.cycle(SUCCESSORS)
    return [(boundary, next(successors)) for boundary in after_game]


def after_game_message(event: str) -> Boundary:
    """Just after the game message of ``event`` (of a whole game) reached the broker:
    defined by the game message itself, whatever order the other topics go out in."""
    events = WHOLE_GAME[: WHOLE_GAME.index(event) + 1]
    return Boundary(-1, Cut(GAME_TOPIC, len(events), events, "after"))
