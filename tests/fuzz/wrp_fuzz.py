"""A mutation fuzzer for the WRP/1 decoder feeding the game engine.

    python -m tests.fuzz.wrp_fuzz --seconds 600 [--seed S] [--failures DIR]
    python -m tests.fuzz.wrp_fuzz --replay FILE     # judge one saved input again
    python -m tests.fuzz.wrp_fuzz --make-corpus     # recut the seeds from the captures

Seeds are the wheel's side of the golden captures, as raw serial bytes. Each
input is a seed put through a few random mutations (bit flips, insertions,
deletions, splices, duplicated, dropped or swapped lines, field rewrites with
their checksum fixed so they reach the engine). It is then fed whole and in a
random chunking through ``WrpDecoder`` into ``GameEngine`` and judged by three
oracles:

1. nothing raises and no input takes longer than a bounded CPU time;
2. the chunking changes nothing: same events, counters and decisions;
3. no result the wheel's own frames do not justify: every result belongs to a
   game opened by a launch ``BAL`` (period 0), its number is the pocket the
   sensor last read in that game, and its revolutions are at least
   ``min_ball_revolutions`` and no more than the ball passes seen. Games also
   start in id order and end exactly once.

The first failing input is saved (as found, and shrunk) with a JSON note of
why, and the run exits 1. Only the standard library's ``random`` drives it, so
a seed reproduces the same inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from wheeld.core import capture
from wheeld.core.engine import GameEngine
from wheeld.core.events import BallPassed, PocketReading, WheelEvent
from wheeld.core.game import Alarm, Decision, NoMoreBets, Result, Spinning
from wheeld.core.open_game import ticks_since
from wheeld.core.rules import RulesConfig
from wheeld.drivers.wrp import DecoderCounters, WrpDecoder, checksum

HERE = Path(__file__).parent
CORPUS = HERE / "corpus" / "wrp"
CAPTURES = HERE.parent / "captures" / "wrp"

#: Inputs grow by splices and duplications; past this they are cut back.
MAX_INPUT = 32 * 1024
#: CPU seconds one input may take, every chunking included, before it counts as a hang.
INPUT_CPU_LIMIT_S = 2.0
#: Host time of the first frame; later frames advance it by their wheel ticks.
START = 1_760_000_000.0
#: A tick jump moves host time by at most this much, so one corrupt tick does
#: not push host time years ahead (it still voids the game as a lost link).
MAX_HOST_STEP_MS = 60_000

_TOKENS = (
    b"$",
    b"*",
    b",",
    b"\r",
    b"\n",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"$WRBAL,",
    b"$WRPOC,",
    b"$WRROT,",
    b"$WRHEL,0,",
    b"*00\r\n",
)
_FIELDS = (
    "",
    "-",
    "0",
    "00",
    "1",
    "3",
    "36",
    "37",
    "38",
    "1399",
    "1400",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "CW",
    "CCW",
    "LAUNCH",
    "OBJECT",
    "BALL_OUT",
    "HEL",
    "WRBAL",
    "WRPOC",
    "WRHEL",
    "+1",
    " 1",
)


# -- seeds -------------------------------------------------------------------


def capture_bytes(path: Path) -> bytes:
    """What the wheel sent in a capture, as the raw bytes on the wire."""
    lines = capture.read(path).lines
    return b"".join(line.data + b"\r\n" for line in lines if line.direction == "<")


def corpus_from_captures() -> dict[str, bytes]:
    """The seed corpus as it should be: one seed per golden WRP/1 capture."""
    return {f"{cap.stem}.wrp": capture_bytes(cap) for cap in sorted(CAPTURES.glob("*.cap"))}


def load_corpus(directory: Path = CORPUS) -> list[bytes]:
    """Every seed file in the corpus directory."""
    seeds = [path.read_bytes() for path in sorted(directory.glob("*.wrp"))]
    if not seeds:
        raise SystemExit(f"{directory}: no seeds (run with --make-corpus)")
    return seeds


# -- mutations ---------------------------------------------------------------


def _refit(line: bytes) -> bytes:
    """A ``$...*HH`` line with its checksum recomputed, so its fields reach the parser."""
    start, star = line.find(b"$"), line.rfind(b"*")
    if start < 0 or star < start or len(line) < star + 3:
        return line
    return b"%s*%02X%s" % (line[:star], checksum(line[start + 1 : star]), line[star + 3 :])


class Mutator:
    """Random edits of an input, drawn from one seeded ``random.Random``."""

    def __init__(self, rng: random.Random, seeds: list[bytes]) -> None:
        self.rng = rng
        self.seeds = seeds
        self._edits: tuple[Callable[[bytes], bytes], ...] = (
            self.flip_bit,
            self.insert,
            self.delete,
            self.splice,
            self.duplicate_line,
            self.drop_line,
            self.swap_lines,
            self.rewrite_field,
            self.rewrite_field,
            self.cut,
        )

    def input(self) -> bytes:
        """A new input: a seed with one to eight edits, checksums refitted half the time."""
        data = self.rng.choice(self.seeds)
        for _ in range(self.rng.randint(1, 8)):
            data = self.rng.choice(self._edits)(data)
        if self.rng.random() < 0.5:
            data = b"\n".join(_refit(line) for line in data.split(b"\n"))
        return data[:MAX_INPUT]

    def _offset(self, data: bytes) -> int:
        return self.rng.randint(0, len(data))

    def flip_bit(self, data: bytes) -> bytes:
        if not data:
            return data
        at = self.rng.randrange(len(data))
        return data[:at] + bytes((data[at] ^ (1 << self.rng.randrange(8)),)) + data[at + 1 :]

    def insert(self, data: bytes) -> bytes:
        at = self._offset(data)
        if self.rng.random() < 0.5:
            extra = self.rng.choice(_TOKENS)
        else:
            extra = self.rng.randbytes(self.rng.randint(1, 100))
        return data[:at] + extra + data[at:]

    def delete(self, data: bytes) -> bytes:
        at = self._offset(data)
        return data[:at] + data[at + self.rng.randint(1, 40) :]

    def splice(self, data: bytes) -> bytes:
        """A stretch of another seed, inserted or written over this input's tail."""
        other = self.rng.choice(self.seeds)
        start = self._offset(other)
        piece = other[start : start + self.rng.randint(1, 4000)]
        at = self._offset(data)
        tail = data[at:] if self.rng.random() < 0.5 else b""
        return data[:at] + piece + tail

    def cut(self, data: bytes) -> bytes:
        """A window of the input, as if the link had come up and gone down mid-stream."""
        start = self._offset(data)
        return data[start : start + self.rng.randint(1, 6000)]

    def _lines(self, data: bytes) -> list[bytes]:
        return data.split(b"\n")

    def duplicate_line(self, data: bytes) -> bytes:
        lines = self._lines(data)
        at = self.rng.randrange(len(lines))
        lines[at:at] = [lines[at]] * self.rng.randint(1, 3)
        return b"\n".join(lines)

    def drop_line(self, data: bytes) -> bytes:
        lines = self._lines(data)
        at = self.rng.randrange(len(lines))
        del lines[at : at + self.rng.randint(1, 3)]
        return b"\n".join(lines)

    def swap_lines(self, data: bytes) -> bytes:
        lines = self._lines(data)
        first, second = self.rng.randrange(len(lines)), self.rng.randrange(len(lines))
        lines[first], lines[second] = lines[second], lines[first]
        return b"\n".join(lines)

    def rewrite_field(self, data: bytes) -> bytes:
        """One comma-separated field of a frame replaced, its checksum fixed."""
        lines = self._lines(data)
        at = self.rng.randrange(len(lines))
        line = lines[at]
        star = line.rfind(b"*")
        head, tail = (line[:star], line[star:]) if star >= 0 else (line, b"")
        fields = head.split(b",")
        which = self.rng.randrange(len(fields))
        old = fields[which]
        if old.isdigit() and self.rng.random() < 0.5:
            fields[which] = str(max(0, int(old) + self.rng.randint(-3, 3))).encode()
        else:
            value = self.rng.choice(_FIELDS).encode()
            fields[which] = b"$" + value if old.startswith(b"$") else value
        lines[at] = _refit(b",".join(fields) + tail)
        return b"\n".join(lines)


