"""Acceptance: no single corrupted SS2 line makes wheeld publish a number the wheel never gave.

The SS2 line has no checksum. For every real capture, every status frame near a
winning number (each state-5 frame, the frames either side of one, and the bare
winning-number lines with theirs) is corrupted in every way one character can
be: its state digit replaced by each of 0-9, each digit of its ``win`` field
(or of the bare line) replaced by each of 0-9. Every state-4 frame is also
flipped to state 5, the one-bit attack that used to publish the previous game's
number; and near each game end (its last ``NEAR_END`` state-4 frames) every
pair of adjacent state-4 frames is flipped to 5, and every one of them is
flipped with a stray copy of the previous game's bare line before it: the two
corruptions that used to publish the previous game's number together. Each
corrupted capture must give, for every game, the wheel's own number or a
no-spin: never another number. The quick run tries one single-line corruption
in ``QUICK_ONE_IN``, ``pytest --long`` every one; the pairs and the stray bare
lines are tried near every game end in both.

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

import functools
import itertools
import json
import pickle
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import ss2_fuzz
from ss2_games import WheelGame, wheel_games
from wheeld.core.capture import read
from wheeld.core.engine import GameEngine
from wheeld.core.game import Decision, Result
from wheeld.core.rules import RulesConfig
from wheeld.testing.golden import replay_output
from wheeld_cammegh.decoder import CammeghDecoder, parse_status

CAPTURES = sorted((Path(__file__).parent / "captures").glob("*.cap"))

_STATUS = re.compile(rb"\*X;(\d);\d{3};([ \d]{2});")
_BARE = re.compile(rb"\d{1,2}")
#: Lines either side of a winning number whose corruption is tried exhaustively.
NEIGHBOURS = 2


#: State-4 frames before each game's number whose corruption in pairs is tried.
NEAR_END = 6


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


Line = tuple[float, bytes]


@dataclass(frozen=True, slots=True)
class Edit:
    """Lines ``start`` up to ``stop`` (excluded) of a capture replaced by ``lines``."""

    start: int
    stop: int
    lines: tuple[Line, ...]


@dataclass(slots=True)
class CleanReplay:
    """A capture's wheel lines replayed untouched, with what the corrupted runs resume from."""

    capture: Path
    games: list[WheelGame]
    lines: list[Line]
    #: The replay just before each line a corruption may start at, pickled.
    snapshots: dict[int, bytes]
    #: The replay's fingerprint after each line that leaves it idle.
    idle_prints: dict[int, str]
    #: The lines whose status frame carries another spin than the one before.
    spin_ends: list[int]

    def assert_never_another_number(self, edits: Iterable[Edit]) -> int:
        """Replay each edit from its snapshot; no game may get another number. How many."""
        tried = 0
        lines = self.lines
        for edit in edits:
            tried += 1
            run: Replay = pickle.loads(self.snapshots[edit.start])
            spin_over = next((end for end in self.spin_ends if end >= edit.stop), len(lines) - 1)
            fed = [*edit.lines, *lines[edit.stop :]]
            for offset, (at, data) in enumerate(fed):
                for result in run.feed(at, data):
                    if isinstance(result, Result):
                        self._assert_true(result, edit)
                j = edit.stop + offset - len(edit.lines)  # the clean line this one stands for
                if j < edit.stop or not run.idle:
                    continue
                clean_print = self.idle_prints.get(j)
                if j >= spin_over or (clean_print is not None and clean_print == run.fingerprint()):
                    break  # nothing open once the spin is over, or the same as the clean replay
        return tried

    def _assert_true(self, result: Result, edit: Edit) -> None:
        wheel = truth(self.games, result.extra["spin"], result.at)
        assert result.number == wheel, (
            f"{self.capture.name}: lines {edit.start}..{edit.stop - 1} "
            f"{self.lines[edit.start : edit.stop]!r} -> {edit.lines!r} published "
            f"{result.number} for spin {result.extra['spin']} (wheel: {wheel})"
        )


