"""The wheel's own games, read straight off an SS2 capture, independently of the driver.

Used to hold the replay of real traffic against what the wheel itself did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

STATUS = re.compile(r"\*X;([1-6]);(\d{3});(..);([0-9A-Fa-f]);(\d{3});([01])")


@dataclass
class WheelGame:
    spin: int
    launched_at: float
    direction: str  # rotor direction at launch: "cw" or "ccw"
    number: str | None = None
    flags: bool = False
    gap: bool = False  # status frames missing while the ball ran
    states: list[int] = field(default_factory=list)


def wheel_games(path: Path) -> list[WheelGame]:
    """Every game the wheel launched (a state 2 -> 3 change seen), in order."""
    games: list[WheelGame] = []
    current: WheelGame | None = None
    previous_state = None
    previous_at = None
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        at_text, direction, text = [*line.split(" ", 2), "", ""][:3]
        if direction != "<":
            continue
        match = STATUS.fullmatch(text)
        if match is None:
            continue
        at = float(at_text)
        state, spin, win, flags, _speed, rotor = match.groups()
        state_n = int(state)
        gap = previous_at is not None and at - previous_at > 1.1
        if current is not None:
            if int(spin) != current.spin:
                current = None
            else:
                if gap and state_n in (3, 4, 5) and current.number is None:
                    current.gap = True
                if flags != "0" and current.number is None:
                    current.flags = True
                if state_n == 5 and current.number is None and win.strip():
                    current.number = win.strip()
                if state_n in (1, 2, 6) and current.number is None:
                    current = None
        if current is None and state_n == 3 and previous_state == 2 and not gap:
            current = WheelGame(int(spin), at, "cw" if rotor == "0" else "ccw", flags=flags != "0")
            games.append(current)
        previous_state, previous_at = state_n, at
    return games


def games_owed_a_result(games: list[WheelGame]) -> list[WheelGame]:
    """Launch to number, no flags, no gaps, after a whole game that alternated."""
    owed = []
    for before, game in pairwise(games):
        whole_before = (
            before.number is not None and not before.gap and before.spin % 256 + 1 == game.spin
        )
        if (
            game.number is not None
            and not game.flags
            and not game.gap
            and whole_before
            and before.direction != game.direction
            and not before.flags
        ):
            owed.append(game)
    return owed
