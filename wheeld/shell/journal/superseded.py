"""Games this journal decided whose messages another controller's went on past.

When two controllers ran one table (both passed the start-up check at the same
moment), the one that stands down drops the game messages it never published
(``Outbox.supersede``): another controller announced those game ids, with its
own outcomes. Its journal still holds its own decisions for them, signed and
chained (the evidence stays), but they are no results of the table: the ids
are kept here, as ranges in the ``state`` table, and ``recall`` (the command
line, the MQTT command, the archive's gap filling) never serves them as such.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

#: The ``state`` key the ranges are kept under: ``[[first, last], ...]``, oldest first.
SUPERSEDED_KEY = "superseded_games"
#: Ranges kept at most (a takeover is rare: each is one range or a few); the oldest go.
MAX_RANGES = 256

Ranges = list[list[int]]


def game_ids_of(payloads: Iterable[str | bytes]) -> set[int]:
    """The game ids the payloads name (those that are JSON objects with one)."""
    found = set()
    for payload in payloads:
        try:
            value = json.loads(payload)
        except ValueError:
            continue
        game_id = value.get("game_id") if isinstance(value, dict) else None
        if type(game_id) is int and game_id > 0:
            found.add(game_id)
    return found


def parse(text: str | None) -> Ranges:
    """The ranges as kept; nothing for a value that does not read as ranges."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [
        [first, last]
        for item in value
        if isinstance(item, list) and len(item) == 2
        for first, last in (item,)
        if type(first) is int and type(last) is int and first <= last
    ]


def merged(ranges: Ranges, game_ids: Iterable[int]) -> Ranges:
    """``ranges`` with ``game_ids`` added, neighbours joined, at most ``MAX_RANGES``."""
    points = sorted({(first, last) for first, last in ranges} | {(g, g) for g in game_ids})
    out: Ranges = []
    for first, last in points:
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return out[-MAX_RANGES:]


def holds(ranges: Ranges, game_id: int) -> bool:
    """Whether ``game_id`` is in one of the ranges."""
    return any(first <= game_id <= last for first, last in ranges)