@functools.cache
def clean_replay(capture: Path) -> CleanReplay:
    lines = [(line.at, line.data) for line in read(capture).lines if line.direction == "<"]
    clean = CleanReplay(capture, wheel_games(capture), lines, {}, {}, [])
    replay = Replay.fresh()
    for i, (at, data) in enumerate(lines):
        if data.startswith((b"*X;4;", b"*X;5;")) or _BARE.fullmatch(data) or i in _near(lines, i):
            clean.snapshots[i] = pickle.dumps(replay)
        spin = replay.decoder.last_status.spin if replay.decoder.last_status else None
        replay.feed(at, data)
        status = replay.decoder.last_status
        if status is not None and spin is not None and status.spin != spin:
            clean.spin_ends.append(i)
        if replay.idle:
            clean.idle_prints[i] = replay.fingerprint()
    return clean


def _near(lines: list[Line], i: int) -> set[int]:
    """``i`` when a state-5 frame or a bare line is within ``NEIGHBOURS`` lines of it."""
    window = lines[max(0, i - NEIGHBOURS) : i + NEIGHBOURS + 1]
    near = any(data.startswith(b"*X;5;") or _BARE.fullmatch(data) for _, data in window)
    return {i} if near else set()


def single_line_edits(lines: list[Line]) -> Iterator[Edit]:
    """Each one-character corruption near a number, and each state-4 frame flipped to 5."""
    for i, (at, data) in enumerate(lines):
        variants = corruptions(data) if _near(lines, i) else flipped_to_state_5(data)
        for variant in variants:
            yield Edit(i, i + 1, ((at, variant),))


def state_4_frames_before_numbers(lines: list[Line]) -> list[list[int]]:
    """For each game end, the last ``NEAR_END`` state-4 frames before its first state-5 frame."""
    runs: list[list[int]] = []
    fours: list[int] = []
    for i, (_, data) in enumerate(lines):
        if data.startswith(b"*X;4;"):
            fours.append(i)
        elif data.startswith(b"*X;5;") and fours:
            runs.append(fours[-NEAR_END:])
            fours = []
        elif data.startswith(b"*X;"):
            fours = []
    return runs


def flipped_pairs_and_stray_bare_lines(lines: list[Line]) -> Iterator[Edit]:
    """Near each game end: every pair of adjacent state-4 frames flipped to 5, and every
    state-4 frame flipped with a stray copy of the previous game's bare line before it."""
    for fours in state_4_frames_before_numbers(lines):
        for first, second in itertools.pairwise(fours):
            if second != first + 1:
                continue  # another line between them: not adjacent on the wire
            yield Edit(
                first,
                second + 1,
                tuple((at, b"*X;5;" + data[5:]) for at, data in lines[first : second + 1]),
            )
        for four in fours:
            at, data = lines[four]
            previous = parse_status(data)
            if previous is None or previous.win is None:
                continue
            stray = (at - 0.09, previous.win.rjust(2).encode())
            yield Edit(four, four + 1, (stray, (at, b"*X;5;" + data[5:])))


#: The quick run tries one corruption in this many, in order: a deterministic sample
#: spread over every game and line, whose stride is prime to the number of ways a line
#: is corrupted (so each kind of corruption is tried, on every kind of frame).
#: ``--long`` tries them all (minutes: three on a quiet machine, more than ten on two
#: cores with a load of 18).
QUICK_ONE_IN = 23
#: Each capture's edits are shared among this many tests (shard k takes every
#: ``SHARDS``-th of the sample, from the k-th): the workers of a parallel run take
#: one each, so the largest capture is not one long test at the end of the suite.
SHARDS = 3


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_no_single_corrupted_line_publishes_another_number(
    capture: Path, shard: int, request: pytest.FixtureRequest
) -> None:
    clean = clean_replay(capture)
    stride = 1 if request.config.getoption("--long", default=False) else QUICK_ONE_IN
    edits: Iterable[Edit] = itertools.islice(
        single_line_edits(clean.lines), shard * stride, None, SHARDS * stride
    )
    tried = clean.assert_never_another_number(edits)
    assert tried > 0 or not clean.games


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_two_flipped_frames_never_publish_the_previous_number(capture: Path) -> None:
    clean = clean_replay(capture)
    tried = clean.assert_never_another_number(flipped_pairs_and_stray_bare_lines(clean.lines))
    assert tried > 0 or not clean.games


