"""A mutation fuzzer for the Cammegh SS2 decoder feeding the game engine.

    python drivers/cammegh/tests/ss2_fuzz.py --seconds 600 [--seed S] [--failures DIR]
    python drivers/cammegh/tests/ss2_fuzz.py --replay FILE     # judge one saved input

Seeds (``corpus/`` beside this file) are stretches of the real captures as raw serial
bytes, a few games each. Each input is a seed put through a few random
mutations: bit flips, byte insertions and deletions, splices with another
seed, and digit rewrites (the corruption that yields frames the parser still
accepts). It is fed line by line, 500 ms of host time apart as the wheel sends
them, through ``CammeghDecoder`` into ``GameEngine``, and judged:

1. nothing raises;
2. every published number is justified by the input's own lines, within the
   game that publishes it (from the line that opened it to the line that ended
   it, spin number as the result says): two state-5 frames of that spin giving
   the number, or one and a bare winning-number line saying the same; three
   state-5 frames when it is the previous game's number (the ``win`` of a
   state 1-4 frame of that spin), which no bare line vouches for.

The first failing input is written to ``--failures`` (if given) and the run
exits 1. Only the standard library's ``random`` drives it: a seed reproduces
the same inputs.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from wheeld.core.engine import GameEngine
from wheeld.core.events import WheelRecords
from wheeld.core.game import Decision, Result, Spinning
from wheeld.core.reconcile import reconcile
from wheeld.core.rules import RulesConfig
from wheeld.drivers import WheelDecoder
from wheeld_cammegh.decoder import CammeghDecoder

CORPUS = Path(__file__).parent / "corpus"
#: Inputs grow by splices; past this they are cut back.
MAX_INPUT = 64 * 1024
START = 1_760_000_000.0
STATUS_EVERY_S = 0.5

#: The oracle's own reading of a line, independent of the driver's parser.
_LINE_END = re.compile(rb"\r|\n")
_STATUS = re.compile(rb"\*X;([1-5]);(\d{3});([ \d]{2});[0-9A-Fa-f];\d{3};[01]")
_BARE = re.compile(rb"\d{1,2}")


def load_corpus(directory: Path = CORPUS, pattern: str = "*.ss2") -> list[bytes]:
    """The seeds, in name order."""
    seeds = [path.read_bytes() for path in sorted(directory.glob(pattern))]
    if not seeds:
        raise SystemExit(f"no seeds in {directory}")
    return seeds


class Mutator:
    """Random edits of a seed, reproducible from the ``random.Random`` given."""

    def __init__(self, rng: random.Random, seeds: list[bytes]) -> None:
        self.rng = rng
        self.seeds = seeds

    def __call__(self, data: bytes) -> bytes:
        edits = (self.flip, self.insert, self.delete, self.splice, self.digit, self.digit)
        buf = bytearray(data)
        for _ in range(self.rng.randint(1, 6)):
            self.rng.choice(edits)(buf)
        return bytes(buf[:MAX_INPUT])

    def _at(self, buf: bytearray) -> int:
        return self.rng.randrange(len(buf) + 1)

    def flip(self, buf: bytearray) -> None:
        if buf:
            buf[self._at(buf) % len(buf)] ^= 1 << self.rng.randrange(8)

    def insert(self, buf: bytearray) -> None:
        at = self._at(buf)
        junk = self.rng.choice([b"\r", b"\n", b"\n\r", b"*X;5;", b"5", b";", b" "])
        buf[at:at] = junk if self.rng.random() < 0.7 else self.rng.randbytes(3)

    def delete(self, buf: bytearray) -> None:
        at = self._at(buf)
        del buf[at : at + self.rng.randint(1, 40)]

    def splice(self, buf: bytearray) -> None:
        other = self.rng.choice(self.seeds)
        start = self.rng.randrange(len(other))
        buf[self._at(buf) :] = other[start : start + self.rng.randint(20, 4000)]

    def digit(self, buf: bytearray) -> None:
        digits = [i for i, byte in enumerate(buf) if 0x30 <= byte <= 0x39]
        if digits:
            buf[self.rng.choice(digits)] = self.rng.choice(b"0123456789")


@dataclass(slots=True)
class Failure:
    why: str

    def __str__(self) -> str:
        return self.why


def _lines(data: bytes) -> list[bytes]:
    """The input cut into lines as the wheel sent them (terminators kept)."""
    pieces: list[bytes] = []
    start = 0
    for match in _LINE_END.finditer(data):
        pieces.append(data[start : match.end()])
        start = match.end()
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def _justified(lines: list[bytes], number: str, spin: int) -> bool:
    """Two state-5 frames of ``spin`` giving ``number``, or one and a bare line saying it;
    three state-5 frames for the previous game's number."""
    frames = bare = 0
    previous = False
    for raw in lines:
        line = raw.strip()
        if match := _STATUS.fullmatch(line):
            state, frame_spin, win = match.groups()
            if int(frame_spin) == spin and win.strip() == number.encode():
                frames += state == b"5"
                previous |= state != b"5"
        elif _BARE.fullmatch(line):
            bare += line == number.encode()
    if previous:
        return frames >= 3
    return frames >= 2 or (frames >= 1 and bare >= 1)


