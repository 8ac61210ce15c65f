"""Acceptance: no single corrupted SS2 line makes wheeld publish a number the wheel never gave.

The SS2 line has no checksum. For every real capture, every status frame near a
winning number (each state-5 frame, the frames either side of one, and the bare
winning-number lines with theirs) is corrupted in every way one character can
be: its state digit replaced by each of 0-9, each digit of its ``win`` field
(or of the bare line) replaced by each of 0-9. Every state-4 frame is also
flipped to state 5, the one-bit attack that used to publish the previous game's
number. Each corrupted capture must give, for every game, the wheel's own
number or a no-spin: never another number.

Replaying a whole capture per corruption would take hours, so the replay is
snapshotted before each corrupted line and run from there until it has caught
up with the clean replay (the same decoder and engine state), or until no game
is open once the corrupted game's spin is over. A number is only ever
confirmed from the frames of its own game (the bare line and the unconfirmed
frame are forgotten at each launch), so later games cannot inherit a corrupted
number; they can only be voided by what the corruption did to alternation or
the re-spin count. Corruptions that make a frame unreadable all decode alike
(the line is counted and dropped), so one of them stands for all.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ss2_fuzz
from ss2_games import WheelGame, wheel_games
from wheeld.capture import read
from wheeld.engine import GameEngine
from wheeld.game import Decision, Result
from wheeld.rules import RulesConfig
from wheeld_cammegh.decoder import CammeghDecoder, parse_status

CAPTURES = sorted((Path(__file__).parent / "captures").glob("*.cap"))

_STATUS = re.compile(rb"\*X;(\d);\d{3};([ \d]{2});")
_BARE = re.compile(rb"\d{1,2}")
#: Lines either side of a winning number whose corruption is tried exhaustively.
NEIGHBOURS = 2


@dataclass(slots=True)
class Replay:
    """A decoder and an engine fed a capture's wheel lines, as ``wheeld replay`` does."""

    decoder: CammeghDecoder
    engine: GameEngine

    @classmethod
    def fresh(cls) -> Replay:
        return cls(CammeghDecoder(), GameEngine(RulesConfig()))

    def feed(self, at: float, data: bytes) -> list[Decision]:
        engine = self.engine
        out: list[Decision] = []
        deadline = engine.link_deadline()
        if deadline is not None and at >= deadline:
            out += engine.on_host_time(at)
        for event in self.decoder.feed(data + b"\r\n", at):
            out += engine.on_event(event, at)
        return out

    @property
    def idle(self) -> bool:
        return self.engine.game_in_progress is None and self.decoder.last_status is not None

    def fingerprint(self) -> str:
        """Everything that decides the future (not the counters, not the rules)."""
        decoder = {k: v for k, v in vars(self.decoder).items() if k != "counters"}
        engine = {k: v for k, v in vars(self.engine).items() if k not in ("_handlers", "layout")}
        return repr((sorted(decoder.items()), sorted(engine.items())))


def corruptions(line: bytes) -> Iterator[bytes]:
    """Every way to replace one digit of the state or the winning number by 0-9.

    Of the variants no status parser accepts, only the first is given: they
    all decode as the same dropped line.
    """
    positions: list[int] = []
    is_status = _STATUS.match(line)
    if is_status:
        win = is_status.start(2)
        positions = [is_status.start(1)] + [win + k for k in (0, 1) if line[win + k] != 0x20]
    elif _BARE.fullmatch(line):
        positions = list(range(len(line)))
    unreadable_given = False
    for position in positions:
        for digit in b"0123456789":
            if line[position] == digit:
                continue
            variant = line[:position] + bytes((digit,)) + line[position + 1 :]
            if is_status and parse_status(variant) is None:
                if unreadable_given:
                    continue
                unreadable_given = True
            yield variant


def flipped_to_state_5(line: bytes) -> Iterator[bytes]:
    if line.startswith(b"*X;4;"):
        yield b"*X;5;" + line[5:]


def truth(games: list[WheelGame], spin: int, at: float) -> str | None:
    """The wheel's own number for the game of ``spin`` going on at ``at``."""
    launched = [g for g in games if g.spin == spin and g.launched_at <= at]
    return launched[-1].number if launched else None


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_no_single_corrupted_line_publishes_another_number(capture: Path) -> None:
    games = wheel_games(capture)
    lines = [(line.at, line.data) for line in read(capture).lines if line.direction == "<"]
    near_number = {
        i + k
        for i, (_, data) in enumerate(lines)
        if data.startswith(b"*X;5;") or _BARE.fullmatch(data)
        for k in range(-NEIGHBOURS, NEIGHBOURS + 1)
    }

    # The clean replay: where each spin ends, and the state after every idle line.
    clean = Replay.fresh()
    snapshots: dict[int, bytes] = {}
    idle_prints: dict[int, str] = {}
    spin_ends: list[int] = []
    for i, (at, data) in enumerate(lines):
        if i in near_number or data.startswith(b"*X;4;"):
            snapshots[i] = pickle.dumps(clean)
        spin = clean.decoder.last_status.spin if clean.decoder.last_status else None
        clean.feed(at, data)
        status = clean.decoder.last_status
        if status is not None and spin is not None and status.spin != spin:
            spin_ends.append(i)
        if clean.idle:
            idle_prints[i] = clean.fingerprint()

    tried = 0
    for i, snapshot in snapshots.items():
        at, data = lines[i]
        variants = corruptions(data) if i in near_number else flipped_to_state_5(data)
        spin_over = next((end for end in spin_ends if end > i), len(lines) - 1)
        for variant in variants:
            tried += 1
            run: Replay = pickle.loads(snapshot)
            for j in range(i, len(lines)):
                decisions = run.feed(lines[j][0], variant if j == i else lines[j][1])
                for result in decisions:
                    if isinstance(result, Result):
                        wheel = truth(games, result.extra["spin"], result.at)
                        assert result.number == wheel, (
                            f"{capture.name}: line {i} {data!r} -> {variant!r} published "
                            f"{result.number} for spin {result.extra['spin']} (wheel: {wheel})"
                        )
                caught_up = j >= spin_over or idle_prints.get(j) == run.fingerprint()
                if j > i and run.idle and caught_up:
                    break  # nothing open once the spin is over, or the same as the clean replay
    assert tried > 0 or not games


def test_the_ss2_fuzzer_finds_nothing_in_three_seconds() -> None:
    # The long run is documented in the driver's README.md; this keeps the target working.
    judged, failure = ss2_fuzz.fuzz(3.0, seed=2025)
    assert failure is None, str(failure)
    assert judged > 100


def test_the_fuzz_oracle_refuses_an_unconfirmed_number() -> None:
    seed = (ss2_fuzz.CORPUS / "studio-games-2025-0-300.ss2").read_bytes()
    assert ss2_fuzz.check(seed) is None
    lines = ss2_fuzz._lines(seed)
    assert not ss2_fuzz._justified(lines, "31", 2)  # the previous game's number
    assert ss2_fuzz._justified(lines, "28", 2)