# -- the attack that published the previous game's number -----------------------------

STUDIO = Path(__file__).parent / "captures" / "studio-games-2025.cap"
#: Game 1 of the studio capture (spin 2, the wheel's 28) and the previous game's
#: number its state 1-4 frames carry.
FIRST_FLIP = "1758005122.582 < *X;4;002;31;0;172;0"
SECOND_FLIP = "1758005123.078 < *X;4;002;31;0;171;0"


def _replay_edited(tmp_path: Path, edits: dict[str, list[str]]) -> list[dict[str, object]]:
    """``wheeld replay`` of the studio capture with some of its lines replaced."""
    lines = STUDIO.read_text().splitlines()
    for old, new in edits.items():
        lines[lines.index(old) : lines.index(old) + 1] = new
    capture = tmp_path / "edited.cap"
    capture.write_text("\n".join(lines) + "\n")
    return [json.loads(line) for line in replay_output(capture).splitlines()]


def _flip(line: str) -> str:
    return line.replace("< *X;4;", "< *X;5;")


def _first_game_end(payloads: list[dict[str, object]]) -> dict[str, object]:
    return next(p for p in payloads if p["game_id"] == 1 and p["event"] in ("result", "no_spin"))


def test_two_state_4_frames_flipped_to_5_do_not_publish_the_previous_number(
    tmp_path: Path,
) -> None:
    payloads = _replay_edited(tmp_path, {line: [_flip(line)] for line in (FIRST_FLIP, SECOND_FLIP)})
    end = _first_game_end(payloads)
    assert (end["event"], end["reason"]) == ("no_spin", "frame_loss")


def test_a_flip_and_a_stray_previous_bare_line_do_not_publish_the_previous_number(
    tmp_path: Path,
) -> None:
    stray = "1758005122.500 < 31"
    payloads = _replay_edited(tmp_path, {FIRST_FLIP: [stray, _flip(FIRST_FLIP)]})
    end = _first_game_end(payloads)
    assert (end["event"], end["reason"]) == ("no_spin", "frame_loss")


def test_the_untouched_first_game_is_the_wheels_28(tmp_path: Path) -> None:
    end = _first_game_end(_replay_edited(tmp_path, {}))
    assert (end["event"], end["number"]) == ("result", "28")


def test_the_ss2_fuzzer_finds_nothing_in_three_seconds() -> None:
    # The long run is documented in the driver's README.md; this keeps the target working.
    judged, failure = ss2_fuzz.fuzz(3.0, seed=2025)
    assert failure is None, str(failure)
    assert judged > 0  # how many is speed: not asserted here


def test_the_fuzz_oracle_refuses_an_unconfirmed_number() -> None:
    seed = (ss2_fuzz.CORPUS / "studio-games-2025-0-300.ss2").read_bytes()
    assert ss2_fuzz.check(seed) is None
    lines = ss2_fuzz._lines(seed)
    assert not ss2_fuzz._justified(lines, "31", 2)  # the previous game's number
    assert ss2_fuzz._justified(lines, "28", 2)
    # Two state-4 frames flipped to 5 and a stray bare line do not justify it either.
    fours = [i for i, line in enumerate(lines) if line.startswith(b"*X;4;002;31;")]
    flipped = list(lines)
    for i in fours[-3:-1]:
        flipped[i] = b"*X;5;" + lines[i][5:]
    assert not ss2_fuzz._justified([*flipped, b"31\r\n"], "31", 2)
