"""A mutation fuzzer for the Cammegh Mercury decoder feeding the game engine.

    python drivers/cammegh/tests/mercury_fuzz.py --seconds 600 [--seed S] [--failures DIR]
    python drivers/cammegh/tests/mercury_fuzz.py --replay FILE     # judge one saved input

The SS2 fuzzer's mutations (``ss2_fuzz.py``) over the Mercury seeds
(``corpus/*.mer``: the simulator's games at each output level, written by
``mercury_captures.py``), fed line by line 500 ms apart through
``MercuryDecoder`` into ``GameEngine``, and judged:

1. nothing raises;
2. every published number is justified by the input's own lines within its
   game: two state-5 frames of its spin (or the next count, which the wheel
   may show once the number stands) giving it, or one and a bare line; three
   for the previous game's number; on Basic, its ``*W`` line;
3. every counted ``revolutions`` is at least ``min_ball_revolutions`` and at
   most the largest ``kk`` the game's lines show.
"""

from __future__ import annotations

import re
import sys
import traceback

from ss2_fuzz import Failure, Target, _lines, main, results
from wheeld.core.engine import GameEngine
from wheeld.core.rules import RulesConfig
from wheeld_cammegh.mercury import MercuryDecoder

#: The oracle's own reading of a line, independent of the driver's parser.
_STATUS = re.compile(
    rb"\*X;([1-7]);(\d{3});([ \d]{2});[0-9A-Fa-f];\d{3};[01]"
    rb"(?:;[0-9A-Fa-f]{4};([0-9A-Fa-f]{2});[?01];(?:[0-9A-Fa-f]{5}|\?{5});(?:[ \d]{2}|\?\?))?"
)
_BARE = re.compile(rb"\d{1,2}")
_BASIC = re.compile(rb"\*W ?([ \d]{1,2})")


def _number(field: bytes) -> bytes:
    text = field.strip()
    return text if text in (b"0", b"00") else text.lstrip(b"0")


def _justified(lines: list[bytes], number: str, spin: int | None) -> bool:
    wanted = number.encode()
    frames = bare = basic = 0
    previous = False
    for raw in lines:
        line = raw.strip()
        if match := _STATUS.fullmatch(line):
            state, frame_spin, win, _ = match.groups()
            if spin is None or int(frame_spin) not in (spin, (spin + 1) % 256):
                continue
            if _number(win) == wanted:
                frames += state == b"5"
                previous |= state != b"5"
        elif _BARE.fullmatch(line):
            bare += _number(line) == wanted
        elif match := _BASIC.fullmatch(line):
            basic += _number(match.group(1)) == wanted
    if spin is None:
        return basic >= 1
    if previous:
        return frames >= 3
    return frames >= 2 or (frames >= 1 and bare >= 1)


def _most_revolutions(lines: list[bytes]) -> int:
    counts = [
        int(match.group(4), 16)
        for raw in lines
        if (match := _STATUS.fullmatch(raw.strip())) and match.group(4) is not None
    ]
    return max(counts, default=0)


def check(data: bytes, rules: RulesConfig | None = None) -> Failure | None:
    """Feed ``data`` through the driver and the rules; why it fails the oracles, if it does."""
    rules = rules or RulesConfig()
    try:
        for played in results(_lines(data), MercuryDecoder(), GameEngine(rules)):
            result, game = played.result, played.game
            spin = result.extra.get("spin")
            if not _justified(game, result.number, spin if isinstance(spin, int) else None):
                return played.unjustified(spin)
            counted = result.revolutions
            if counted is not None and not (
                rules.min_ball_revolutions <= counted <= _most_revolutions(game)
            ):
                return Failure(f"result at line {played.index} counts {counted} revolutions")
    except Exception:
        return Failure("raised:\n" + traceback.format_exc())
    return None


MERCURY = Target("mercury", check, "*.mer")

if __name__ == "__main__":
    sys.exit(main(target=MERCURY))