def results(lines: list[bytes], decoder: WheelDecoder, engine: GameEngine) -> Iterator[Played]:
    """Feed the lines, 500 ms apart, through the driver and the rules: every result,
    with the lines of its game. The wheel's log, when its replies are read, is held
    against the results so far as the pipeline holds it (which must never raise)."""
    opened_at = 0
    published: list[str] = []
    for index, line in enumerate(lines):
        now = START + index * STATUS_EVERY_S
        decisions: list[Decision] = []
        deadline = engine.link_deadline()
        if deadline is not None and now >= deadline:
            decisions += engine.on_host_time(now)
        for event in decoder.feed(line, now):
            if isinstance(event, WheelRecords):
                reconcile(event.games, event.judged_from, published)
            decisions += engine.on_event(event, now)
        for decision in decisions:
            if isinstance(decision, Spinning):
                opened_at = index
            elif isinstance(decision, Result):
                published.insert(0, decision.number)
                yield Played(decision, index, opened_at, lines[opened_at : index + 1])


@dataclass(slots=True)
class Played:
    """A published result, the line that ended its game, and that game's lines."""

    result: Result
    index: int
    opened_at: int
    game: list[bytes]

    def unjustified(self, spin: object) -> Failure:
        return Failure(
            f"result {self.result.number} (spin {spin}) at line {self.index} is not "
            f"justified by lines {self.opened_at}..{self.index}"
        )


def check(data: bytes, rules: RulesConfig | None = None) -> Failure | None:
    """Feed ``data`` through the driver and the rules; why it fails the oracles, if it does."""
    engine = GameEngine(rules or RulesConfig())
    try:
        for played in results(_lines(data), CammeghDecoder(), engine):
            spin = played.result.extra.get("spin")
            if not isinstance(spin, int) or not _justified(played.game, played.result.number, spin):
                return played.unjustified(spin)
    except Exception:
        return Failure("raised:\n" + traceback.format_exc())
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """What a fuzz run feeds and judges: the seeds and the oracle (the SS2's by default;
    ``mercury_fuzz.py`` has the Mercury's)."""

    name: str
    check: Callable[[bytes], Failure | None]
    pattern: str = "*.ss2"


SS2 = Target("ss2", check)


def fuzz(
    seconds: float, seed: int, failures: Path | None = None, target: Target = SS2
) -> tuple[int, Failure | None]:
    """Mutate and judge inputs for ``seconds``; (inputs judged, the first failure)."""
    rng = random.Random(seed)
    seeds = load_corpus(CORPUS, target.pattern)
    mutate = Mutator(rng, seeds)
    deadline = time.monotonic() + seconds
    judged = 0
    while time.monotonic() < deadline:
        data = mutate(rng.choice(seeds))
        judged += 1
        failure = target.check(data)
        if failure is not None:
            if failures is not None:
                failures.mkdir(parents=True, exist_ok=True)
                path = failures / f"{target.name}-seed{seed}-input{judged}{target.pattern[1:]}"
                path.write_bytes(data)
                failure.why += f"\n(input saved to {path})"
            return judged, failure
    return judged, None


def main(argv: list[str] | None = None, target: Target = SS2) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--failures", type=Path, default=None, help="where to save a failure")
    parser.add_argument("--replay", type=Path, default=None, help="judge one saved input")
    args = parser.parse_args(argv)
    if args.replay is not None:
        failure = target.check(args.replay.read_bytes())
        print(failure or "ok")
        return 1 if failure else 0
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    judged, failure = fuzz(args.seconds, seed, args.failures, target)
    print(f"{target.name} fuzz: seed {seed}, {judged} inputs", file=sys.stderr)
    if failure is not None:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