def random_cuts(rng: random.Random, size: int) -> list[int]:
    """Chunk boundaries: runs of tiny chunks, odd sizes, and the odd big one."""
    cuts: list[int] = []
    at = 0
    while True:
        at += rng.choice((1, 1, 2, 3, 5, 8, 13, 40, 81, 82, 83, 500))
        if at >= size:
            return cuts
        cuts.append(at)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` split at ``cuts`` (ascending offsets)."""
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


# -- running an input ------------------------------------------------------


@dataclass(slots=True)
class Step:
    """One thing that happened: an event the decoder emitted (None when host
    time passed with no event) and the decisions the engine made on it."""

    event: WheelEvent | None
    decisions: list[Decision]


@dataclass(slots=True)
class Run:
    """Everything one chunking of an input produced."""

    steps: list[Step] = field(default_factory=list)
    counters: DecoderCounters = field(default_factory=DecoderCounters)

    def events(self) -> list[WheelEvent]:
        return [step.event for step in self.steps if step.event is not None]

    def decisions(self) -> list[Decision]:
        return [d for step in self.steps for d in step.decisions]


def play(chunks: list[bytes], rules: RulesConfig) -> Run:
    """Feed the chunks through a fresh decoder and engine.

    Host time is derived from the events alone (it follows their wheel ticks),
    never from the chunking, so every chunking of an input must decide alike.
    Like the daemon's timer, the engine is told the time at its link deadline
    when the next event comes later than that, and once more after the last
    event, so every open game ends.
    """
    decoder = WrpDecoder()
    engine = GameEngine(rules)
    run = Run(counters=decoder.counters)
    now = START
    last_tick: int | None = None
    for chunk in chunks:
        for event in decoder.feed(chunk):
            tick = getattr(event, "tick", None)
            if isinstance(tick, int):
                if last_tick is not None:
                    now += min(ticks_since(tick, last_tick), MAX_HOST_STEP_MS) / 1000.0
                last_tick = tick
            deadline = engine.link_deadline()
            if deadline is not None and deadline <= now:
                run.steps.append(Step(None, engine.on_host_time(deadline)))
            run.steps.append(Step(event, engine.on_event(event, now)))
    deadline = engine.link_deadline()
    if deadline is not None:
        run.steps.append(Step(None, engine.on_host_time(deadline)))
    return run


# -- the oracles ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an input failed: which oracle, and a one-line explanation."""

    oracle: str
    message: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.oracle}: {self.message}"


@dataclass(slots=True)
class _OpenGame:
    game_id: int
    ball_passes: int = 0
    last_pocket: str | None = None
    betting_closed: bool = False


def judge(steps: list[Step], min_revolutions: int) -> Failure | None:
    """Oracle 3 and the game lifecycle: is every decision justified by the frames?"""
    game: _OpenGame | None = None
    next_id = 1
    for index, step in enumerate(steps):
        opened_here = False
        for decision in step.decisions:
            where = f"step {index} ({step.event!r})"
            if isinstance(decision, Alarm):
                continue
            if isinstance(decision, Spinning):
                event = step.event
                if not (isinstance(event, BallPassed) and event.period_ms == 0):
                    return Failure("invented", f"game {decision.game_id} started without a launch")
                if game is not None:
                    return Failure(
                        "lifecycle", f"game {decision.game_id} started in {game.game_id}"
                    )
                if decision.game_id != next_id:
                    return Failure("lifecycle", f"game id {decision.game_id}, expected {next_id}")
                game, next_id, opened_here = _OpenGame(decision.game_id), next_id + 1, True
                continue
            if game is None or decision.game_id != game.game_id:
                open_id = game.game_id if game is not None else None
                return Failure(
                    "lifecycle",
                    f"{type(decision).__name__} for game {decision.game_id}, open {open_id}",
                    where,
                )
            if isinstance(decision, NoMoreBets):
                if game.betting_closed:
                    return Failure("lifecycle", f"betting closed twice in game {game.game_id}")
                game.betting_closed = True
                continue
            if isinstance(decision, Result):
                problem = _unjustified(decision, game, min_revolutions)
                if problem is not None:
                    return Failure("invented", problem, where)
            game = None  # a Result or a NoSpin: the game has ended
        if game is not None and not opened_here:
            event = step.event
            if isinstance(event, BallPassed):
                game.ball_passes += 1
            elif isinstance(event, PocketReading):
                game.last_pocket = event.pocket
    if game is not None:
        return Failure("lifecycle", f"game {game.game_id} never ended")
    return None


def _unjustified(result: Result, game: _OpenGame, min_revolutions: int) -> str | None:
    """What is wrong with a result, if anything, given what the wheel reported."""
    if result.number != game.last_pocket:
        return (
            f"game {game.game_id}: result {result.number!r} but the pocket sensor "
            f"last read {game.last_pocket!r}"
        )
    revolutions = result.revolutions
    if revolutions is None or not min_revolutions <= revolutions <= game.ball_passes:
        return (
            f"game {game.game_id}: {revolutions} revolutions with {game.ball_passes} "
            f"ball passes seen, at least {min_revolutions} needed"
        )
    return None


def _first_difference(whole: Run, other: Run) -> str | None:
    """Where two chunkings of the same bytes disagree, if they do."""
    for name, mine, theirs in (
        ("events", whole.events(), other.events()),
        ("decisions", whole.decisions(), other.decisions()),
    ):
        for index, (a, b) in enumerate(zip(mine, theirs, strict=False)):
            if a != b:
                return f"{name}[{index}]: {a!r} whole, {b!r} chunked"
        if len(mine) != len(theirs):
            return f"{len(mine)} {name} whole, {len(theirs)} chunked"
    if whole.counters != other.counters:
        return f"counters {whole.counters} whole, {other.counters} chunked"
    return None


class InputTimeout(Exception):
    """One input used more CPU time than any input should."""


@contextlib.contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise InputTimeout in the block after ``seconds`` of CPU time.

    A CPU-time timer (SIGVTALRM) leaves SIGALRM to pytest-timeout. Outside the
    main thread signals cannot be used: the limit is then checked afterwards.
    """
    if threading.current_thread() is not threading.main_thread():
        started = time.process_time()
        yield
        if time.process_time() - started > seconds:
            raise InputTimeout
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise InputTimeout

    previous = signal.signal(signal.SIGVTALRM, expire)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def check(data: bytes, chunkings: list[list[int]], rules: RulesConfig) -> Failure | None:
    """Judge one input, fed whole and cut at each list of ``chunkings``."""
    try:
        with cpu_limit(INPUT_CPU_LIMIT_S):
            whole = play([data], rules)
            for cuts in chunkings:
                difference = _first_difference(whole, play(chunked(data, cuts), rules))
                if difference is not None:
                    return Failure("chunking", difference, f"cuts: {cuts}")
    except InputTimeout:
        return Failure("hang", f"more than {INPUT_CPU_LIMIT_S} s of CPU on {len(data)} bytes")
    except Exception as exc:
        return Failure("exception", f"{type(exc).__name__}: {exc}", traceback.format_exc())
    return judge(whole.steps, rules.min_ball_revolutions)


def bytewise(data: bytes) -> list[int]:
    """The harshest chunking: one byte at a time."""
    return list(range(1, len(data)))


def shrink(data: bytes, failure: Failure, rules: RulesConfig, budget_s: float = 10.0) -> bytes:
    """A smaller input failing the same oracle: whole lines, then bytes, removed while it fails."""

    def fails(candidate: bytes) -> bool:
        found = check(candidate, [bytewise(candidate)], rules)
        return found is not None and found.oracle == failure.oracle

    if not fails(data):
        return data  # only that exact chunking fails: keep the input as found
    deadline = time.monotonic() + budget_s
    for separator in (b"\n", b""):
        parts = data.split(b"\n") if separator else [bytes((b,)) for b in data]
        size = max(1, len(parts) // 2)
        while size >= 1 and time.monotonic() < deadline:
            at = 0
            while at < len(parts) and time.monotonic() < deadline:
                candidate = parts[:at] + parts[at + size :]
                if candidate and fails(separator.join(candidate)):
                    parts = candidate
                else:
                    at += size
            size //= 2
        data = separator.join(parts)
    return data


# -- the campaign --------------------------------------------------------------


@dataclass(slots=True)
class Report:
    """How a fuzzing run went."""

    seed: int
    inputs: int
    seconds: float
    failure: Failure | None = None
    saved: Path | None = None

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        line = (
            f"wrp fuzz: {self.inputs} inputs in {self.seconds:.1f} s "
            f"({self.rate:.0f} inputs/s), seed {self.seed}"
        )
        if self.failure is not None:
            line += f"\nFAILED {self.failure}\ninput saved to {self.saved}"
        return line


def save_failure(
    data: bytes,
    cuts: list[int],
    failure: Failure,
    seed: int,
    rules: RulesConfig,
    directory: Path,
    shrink_s: float = 10.0,
) -> Path:
    """Write the failing input, a shrunk copy and a JSON note of why; return the input's path."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"wrp-{failure.oracle}-{hashlib.sha256(data).hexdigest()[:12]}"
    path = directory / f"{name}.bin"
    path.write_bytes(data)
    note = {"oracle": failure.oracle, "message": failure.message, "seed": seed, "cuts": cuts}
    small = shrink(data, failure, rules, shrink_s)
    if small != data:
        (directory / f"{name}.min.bin").write_bytes(small)
        note["shrunk"] = f"{name}.min.bin"
    note["detail"] = failure.detail
    (directory / f"{name}.json").write_text(json.dumps(note, indent=2) + "\n")
    return path


def fuzz(
    seconds: float,
    seed: int,
    failures: Path,
    *,
    rules: RulesConfig | None = None,
    seeds: list[bytes] | None = None,
    progress: Callable[[str], None] | None = None,
    shrink_s: float = 10.0,
) -> Report:
    """Fuzz for ``seconds``; stop at the first failing input, which is saved under ``failures``."""
    rules = rules or RulesConfig()
    rng = random.Random(seed)
    mutator = Mutator(rng, seeds if seeds is not None else load_corpus())
    started = time.monotonic()
    deadline = started + seconds
    next_progress = started + 10.0
    report = Report(seed, 0, 0.0)
    while (now := time.monotonic()) < deadline:
        data = mutator.input()
        cuts = random_cuts(rng, len(data))
        # Byte-at-a-time feeding is slow on long inputs: only for the short ones.
        chunkings = [cuts, bytewise(data)] if len(data) < 2000 else [cuts]
        report.inputs += 1
        failure = check(data, chunkings, rules)
        if failure is not None:
            report.failure = failure
            report.saved = save_failure(data, cuts, failure, seed, rules, failures, shrink_s)
            break
        if progress is not None and now >= next_progress:
            next_progress = now + 10.0
            progress(f"{report.inputs} inputs, {report.inputs / (now - started):.0f}/s")
    report.seconds = time.monotonic() - started
    return report


def replay(path: Path, rules: RulesConfig | None = None) -> Failure | None:
    """Judge a saved input again: whole, byte by byte, and at its recorded cuts."""
    rules = rules or RulesConfig()
    data = path.read_bytes()
    chunkings = [bytewise(data)]
    note = path.with_suffix(".json")
    if note.exists() and not path.name.endswith(".min.bin"):
        chunkings.append([int(cut) for cut in json.loads(note.read_text()).get("cuts", [])])
    return check(data, chunkings, rules)


def make_corpus(directory: Path = CORPUS) -> None:
    """Rewrite the seed files from the golden captures."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in corpus_from_captures().items():
        (directory / name).write_bytes(data)
        print(f"wrote {directory / name} ({len(data)} bytes)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    parser.add_argument("--seed", type=int, help="random seed (default: from the clock)")
    parser.add_argument(
        "--failures",
        type=Path,
        default=Path("fuzz-failures"),
        help="where a failing input is written (default ./fuzz-failures)",
    )
    parser.add_argument("--replay", type=Path, metavar="FILE", help="judge one saved input")
    parser.add_argument("--make-corpus", action="store_true", help="recut the seeds")
    args = parser.parse_args(argv)
    if args.make_corpus:
        make_corpus()
        return 0
    if args.replay is not None:
        try:
            failure = replay(args.replay)
        except OSError as exc:
            print(f"{args.replay}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"{args.replay}: {failure or 'passes every oracle'}")
        if failure is not None and failure.detail:
            print(failure.detail)
        return 1 if failure is not None else 0
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    report = fuzz(args.seconds, seed, args.failures, progress=print)
    print(report.summary())
    return 1 if report.failure is not None else 0


if __name__ == "__main__":
    sys.exit(main())
