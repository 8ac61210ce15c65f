"""A journal of years of play, built as the daemon writes it, then measured.

    python -m benchmarks.history --games N [--frames-per-second F] [--out DIR] [--keep]

**Build.** N games through the real ``TablePipeline``
(``wheeld.shell.daemon.build_pipeline``, signed with a generated Ed25519 key)
and the real ``Journal``, written as ``EffectsApplier.apply``
(``wheeld.shell.applier``) writes them (frames batched and flushed at 64 lines,
after 1 s or with an fsync'd commit; commands group-committed; alarms before
the decisions; ``journal.record(..., chain=..., alarm=...)``; the statistics
kept every 200 decisions; a checkpoint every 600 s; ``<base>/wheel`` every
60 s; every outbox entry acknowledged as the publisher does). The wheel is a
scripted WRP/1 head (``wheeld_simulators.scripted``): each game's own traffic
is real frames fed line by line at their host times; games come 60-90 an
hour, 20 hours a day, the table closed (operator ``close`` / ``open``
commands) the other 4 hours; heartbeats at F frames a second all the time
and a rotor datum pass every 2.4 s while the table is open; the rotor is
reversed between games; about 1 % of spins are voided (an object on the
wheel). Game times end near the time of the build.

What makes it fast without changing what the journal holds (``--check``
builds a small journal both ways, the daemon's way line by line and this
way, and compares every row of every table):

- three processes: the pipeline (and the wheel) in one, the journal in
  another, the runs of lines between games in a third; a process that fails
  ends the build with its traceback;
- the traffic between games (heartbeats, rotor passes, a closed table's
  hours) is not decoded line by line: the decoder's frame count and sequence
  number are moved on past it; the last seconds before each launch (a rotor
  pass, three after a no-spin) are decoded, as the engine needs them. The
  third process makes those lines again and cuts them where
  ``FrameTail.append`` cuts idle lines (``MAX_BLOCK_LINES``,
  ``MAX_BLOCK_SPAN_S``): the blocks sealed within the run are encoded there
  (``encode_block``) and chained and inserted by the journal's process as
  ``FrameTail.seal`` inserts them (``block_hash`` over the chained columns,
  the hash kept as 32 bytes); the lines after the last of them go through
  the journal's own ``FrameTail`` with the next game's lines (its lead, or a
  block of their own past ``MAX_LEAD``);
- ``pipeline.committed()`` (the history, the statistics, the alerts) is
  applied right after each record of games, as the daemon applies it;
- ``<base>/stats`` (recomputed by the pipeline after every game, about 2 ms:
  ``Statistics.to_json_text``) is computed for real only for the last game: the ones before it are
  acknowledged and dropped from the outbox, and only the last is kept
  (``retained``);
- the journal's process runs each batch of items (16 games) as one SQLite
  transaction: the journal's own ``BEGIN IMMEDIATE`` ... ``COMMIT`` inside it
  are no-ops (the same statements in the same order: the same rows), one
  commit where the daemon makes some fifty a game;
- it keeps the open block's lines in a list, not in ``frame_tail`` rows that
  ``FrameTail.seal`` reads back and deletes (the daemon keeps them there for a
  crash; ``FrameTail`` still decides where blocks are cut and seals them);
- SQLite runs with ``synchronous=OFF`` (no fsync; the bytes written are the same).

Rows, not files: ``--check`` compares every row; the files differ by some
pages (the fast build's journal is 4-5 % smaller at 300 games: no
``frame_tail`` pages, the outbox's dropped ``<base>/stats`` rows smaller).

The build goes to ``--out`` (default ``/var/tmp/wheeld-history/games-N-fps-F``)
with its signing key and a ``build.json``; a later run with the same N and F
reuses it. The daemon is measured on a copy (it writes); ``--keep`` keeps
the measuring work directory.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.queues
import os
import pickle
import platform
import random
import shutil
import sqlite3
import statistics as stats_
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from wheeld.core.capture import escape
from wheeld.core.commands import OperatorCommand
from wheeld.core.engine import EngineState
from wheeld.core.signing import ChainState
from wheeld.drivers.wrp import WrpDecoder
from wheeld.shell.command_rate import RECALL_BURST, RECALLS_PER_S
from wheeld.shell.daemon import build_pipeline, load_signer
from wheeld.shell.jobs.checkpoint import CHECKPOINT_EVERY_S
from wheeld.shell.jobs.retention import RETENTION_PAUSE_S
from wheeld.shell.jobs.statistics import STATISTICS_EVERY
from wheeld.shell.jobs.wheel import WHEEL_STATE_EVERY_S
from wheeld.shell.journal import JOURNAL_FILE, Journal, fsync_due, outbox
from wheeld.shell.journal.chain import GENESIS, block_hash, stored_hash
from wheeld.shell.journal.codec import BlockLine, encode_block
from wheeld.shell.journal.frames import MAX_BLOCK_LINES, MAX_BLOCK_SPAN_S
from wheeld.shell.write_batches import FRAME_BATCH, FRAME_FLUSH_S
from wheeld.table.effects import Effects, FrameRecord, Outgoing
from wheeld.table.pipeline import TablePipeline
from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel, opposite

if __package__ in (None, ""):  # pragma: no cover - run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


# -- the table's day ------------------------------------------------------------------------

#: Hours the table is open a day; the rest of the day it is closed, the wheel still talking.
OPEN_HOURS = 20.0
CLOSED_HOURS = 4.0
#: Games an hour, each hour drawn between these.
RATE_PER_HOUR = (60.0, 90.0)
#: A spin voided this often (an object on the wheel).
VOID_RATE = 0.01
#: The rotor's period (ms): a datum pass each turn while the table is open.
ROTOR_PERIOD_MS = 2400
#: The shortest time between a game's end and the next pick-up of the ball.
MIN_GAP_MS = 12_000
#: The wheel's clock (a 32-bit millisecond count) at its first line: it wraps an hour later.
TICK_START = (1 << 32) - 3_600_000
#: Who opens and closes the table.
PIT_BOSS = "pit-boss"
#: The format of ``build.json``; a build of another format is made again. 2: journal
#: schema 3 (a build of schema 2 would pay its upgrade at every start measured).
BUILD_FORMAT = 2
#: A year of a table: 60-90 games an hour, 20 hours a day.
GAMES_PER_YEAR = 547_000
#: While retention runs, the loop commits a line this often (the daemon's frame flushes).
LOOP_WRITE_S = 0.25
#: Retention's steps are timed this many at a time each way (thread, loop), in turn.
PRUNE_AB_STEPS = 25
#: In the build's directory, a file that ends the build at the game under way.
STOP_FILE = "stop"
#: How often (in games) the build looks for it.
STOP_LOOK_EVERY = 1000
#: Between two timed recalls: under the table's recall rate (``RECALLS_PER_S``).
RECALL_PACE_S = 0.6
#: The checkout: the daemons and the tools measured run from here.
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    """What to build: N games, heartbeats at F a second, from a seed."""

    games: int
    fps: float
    seed: int = 2026
    #: Host time of the wheel's first line.
    start: float = 0.0
    open_hours: float = OPEN_HOURS
    closed_hours: float = CLOSED_HOURS
    #: Wall-clock time (``time.time()``) past which the game under way is the last.
    stop_at: float | None = None
    #: A file whose appearance makes the game under way the last (looked for every
    #: ``STOP_LOOK_EVERY`` games): a long build stopped by hand, its journal still whole.
    stop_file: Path | None = None

    @property
    def heartbeat_ms(self) -> int:
        return max(1, round(1000 / self.fps))

    @staticmethod
    def span_s(
        games: int, open_hours: float = OPEN_HOURS, closed_hours: float = CLOSED_HOURS
    ) -> float:
        """About how long N games take at the table (75 an hour while open)."""
        per_day = open_hours * sum(RATE_PER_HOUR) / 2
        return games / per_day * (open_hours + closed_hours) * 3600


# -- between the processes ---------------------------------------------------------------------
#
# The pipeline's process hands the journal's process items, in the order the
# daemon would apply them:
#   ("F", at, line, game_id)               a line of a game whose effects are that frame only
#   ("E", at, effects, state, chain)       any other effects (state and chain for record())
#   ("K", kept)                            the statistics kept (every 200 decisions)
#   ("W", at, message)                     the 60 s refresh of <base>/wheel
#   ("C", at, kept)                        the 600 s checkpoint
#   ("I", message)                         <base>/info, when the wheel's identity changed
#   ("RS",) / ("RE",)                      a run of lines between games begins / ends (fast)
#   ("X", kept)                            the daemon stops
# where ``kept`` is None or (statistics snapshot, last decision row) to keep.
#
# Fast build: the lines between games (game id None) go to a third process
# instead, as runs: each part either a line decoded by the pipeline
# (at, dir, line) or a ``Stretch`` of lines that were not; it generates them,
# cuts the run where ``FrameTail`` cuts idle lines and encodes each block it
# seals; the journal's process chains and inserts those when the next game's
# lines reach it (after the run's ``("RE",)``), and hands the run's last lines,
# with the game's, to the journal's own ``FrameTail``.

Item = tuple[Any, ...]
Kept = tuple[dict[str, Any], int] | None
#: An encoded block of a run: first and last time, lines, stored data.
Block = tuple[float, float, int, bytes]

_WIRE = {"cw": "CW", "ccw": "CCW"}


@dataclass(frozen=True, slots=True)
class Stretch:
    """Lines a wheel sends while nothing happens, not decoded: enough to make them again."""

    start: float
    tick: int
    seq: int
    rotor: str | None
    rotor_period_ms: int
    heartbeat_ms: int | None
    next_rotor: int
    next_heartbeat: int
    ms: int
    count: int

    def lines(self) -> list[tuple[float, bytes]]:
        wheel = QuickWheel(
            start=self.start,
            tick=self.tick,
            seq=self.seq,
            rotor=cast(Any, self.rotor),
            rotor_period_ms=self.rotor_period_ms,
            heartbeat_ms=self.heartbeat_ms,
        )
        wheel._next_rotor, wheel._next_heartbeat = self.next_rotor, self.next_heartbeat
        wheel.advance(self.ms)
        assert len(wheel.lines) == self.count, (len(wheel.lines), self.count)
        return wheel.lines


#: A part of a run of lines between games: a line decoded, or a stretch that was not.
RunPart = tuple[float, str, bytes] | Stretch


def _xor(data: bytes) -> int:
    folded = 0
    for byte in data:
        folded ^= byte
    return folded


#: The XOR of the digits of 0-9999 as written, and as four digits (zero-padded).
_XOR_DIGITS = [_xor(str(n).encode()) for n in range(10_000)]
_XOR_FOUR = [_xor(b"%04d" % n) for n in range(10_000)]
_TICK_MASK = (1 << 32) - 1


def _xor_digits(n: int) -> int:
    """The XOR of the digits of ``n`` written in decimal: its part of a WRP/1 checksum."""
    if n < 10_000:
        return _XOR_DIGITS[n]
    return _xor_digits(n // 10_000) ^ _XOR_FOUR[n % 10_000]


class QuickWheel(ScriptedWheel):
    """``ScriptedWheel`` whose ``advance`` (heartbeats and rotor passes) writes the same
    frames without an event object for each, and can ``skip`` time without writing
    them (``--check`` compares it with ``ScriptedWheel``)."""

    def advance(self, ms: int) -> None:
        until = self.tick + ms
        append = self.lines.append
        start, seq = self.start, self.seq
        rotor, period, every = self.rotor, self.rotor_period_ms, self.heartbeat_ms
        # The frames ``wheeld.drivers.wrp.encode`` writes, the checksum folded from tables.
        tail = b",%s,%d" % (_WIRE[rotor].encode(), period) if rotor is not None else b""
        rotor_xor, beat_xor = _xor(b"WRROT,," + tail), _xor(b"WRHBT,,")
        rotor_frame, beat_frame = b"$WRROT,%d,%d" + tail + b"*%02X", b"$WRHBT,%d,%d*%02X"
        next_rotor, next_beat = self._next_rotor, self._next_heartbeat
        while True:
            step = until
            if rotor is not None and next_rotor < step:
                step = next_rotor
            if every and next_beat < step:
                step = next_beat
            at = round(start + (step + 2) / 1000.0, 3)
            tick = step & _TICK_MASK
            if rotor is not None and step == next_rotor:
                folded = rotor_xor ^ _xor_digits(seq) ^ _xor_digits(tick)
                append((at, rotor_frame % (seq, tick, folded)))
                seq = (seq + 1) % 65536
                self.last_datum_tick = step
                next_rotor += period
            if every and step == next_beat:
                folded = beat_xor ^ _xor_digits(seq) ^ _xor_digits(tick)
                append((at, beat_frame % (seq, tick, folded)))
                seq = (seq + 1) % 65536
                next_beat += every
            if step == until:
                break
        self.tick, self.seq = until, seq
        self._next_rotor, self._next_heartbeat = next_rotor, next_beat

    def skip(self, ms: int) -> Stretch:
        """What ``advance(ms)`` does to the wheel, without the lines: how to make them."""
        until = self.tick + ms
        rotor, period, every = self.rotor, self.rotor_period_ms, self.heartbeat_ms
        passes = beats = 0
        if rotor is not None and self._next_rotor <= until:
            passes = (until - self._next_rotor) // period + 1
        if every and self._next_heartbeat <= until:
            beats = (until - self._next_heartbeat) // every + 1
        stretch = Stretch(
            self.start,
            self.tick,
            self.seq,
            rotor,
            period,
            every,
            self._next_rotor,
            self._next_heartbeat,
            ms,
            passes + beats,
        )
        if passes:
            self.last_datum_tick = self._next_rotor + (passes - 1) * period
            self._next_rotor += passes * period
        if beats:
            assert every is not None
            self._next_heartbeat += beats * every
        self.tick, self.seq = until, (self.seq + passes + beats) % 65536
        return stretch


#: A run of lines between games, encoded: the blocks it seals, and the lines after the
#: last of them (at, direction, line), which the journal's ``FrameTail`` takes as the
#: daemon's lines: the lead of the next game's block, or a block of their own.
EncodedRun = tuple[list[Block], list[tuple[float, str, bytes]]]


def encode_run(parts: Sequence[RunPart]) -> EncodedRun:
    """A run of lines between games, cut into blocks where ``FrameTail.append`` cuts idle
    lines (at ``MAX_BLOCK_LINES`` lines or past ``MAX_BLOCK_SPAN_S``), each encoded as
    ``FrameTail.seal`` encodes it; the lines of the last block, whose end the next game
    decides (``MAX_LEAD``), are left to the journal."""
    lines: list[tuple[float, str, bytes]] = []
    for part in parts:
        if isinstance(part, Stretch):
            lines += [(at, "<", line) for at, line in part.lines()]
        else:
            lines.append(part)
    blocks: list[Block] = []
    begun = 0
    first_t = lines[0][0] if lines else 0.0
    for index in range(len(lines)):
        at = lines[index][0]
        if index - begun < MAX_BLOCK_LINES and 0 <= at - first_t <= MAX_BLOCK_SPAN_S:
            continue
        block = lines[begun:index]
        data = encode_block(
            [BlockLine(round(t * 1000), cast(Any, d), escape(text)) for t, d, text in block]
        )
        blocks.append((block[0][0], block[-1][0], len(block), data))
        begun, first_t = index, at
    return blocks, lines[begun:]


def insert_block(journal: Journal, heads: dict[str, tuple[int, str]], block: Block) -> None:
    """A sealed block of lines between games (no game, no lead, nothing dropped), inserted
    and chained as ``FrameTail.seal`` inserts it (inside the journal's transaction)."""
    first_t, last_t, lines, data = block
    db = journal._db
    given = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'frame_blocks'").fetchone()
    head_id, previous = heads.get("frame_blocks", GENESIS)
    block_id = max(head_id, given[0] if given else 0) + 1
    link = block_hash(previous, (block_id, None, 0, 0, lines, first_t, last_t, data))
    db.execute(
        "INSERT INTO frame_blocks (id, game_id, first_t, last_t, lines, lead, dropped, data, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (block_id, None, first_t, last_t, lines, 0, 0, data, stored_hash(link)),
    )
    heads["frame_blocks"] = (block_id, link)


class Shell:
    """What ``EffectsApplier.apply`` and the publisher do with effects, on the benchmark's clock.

    ``runs``: the fast build's encoded runs of lines between games, in order
    (None: every line comes through ``record_frames``, as in the daemon).
    """

    def __init__(self, journal: Journal, runs: Callable[[], EncodedRun] | None = None) -> None:
        self.journal = journal
        self._runs = runs
        self._frames: list[FrameRecord] = []
        self._frames_due: float | None = None
        self._commands: list[Any] = []
        self._run_ended = False
        self.decisions = 0

    def handle(self, items: Sequence[Item]) -> None:
        for item in items:
            kind = item[0]
            if kind == "F":
                at = item[1]
                if self._frames_due is not None and self._frames_due <= at:
                    self._flush_frames()  # the frames' 1 s timer fired before this line
                self._frames.append(FrameRecord(at, "<", item[2], item[3]))
                if len(self._frames) >= FRAME_BATCH:
                    self._flush_frames()
                elif self._frames_due is None:
                    self._frames_due = at + FRAME_FLUSH_S
            elif kind == "E":
                _, at, effects, state, chain = item
                self._due(at)
                self.apply(effects, at, state, chain)
            elif kind == "K":
                self._keep(item[1])
            elif kind == "RS":
                # The game's block ends where a run of lines between games begins: the
                # first line after the game seals it (``FrameTail.append``).
                self._flush_frames()
                self.journal._tail.close_block()
            elif kind == "RE":
                # Written when the next game's lines reach the journal (``_flush_frames``).
                self._run_ended = True
            elif kind == "W":
                self._due(item[1])
                self._enqueue([item[2]])
            elif kind == "C":
                self._due(item[1])
                self.journal.checkpoint()
                if item[2] is not None:
                    self._keep(item[2])
            elif kind == "I":
                self._enqueue([item[1]])
            elif kind == "X":
                self.stop(item[1])
            else:
                raise ValueError(f"unknown item {kind!r}")

    # -- EffectsApplier.apply, minus the wheel, the log, the timer and ``committed()`` ----
    # (the pipeline's process hands ``pipeline.committed()``'s effects on as items of
    # their own, right after the record they follow, and the statistics kept after both)

    def apply(
        self, effects: Effects, at: float, state: EngineState | None, chain: ChainState | None
    ) -> None:
        journal = self.journal
        self._frames += effects.frames
        fsynced = fsync_due(effects)
        if self._frames and (fsynced or effects.commands or len(self._frames) >= FRAME_BATCH):
            self._flush_frames()
        elif self._frames and self._frames_due is None:
            self._frames_due = at + FRAME_FLUSH_S
        commands_later = False
        if effects.commands:
            self._commands += effects.commands
            if fsynced:
                self._flush_commands()
            else:
                commands_later = True  # call_soon: once this turn of the loop is over
        if effects.table_state is not None:
            journal.save_table_state(effects.table_state)
        if effects.superseded:
            raise ValueError("a superseded journal: the build has no other controller")
        if effects.chain_floor is not None:
            journal.record_floor(*effects.chain_floor)
        if effects.taken_from is not None:
            journal.record_takeover(effects.taken_from, effects.taken_history)
        if effects.alarms or effects.set_alerts is not None:
            journal.record_alarms(effects.alarms, effects.set_alerts)
        enqueued = False
        if effects.decided:
            assert state is not None
            journal.record(
                effects.games, effects.messages, state, chain=chain, alarm=effects.alarmed
            )
            self.decisions += len(effects.games)
            enqueued = bool(effects.messages)
        else:
            if effects.state is not None:
                journal.save_state(effects.state)
            if effects.messages:
                journal.enqueue(effects.messages)
                enqueued = True
        if commands_later:
            self._flush_commands()
        if enqueued:
            self._acknowledge()

    def _due(self, at: float) -> None:
        if self._frames_due is not None and self._frames_due <= at:
            self._flush_frames()

    def _flush_frames(self) -> None:
        self._frames_due = None
        frames, self._frames = self._frames, []
        if self._run_ended:
            frames = self._write_run() + frames
        if frames:
            self.journal.record_frames(frames)

    def _write_run(self) -> list[FrameRecord]:
        """A run's sealed blocks (encoded elsewhere), chained and inserted as ``FrameTail.seal``
        does; its last lines, for ``record_frames`` (they go before the game's)."""
        assert self._runs is not None
        self._run_ended = False
        blocks, rest = self._runs()
        journal = self.journal
        if blocks:
            assert not journal._tail.pending
            with journal._chains.extending(durable=False) as heads:
                for block in blocks:
                    insert_block(journal, heads, block)
        return [FrameRecord(at, cast(Any, direction), line, None) for at, direction, line in rest]

    def _flush_commands(self) -> None:
        if self._commands:
            self.journal.record_commands(self._commands)
            self._commands = []

    def _enqueue(self, messages: list[Outgoing]) -> None:
        self.journal.enqueue(messages)
        self._acknowledge()

    def _acknowledge(self) -> None:
        """The publisher: every pending entry delivered and acknowledged, in order.

        The publisher acknowledges each in a transaction of its own; the fast
        build, all of them in one (the same rows go, the same are kept).
        """
        journal = self.journal
        if self._runs is None:
            after = 0
            while entries := journal.pending(after):
                for entry in entries:
                    after = entry.id
                    journal.acknowledge(entry)
            return
        with journal._sql.writing(durable=False):
            while entries := journal.pending():
                for entry in entries:
                    outbox.acknowledge(journal._db, entry)

    def _keep(self, kept: tuple[dict[str, Any], int]) -> None:
        snapshot, last = kept
        assert last == self.journal.last_decision_id(), (last, self.journal.last_decision_id())
        self.journal.save_statistics(snapshot, last)

    def stop(self, kept: Kept) -> None:
        """``Daemon.run``'s end: commands, frames, statistics, then the journal closes."""
        self._flush_commands()
        self._flush_frames()  # a run's last lines too: the journal's close seals them
        if kept is not None:
            self._keep(kept)
        self.journal.close()


# -- the table: a scripted wheel and the pipeline ----------------------------------------------


class _LazyStats:
    """``Statistics.to_json`` and ``to_json_text`` (what ``<base>/stats`` publishes) computed
    only when ``real`` (the fast build's last game); before it, the message is the extra
    members alone (acknowledged and dropped from the outbox, it never reaches the journal's
    rows)."""

    real = True
    original: Callable[..., dict[str, Any]] | None = None
    original_text: Callable[..., str] | None = None

    @classmethod
    def install(cls) -> None:
        from wheeld.core.stats import Statistics

        cls.original, cls.original_text = Statistics.to_json, Statistics.to_json_text
        cls.real = False

        def to_json(self: Any) -> dict[str, Any]:
            assert cls.original is not None
            return cls.original(self) if cls.real else {}

        def to_json_text(self: Any, **extra: Any) -> str:
            assert cls.original_text is not None
            return cls.original_text(self, **extra) if cls.real else json.dumps(extra)

        setattr(Statistics, "to_json", to_json)  # noqa: B010
        setattr(Statistics, "to_json_text", to_json_text)  # noqa: B010


class Table:
    """Drives the pipeline with a scripted wheel over the plan's days; hands items on.

    ``send(items, runs)``: items for the journal's process and, fast, the runs
    of lines between games that ended meanwhile.
    """

    def __init__(
        self,
        plan: Plan,
        pipeline: TablePipeline,
        *,
        fast: bool,
        send: Callable[[list[Item], list[list[RunPart]]], None],
        info: Callable[[float], Outgoing],
    ) -> None:
        self.plan = plan
        self.pipeline = pipeline
        self.fast = fast
        self._send = send
        self._info = info
        self.rng = random.Random(plan.seed)
        # The wheel's 32-bit millisecond clock wraps an hour in.
        self.wheel = QuickWheel(
            start=plan.start - (TICK_START + 2) / 1000,
            tick=TICK_START,
            rotor="cw",
            rotor_period_ms=ROTOR_PERIOD_MS,
            heartbeat_ms=plan.heartbeat_ms,
        )
        self.items: list[Item] = []
        self.runs: list[list[RunPart]] = []
        self._run: list[RunPart] | None = None
        statistics = pipeline.statistics
        assert statistics is not None
        self._statistics = statistics
        self.decisions = 0
        self._kept = 0
        self._identity: tuple[Any, ...] | None = None
        now = self.wheel.host_time()
        self._next_wheel_state = now + WHEEL_STATE_EVERY_S
        self._next_checkpoint = now + CHECKPOINT_EVERY_S
        self._next_due = min(self._next_wheel_state, self._next_checkpoint)
        #: The last line decoded, and the shortest silence that can void a game.
        self._heard = 0.0
        self._silence_s = pipeline.settings.rules.link_timeout_ms / 1000
        self.first_game_at: float | None = None
        self.last_game_at = 0.0
        self.results = 0
        self.no_spins = 0
        #: Games played so far.
        self.games = 0

    # -- the daemon's side ---------------------------------------------------------------

    def _kept_now(self, *, last: bool = False) -> Kept:
        """What ``_keep_statistics`` keeps now, if anything.

        Fast build: a placeholder, but for the last one kept (each replaces the one before).
        """
        if self.decisions == self._kept:
            return None
        self._kept = self.decisions
        if self.fast and not last:
            return {"format": "placeholder: replaced by the last one kept"}, self.decisions
        return self._snapshot(), self.decisions

    def _snapshot(self) -> dict[str, Any]:
        return self._statistics.snapshot()

    def _timers(self, at: float) -> None:
        """The daemon's repeating timers due before ``at``."""
        if at < self._next_due:
            return
        while self._next_wheel_state <= at or self._next_checkpoint <= at:
            if self._next_wheel_state <= self._next_checkpoint:
                due = self._next_wheel_state
                self._next_wheel_state += WHEEL_STATE_EVERY_S
                self.items.append(("W", due, self.pipeline.wheel_message(due)))
            else:
                due = self._next_checkpoint
                self._next_checkpoint += CHECKPOINT_EVERY_S
                self.items.append(("C", due, self._kept_now()))
        self._next_due = min(self._next_wheel_state, self._next_checkpoint)

    def _runs_frames(self, frames: list[FrameRecord]) -> list[FrameRecord]:
        """Fast: the lines between games join their run; the game's are returned."""
        kept = []
        for frame in frames:
            if frame.game_id is None:
                assert not frame.noise
                self._open_run().append((frame.at, frame.direction, frame.line))
            else:
                if self._run is not None:
                    self._close_run()
                kept.append(frame)
        return kept

    def _open_run(self) -> list[RunPart]:
        if self._run is None:
            self._run = []
            self.items.append(("RS",))
        return self._run

    def _close_run(self) -> None:
        assert self._run is not None
        self.runs.append(self._run)
        self._run = None
        self.items.append(("RE",))

    def effects(self, at: float, effects: Effects) -> None:
        """One input's effects, as ``EffectsApplier.apply`` gets them (and, after a record
        of games, ``pipeline.committed()``'s, as it applies them)."""
        pipeline = self.pipeline
        if self.fast and effects.frames:
            effects.frames = self._runs_frames(effects.frames)
        if (
            len(effects.frames) <= 1
            and not effects.games
            and not effects.messages
            and effects.state is None
            and effects.table_state is None
            and not effects.commands
            and not effects.alarms
            and effects.set_alerts is None
            and not effects.alarmed
            and effects.chain_floor is None
            and effects.taken_from is None
            and not effects.superseded
        ):
            if effects.frames:
                frame = effects.frames[0]
                self.items.append(("F", frame.at, frame.line, frame.game_id))
            elif not self.fast:
                self.items.append(("E", at, effects, None, None))
            if self._identity is not None:
                return
        else:
            state = chain = None
            if effects.decided:
                state = effects.state or replace(pipeline.view.engine_state)
                chain = pipeline.view.signed_chain
            for game in effects.games:
                if game.event in ("result", "no_spin"):
                    self.last_game_at = at
                    if game.event == "result":
                        self.results += 1
                    else:
                        self.no_spins += 1
            messages = bool(effects.messages)
            effects.logs, effects.writes = [], []  # the log's and the wheel's, not the journal's
            self.items.append(("E", at, effects, state, chain))
            if effects.decided:
                self.decisions += len(effects.games)
                if effects.games:
                    # Kept: the history, the statistics and the alerts follow from them.
                    self.effects(at, pipeline.committed())
                if self.decisions - self._kept >= STATISTICS_EVERY:
                    self.items.append(("K", self._kept_now()))
            if not messages and self._identity is not None:
                return
        # The identity changes with the wheel's hello, which comes with <base>/wheel.
        info = pipeline.view.wheel_info
        wheel: tuple[Any, ...] = (
            info.get("model"),
            info.get("firmware"),
            info.get("serial"),
            pipeline.view.pockets,
        )
        if wheel != self._identity:
            self._identity = wheel
            self.items.append(("I", self._info(at)))

    def feed(self) -> None:
        """Everything the wheel sent since the last call, decoded line by line."""
        pipeline = self.pipeline
        heard = self._heard
        for at, frame in self.wheel.lines:
            self._timers(at)
            # The daemon's timer (``_rearm``): a deadline is the last line heard plus the
            # link timeout, so none can be due before a silence that long.
            if at - heard >= self._silence_s:
                deadline = pipeline.next_deadline()
                if deadline is not None and deadline <= at:
                    self.effects(deadline, pipeline.on_timer(deadline))
            self.effects(at, pipeline.on_bytes(frame + b"\r\n", at))
            heard = at
        self._heard = heard
        self.wheel.lines.clear()

    def pass_over(self, ms: int) -> None:
        """``ms`` of the wheel's heartbeats and rotor passes with no game in progress.

        Reference: sent and decoded line by line. Fast: not decoded, and not
        even written here (the run's process writes them): the decoder's frame
        count and sequence move on past them, as decoding them would (the
        engine learns nothing from them that the lines before the next launch,
        decoded, do not tell it again).
        """
        wheel = self.wheel
        if not self.fast:
            wheel.advance(ms)
            self.feed()
            return
        assert self.pipeline.engine.game_in_progress is None
        decoder = cast(WrpDecoder, self.pipeline.decoder)
        until = wheel.tick + ms
        while wheel.tick < until:
            # Cut at the daemon's next timer: <base>/wheel carries the decoder's frame count.
            due = min(self._next_wheel_state, self._next_checkpoint)
            end = wheel.tick + math.floor((due - wheel.host_time()) * 1000)
            while end > wheel.tick and wheel.host_time(end) >= due:
                end -= 1
            while wheel.host_time(end + 1) < due:
                end += 1
            stretch = wheel.skip(min(until, max(end, wheel.tick)) - wheel.tick)
            if stretch.count:
                self._open_run().append(stretch)
                decoder.counters.frames += stretch.count
            # Due before the next line the wheel sends: fired now, as a line would fire them.
            self._timers(wheel.host_time(wheel.tick + 1))
        decoder._last_seq = (wheel.seq - 1) % 65536

    def command(self, name: str, at: float) -> None:
        command = OperatorCommand(
            name, json.dumps({"operator": PIT_BOSS}).encode(), sender=PIT_BOSS
        )
        self._timers(at)
        reply, effects = self.pipeline.on_command(command, at)
        assert reply["ok"], reply
        self.effects(at, effects)

    def flush(self) -> None:
        if self.items or self.runs:
            self._send(self.items, self.runs)
            self.items, self.runs = [], []

    # -- the table's days ----------------------------------------------------------------

    def run(self) -> None:
        plan, wheel, rng = self.plan, self.wheel, self.rng
        now = wheel.host_time()
        self.effects(now, self.pipeline.start(now))
        self.effects(now, self.pipeline.on_link_up(now))
        wheel.hello()
        wheel.advance(3000)
        self.feed()
        day_open = wheel.host_time()
        for number in range(plan.games):
            last = (
                plan.games - number == 1
                or (plan.stop_at is not None and time.time() >= plan.stop_at)
                or (
                    plan.stop_file is not None
                    and number % STOP_LOOK_EVERY == 0
                    and plan.stop_file.exists()
                )
            )
            if last:
                _LazyStats.real = True  # the last game's <base>/stats is the one kept
            hour_rate = rng.uniform(*RATE_PER_HOUR)
            cycle_ms = 3_600_000 / hour_rate * rng.uniform(0.75, 1.25)
            extra = rng.choice((0, 0, 1, 2, 3))
            periods = [560, 580, 590][:extra] + list(DEFAULT_BALL_PERIODS)
            bounces = [str(rng.randrange(37)) for _ in range(rng.choice((0, 1, 1, 2, 3)))]
            game_ms = 700 + sum(periods) + 400 + 450 * len(bounces) + 1500
            gap_ms = max(MIN_GAP_MS, round(cycle_ms - game_ms))
            if wheel.host_time() + (gap_ms + game_ms) / 1000 > day_open + plan.open_hours * 3600:
                self._close_for_the_night(rng)
                day_open = wheel.host_time()
            self._between_games(gap_ms)
            result = str(rng.randrange(37))
            if rng.random() >= VOID_RATE:
                wheel.game(result, periods=periods, bounces=bounces)
            else:  # an object on the wheel: the spin is void, the ball runs on
                cut = rng.randrange(1, len(periods))
                wheel.pocket(None)
                wheel.advance(700)
                direction = wheel.launch()
                wheel.run_ball(direction, periods[:cut])
                wheel.incident("object")
                wheel.run_ball(direction, periods[cut:])
                wheel.drop(*bounces, result)
                wheel.advance(1500)
            self.feed()
            if self.first_game_at is None:
                self.first_game_at = self.last_game_at
            self.games = number + 1
            if number % 16 == 15:
                self.flush()
            if last:
                break
        if self._run is not None:
            self._close_run()
        kept = self._kept_now(last=True)
        if kept is None and self.fast and self._kept:
            kept = self._snapshot(), self._kept  # the last one kept, for real this time
        self.items.append(("X", kept))
        self.flush()

    def _between_games(self, gap_ms: int) -> None:
        """The dealer reverses the rotor (after a result); heartbeats and rotor passes until the
        ball is picked up.

        Decoded (fast build) from just before the rotor pass the launch needs,
        or the three a re-spin needs after a no-spin.
        """
        wheel = self.wheel
        passes = 1 if self.pipeline.engine.state.rotor_revolutions_since_no_spin is None else 3
        if passes == 1:  # after a result; after a no-spin the ball is launched again as it was
            wheel.set_rotor(opposite(wheel.rotor or "ccw"))
        pick_up = wheel.tick + gap_ms
        launch = pick_up + 700
        period = wheel.rotor_period_ms
        last = wheel._next_rotor + (launch - wheel._next_rotor) // period * period
        first = last - (passes - 1) * period
        assert first > wheel.tick, "the gap is too short for the rotor passes the launch needs"
        self.pass_over(first - 1 - wheel.tick)
        wheel.advance(pick_up - wheel.tick)
        self.feed()

    def _close_for_the_night(self, rng: random.Random) -> None:
        wheel = self.wheel
        self.pass_over(rng.randrange(20_000, 120_000))
        self.command("close", wheel.host_time())
        turning = wheel.rotor or "cw"
        wheel.set_rotor(None)
        self.pass_over(round(self.plan.closed_hours * 3_600_000))
        wheel.set_rotor(turning)
        self.command("open", wheel.host_time())
        self.flush()


# -- building -------------------------------------------------------------------------------


def _quick_pickles() -> None:
    """Pickle the effects' records as plain tuples (the default pickling of a slotted
    dataclass asks ``dataclasses.fields`` for every object)."""
    import copyreg
    import dataclasses

    from wheeld.table.effects import AlarmRecord, CommandRecord, GameRecord, LogRecord

    for cls in (
        Effects,
        FrameRecord,
        Outgoing,
        GameRecord,
        CommandRecord,
        AlarmRecord,
        LogRecord,
        EngineState,
        ChainState,
        Stretch,
    ):
        names = tuple(f.name for f in dataclasses.fields(cls))

        def reduce(obj: Any, cls: type = cls, names: tuple[str, ...] = names) -> Any:
            return cls, tuple(getattr(obj, name) for name in names)

        copyreg.pickle(cls, reduce)


class _UnsyncedConnection(sqlite3.Connection):
    """``synchronous=OFF`` whatever the journal asks: no fsync, the same bytes."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith("PRAGMA synchronous"):
            sql = "PRAGMA synchronous=OFF"
        return super().execute(sql, *args)


class _BatchedConnection(_UnsyncedConnection):
    """The journal's process: between ``begin_batch`` and ``end_batch`` (a batch of items,
    16 games), the journal's own transactions (``BEGIN IMMEDIATE`` ... ``COMMIT``) are parts
    of one: the same statements in the same order, so the same rows, one commit instead of
    some fifty a game (a frame flush a second, each outbox entry, each decision). A write
    that fails fails the build, so no transaction of the journal's is ever rolled back."""

    _batch = False
    _inner = False

    def begin_batch(self) -> None:
        super().execute("BEGIN IMMEDIATE")
        self._batch = True

    def end_batch(self) -> None:
        self._batch = False
        super().execute("COMMIT")

    @property
    def in_transaction(self) -> bool:
        return self._inner if self._batch else super().in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self._batch:
            if sql == "BEGIN IMMEDIATE":
                assert not self._inner, "a transaction of the journal's inside another"
                self._inner = True
                return self._noop
            if sql == "COMMIT":
                self._inner = False
                return self._noop
            if sql == "ROLLBACK" or sql.startswith("PRAGMA wal_"):
                raise RuntimeError(f"{sql!r} inside a batch of the build's journal")
            if sql.startswith("PRAGMA synchronous"):
                return self._noop  # no fsync in the build whatever the journal asks
        return super().execute(sql, *args)

    @functools.cached_property
    def _noop(self) -> sqlite3.Cursor:
        return self.cursor()


class _TailInMemory:
    """The journal's process: what ``FrameTail`` keeps in ``frame_tail`` rows (the open
    block's lines, a row a line, read back and deleted when the block is sealed) kept in a
    list instead: the daemon keeps them in the database to find them again after a crash,
    which the build never has. Every other statement goes to the journal's connection, so
    ``FrameTail`` cuts and seals the same blocks at the same lines (``--check``)."""

    _SELECT = "SELECT t, dir, line FROM frame_tail ORDER BY id"

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._rows: list[tuple[Any, ...]] = []
        assert not db.execute("SELECT 1 FROM frame_tail LIMIT 1").fetchall(), "a tail left"

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == self._SELECT:
            return _Fetched([row[:3] for row in self._rows])
        if sql == "DELETE FROM frame_tail":
            self._rows = []
            return None
        return self._db.execute(sql, *args)

    def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> Any:
        if sql.startswith("INSERT INTO frame_tail "):
            self._rows += rows
            return None
        return self._db.executemany(sql, rows)


@dataclass(frozen=True, slots=True)
class _Fetched:
    rows: list[tuple[Any, ...]]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


#: SQLite's own ``connect``, before ``_unsynced_sqlite`` replaces it.
_CONNECT = sqlite3.connect


def _unsynced_sqlite(factory: type[sqlite3.Connection] = _UnsyncedConnection) -> None:
    connect = _CONNECT

    def unsynced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs["factory"] = factory
        return cast(sqlite3.Connection, connect(*args, **kwargs))

    sqlite3.connect = unsynced  # type: ignore[assignment]


@dataclass(frozen=True)
class BuildReport:
    seconds: float
    first_game_at: float
    last_game_at: float
    results: int
    no_spins: int
    decisions: int
    #: Games built (fewer than asked when the build's time ran out).
    games: int = 0
    #: CPU seconds of each process: the pipeline's (the whole build's when in one), the
    #: journal's, and the one that encodes the runs of lines between games.
    pipeline_cpu: float = 0.0
    journal_cpu: float = 0.0
    runs_cpu: float = 0.0


def _encoder(
    conn: multiprocessing.connection.Connection, out: multiprocessing.queues.Queue[Any]
) -> None:
    """The runs' process: runs of lines between games in, encoded runs out, in order."""
    while True:
        runs = pickle.loads(conn.recv_bytes())
        if runs is None:
            break
        for run in runs:
            out.put(encode_run(run))
    out.put(time.process_time())
    out.close()
    out.join_thread()


def _writer(
    state_dir: Path,
    conn: multiprocessing.connection.Connection,
    runs: multiprocessing.queues.Queue[Any],
) -> None:
    """The journal's process: items in, the daemon's writes out."""
    _unsynced_sqlite(_BatchedConnection)
    journal = Journal(state_dir / JOURNAL_FILE)
    db = cast(_BatchedConnection, journal._db)
    journal._tail._db = cast(sqlite3.Connection, _TailInMemory(db))
    shell = Shell(journal, runs.get)
    while True:
        batch = pickle.loads(conn.recv_bytes())
        if batch is None:
            break
        stops = bool(batch) and batch[-1][0] == "X"  # the journal's close: a transaction of its own
        db.begin_batch()
        shell.handle(batch[:-1] if stops else batch)
        db.end_batch()
        if stops:
            shell.handle(batch[-1:])
    conn.send((shell.decisions, time.process_time(), runs.get()))
    conn.close()


def _reporting(
    target: Callable[..., None], errors: multiprocessing.connection.Connection, *args: Any
) -> None:
    """A build process's body: its failure, with its traceback, goes to the parent."""
    try:
        target(*args)
    except BaseException:
        with contextlib.suppress(OSError):
            errors.send(traceback.format_exc())
        raise


class Children:
    """The build's processes, watched: when one fails, the others are ended, so whatever
    the pipeline's process waits on (a full pipe, a reply) fails at once, and ``check``
    raises why (the child's traceback)."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._reader, self._writer = context.Pipe(duplex=False)
        self.processes: list[Any] = []
        self.failure: str | None = None
        self._watcher: threading.Thread | None = None

    def start(self, target: Callable[..., None], *args: Any, name: str) -> None:
        process = self._context.Process(
            target=_reporting, args=(target, self._writer, *args), name=name, daemon=True
        )
        process.start()
        self.processes.append(process)

    def watch(self) -> None:
        """Watch the processes started (in a thread of this process)."""
        self._watcher = threading.Thread(target=self._watch, name="children", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        waiting = {process.sentinel: process for process in self.processes}
        while waiting:
            for sentinel in multiprocessing.connection.wait(list(waiting)):
                process = waiting.pop(cast(int, sentinel))
                process.join()
                # None: the main thread reaped it first (joining at the build's end),
                # and it checks the exit code itself; only a code that is not 0 failed.
                if process.exitcode not in (0, None):
                    self._failed(process)
                    return

    def _failed(self, process: Any) -> None:
        said = ""
        with contextlib.suppress(OSError, EOFError):
            if self._reader.poll(1.0):
                said = self._reader.recv()
        self.failure = f"the build's {process.name} process failed (exit {process.exitcode})" + (
            f":\n{said}" if said else ""
        )
        for other in self.processes:
            if other.is_alive():
                other.kill()  # a process this build started, by its own handle

    def check(self) -> None:
        """Raise the failure of a child, if one failed (once the watcher has had its say)."""
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        if self.failure is not None:
            raise RuntimeError(self.failure)


def build(
    directory: Path, plan: Plan, *, fast: bool = True, epoch: str | None = None
) -> BuildReport:
    """Build ``plan``'s journal in ``directory``: ``state/``, ``signing.key``, ``wheeld.toml``."""
    from wheeld.config import load
    from wheeld.testing.rig import write_config

    _unsynced_sqlite()
    if epoch is not None:
        import wheeld.shell.journal.state

        wheeld.shell.journal.state.secrets.token_urlsafe = lambda n=None: epoch  # type: ignore[attr-defined]
    started, cpu = time.perf_counter(), time.process_time()
    directory.mkdir(parents=True, exist_ok=True)
    state_dir = directory / "state"
    config_path = write_config(
        directory / "wheeld.toml", port="/dev/ttyUSB0", broker=1883, state=state_dir
    )
    config = load(config_path)
    signer = load_signer(config)
    journal = Journal(state_dir / JOURNAL_FILE)
    journal.claim_table(config.table.id)
    pipeline = build_pipeline(config, journal, signer)

    def info(now: float) -> Outgoing:
        from wheeld.shell import identity

        assert signer is not None
        payload = identity.info_payload(
            config,
            wheel={
                "model": pipeline.view.wheel_info.get("model"),
                "firmware": pipeline.view.wheel_info.get("firmware"),
                "serial": pipeline.view.wheel_info.get("serial"),
                "pockets": pipeline.view.pockets,
            },
            kid=signer.kid,
            public_key_pem=signer.public_pem().decode("ascii"),
            now=now,
            epoch=pipeline.settings.epoch,
        )
        return Outgoing(
            f"{pipeline.settings.base_topic}/info", json.dumps(signer.sign(payload)), retain=True
        )

    runs_cpu = journal_cpu = 0.0
    if not fast:
        shell = Shell(journal)
        table = Table(
            plan, pipeline, fast=False, send=lambda items, _: shell.handle(items), info=info
        )
        table.run()
        decisions = shell.decisions
    else:
        # The journal is opened again by its own process (a connection is not carried over fork).
        journal.close()
        _LazyStats.install()
        _quick_pickles()
        context = multiprocessing.get_context("fork")
        encoded: multiprocessing.queues.Queue[Any] = context.Queue()
        to_journal, journal_end = context.Pipe()
        to_runs, runs_end = context.Pipe()
        children = Children(context)
        children.start(_writer, state_dir, journal_end, encoded, name="journal")
        children.start(_encoder, runs_end, encoded, name="runs")
        journal_end.close()
        runs_end.close()
        children.watch()

        def send(items: list[Item], runs: list[list[RunPart]]) -> None:
            if runs:  # first: the journal's process waits for them at their ("RE",)
                to_runs.send_bytes(pickle.dumps(runs, protocol=pickle.HIGHEST_PROTOCOL))
            to_journal.send_bytes(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))

        table = Table(plan, pipeline, fast=True, send=send, info=info)
        try:
            table.run()
            to_runs.send_bytes(pickle.dumps(None))
            to_journal.send_bytes(pickle.dumps(None))
            decisions, journal_cpu, runs_cpu = to_journal.recv()
        except (OSError, EOFError):
            children.check()  # a child failed: its error, not the broken pipe it left
            raise
        for process in children.processes:
            process.join()
        children.check()
        failed = [p for p in children.processes if p.exitcode != 0]
        if failed:  # reaped here before the watcher saw it
            raise RuntimeError(
                f"the build's {failed[0].name} process failed (exit {failed[0].exitcode})"
            )
    assert decisions == table.decisions, (decisions, table.decisions)
    return BuildReport(
        time.perf_counter() - started,
        table.first_game_at or 0.0,
        table.last_game_at,
        table.results,
        table.no_spins,
        decisions,
        table.games,
        time.process_time() - cpu,
        journal_cpu,
        runs_cpu,
    )


# -- the check: the fast build against the daemon's way -----------------------------------------


def journal_rows(path: Path) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Every row of every table of a journal (SQLite's own sequences too), table by table."""
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
        names = [
            row[0]
            for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        for name in names:
            for row in db.execute(f"SELECT * FROM {name} ORDER BY rowid"):
                yield name, tuple(row)


def check_wheel(trials: int = 200) -> None:
    """``QuickWheel`` writes what ``ScriptedWheel`` writes; ``skip`` leaves it as ``advance``."""
    rng = random.Random(5)
    for _ in range(trials):
        settings: dict[str, Any] = {
            "start": 1.7e9 + rng.random(),
            "tick": rng.randrange(1, 1 << 33),
            "seq": rng.randrange(65536),
            "rotor": rng.choice(["cw", "ccw", None]),
            "rotor_period_ms": rng.choice([1000, 2400, 2399]),
            "heartbeat_ms": rng.choice([250, 100, 333, None]),
        }
        slow, quick, skipping = (
            ScriptedWheel(**settings),
            QuickWheel(**settings),
            QuickWheel(**settings),
        )
        for _ in range(20):
            ms = rng.randrange(0, 20_000)
            if rng.random() < 0.2:
                turning = rng.choice(["cw", "ccw", None])
                for wheel in (slow, quick, skipping):
                    wheel.set_rotor(cast(Any, turning))
            slow.advance(ms)
            quick.advance(ms)
            stretch = skipping.skip(ms)
            assert stretch.lines() == quick.lines[len(quick.lines) - stretch.count :]
            for wheel in (quick, skipping):
                assert (wheel.tick, wheel.seq, wheel._next_rotor, wheel._next_heartbeat) == (
                    slow.tick,
                    slow.seq,
                    slow._next_rotor,
                    slow._next_heartbeat,
                )
                assert wheel.last_datum_tick == slow.last_datum_tick
        assert slow.lines == quick.lines


def compare(games: int, fps: float, work: Path) -> list[str]:
    """Build ``games`` both ways (short days: 2 h open, 1 h closed); where the journals differ."""
    span = Plan.span_s(games, 2, 1)
    plan = Plan(games, fps, start=time.time() - span - 3600, open_hours=2, closed_hours=1)
    site = work / "table"  # both built here in turn: the paths in <base>/info are the same
    for name, fast in (("reference", False), ("fast", True)):
        if fast:  # the same key: signatures are deterministic
            site.mkdir(parents=True)
            for key in ("signing.key", "signing.pub"):
                shutil.copy2(work / "reference" / key, site / key)
        report = _in_child(functools.partial(build, site, plan, fast=fast, epoch="check-epoch-0"))
        print(
            f"  {name}: {report.results} results, {report.no_spins} no-spins,"
            f" {report.seconds:.1f} s"
        )
        site.rename(work / name)
    differences = []
    files = [work / name / "state" / JOURNAL_FILE for name in ("reference", "fast")]
    rows = 0
    for left, right in zip(journal_rows(files[0]), journal_rows(files[1]), strict=False):
        rows += 1
        if left != right:
            differences.append(f"{str(left)[:200]} != {str(right)[:200]}")
            if len(differences) >= 5:
                break
    counts = [sum(1 for _ in journal_rows(file)) for file in files]
    if counts[0] != counts[1]:
        differences.append(f"{counts[0]} rows against {counts[1]}")
    marks = [(work / name / "state" / "game-ids").read_text() for name in ("reference", "fast")]
    if marks[0] != marks[1]:
        differences.append(f"game-ids: {marks[0]!r} != {marks[1]!r}")
    sizes = [file.stat().st_size for file in files]
    print(f"  {rows} rows compared; file sizes {sizes[0]:,} (reference) / {sizes[1]:,} (fast) B")
    return differences


def _in_child(action: Callable[[], Any]) -> Any:
    """Run ``action`` in a forked process (its patches stay there); its result, or its
    failure raised here (a child that dies without a word included: never a wait forever)."""
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe(duplex=False)

    def run() -> None:
        try:
            theirs.send(("ok", action()))
        except BaseException:
            theirs.send(("error", traceback.format_exc()))
            raise

    child = context.Process(target=run)
    child.start()
    theirs.close()
    try:
        status, result = ours.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the build process died (exit {child.exitcode})") from None
    child.join()
    if status != "ok":
        raise RuntimeError(result)
    return result


# -- the machine and the built journal ---------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        memory = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    mosquitto = subprocess.run(
        ["mosquitto", "-h"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "mosquitto": mosquitto[0] if mosquitto else "?",
        "load": os.getloadavg(),
    }


def built(out: Path, games: int, fps: float, minutes: float | None = None) -> dict[str, Any]:
    """The journal of ``games`` at ``fps`` in ``out``: reused when there, else built (for
    at most ``minutes``: then the game under way is the last, and fewer are built)."""
    described = out / "build.json"
    wanted = {"format": BUILD_FORMAT, "games": games, "fps": fps}
    if described.exists():
        found = json.loads(described.read_text())
        if {key: found.get(key) for key in wanted} == wanted:
            print(f"reusing the journal built in {out} ({found['built']})")
            return cast(dict[str, Any], found)
        print(f"{out} holds another build ({ {k: found.get(k) for k in wanted} }): building again")
    for name in ("state", "build.json", "wheeld.toml", "signing.key", "signing.pub"):
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    span = Plan.span_s(games)
    plan = Plan(
        games,
        fps,
        start=math.floor(time.time() - span * 1.01 - 60),
        stop_at=None if minutes is None else time.time() + minutes * 60,
        stop_file=out / STOP_FILE,
    )
    (out / STOP_FILE).unlink(missing_ok=True)
    print(
        f"building {games:,} games at {fps:g} frames/s into {out} (touch {out / STOP_FILE}"
        " to end it at the game under way) ...",
        flush=True,
    )
    load = os.getloadavg()
    report: BuildReport = _in_child(lambda: build(out, plan))
    found = {
        **wanted,
        "built": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seed": plan.seed,
        "start": plan.start,
        "seconds": round(report.seconds, 1),
        "games_built": report.games,
        "games_per_s": round(report.games / report.seconds, 1) if report.seconds else None,
        "cpu_s": {
            "pipeline": round(report.pipeline_cpu, 1),
            "journal": round(report.journal_cpu, 1),
            "runs": round(report.runs_cpu, 1),
        },
        "load_before": load,
        "load_after": os.getloadavg(),
        "first_game_at": report.first_game_at,
        "last_game_at": report.last_game_at,
        "results": report.results,
        "no_spins": report.no_spins,
        "decisions": report.decisions,
    }
    described.write_text(json.dumps(found, indent=1) + "\n")
    return found


def journal_size(state_dir: Path, games: int, days: float) -> dict[str, Any]:
    """Bytes on disk (database and write-ahead log, after the last close's checkpoint), and
    where they go (SQLite's ``dbstat``)."""
    path = state_dir / JOURNAL_FILE
    wal = path.with_name(path.name + "-wal")
    total = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    where: dict[str, int] = {}
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
        for name, size in db.execute(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ):
            where[name] = int(size)
        blocks = db.execute(
            "SELECT game_id IS NULL, COUNT(*), SUM(lines), SUM(LENGTH(data)) FROM frame_blocks"
            " GROUP BY 1"
        ).fetchall()
        decisions = db.execute("SELECT COUNT(*), SUM(LENGTH(payload)) FROM decisions").fetchone()
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
    per_game = total / games if games else 0.0
    # What retention keeps apart: the decisions (with their results, commands and alarms)
    # for decisions_days, the serial lines for frames_days.
    kinds = {
        "decisions": ("decisions", "decisions_by_game", "results", "commands", "alarms"),
        "frames": ("frame_blocks", "frame_blocks_by_game", "frame_tail"),
    }
    split = {kind: sum(where.get(name, 0) for name in names) for kind, names in kinds.items()}
    split["other"] = sum(where.values()) - sum(split.values())
    return {
        "bytes": total,
        "per_game": per_game,
        "per_day": total / days if days else 0.0,
        "per_year": per_game * GAMES_PER_YEAR,
        "tables": where,
        "split_bytes": split,
        "free_bytes": free * page,
        "blocks": {
            "between games" if between else "games": {
                "blocks": count,
                "lines": lines,
                "data_bytes": data,
            }
            for between, count, lines, data in blocks
        },
        "decisions": {"rows": decisions[0], "payload_bytes": decisions[1]},
    }


# -- the daemon on the built journal -----------------------------------------------------------


def _daemon_config(path: Path, *, state: Path, port: Path, broker: int, key: Path) -> Path:
    """The table's configuration, retention far off (nothing of the built journal goes)."""
    path.write_text(
        '[table]\nid = "T9"\n'
        f'[wheel]\ndriver = "wrp"\nport = "{port}"\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker}\nkeepalive_s = 5\n'
        f'[state]\ndir = "{state}"\ndecisions_days = 36500\nframes_days = 36500\n'
        '[log]\nformat = "json"\nlevel = "warning"\n'
        f"[signing]\nkey_file = {json.dumps(str(key))}\n"
    )
    return path


def evict(state: Path) -> str:
    """The journal's files out of the page cache; how (``drop_caches`` when writable)."""
    os.sync()
    for path in state.iterdir():
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return "posix_fadvise(DONTNEED)"
    return "posix_fadvise(DONTNEED) and drop_caches"


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


class Session:
    """A mosquitto, a pty wheel and a notify socket; ``wheeld run`` started on a state dir."""

    def __init__(self, work: Path, key: Path) -> None:
        from wheeld.testing.rig import Broker, NotifySocket, PtyWheel

        self.work = work
        self.key = key
        self.broker = Broker(work)
        self.broker.start()
        self.pty = PtyWheel(work / "wheel")
        self.notify = NotifySocket(work / "notify.sock")
        self.process: subprocess.Popen[bytes] | None = None
        #: The source tree the daemon runs from (``--daemon-from``: another for comparison).
        self.source = REPO

    def start(self, state: Path, *, cold: bool = False) -> float:
        """Start the daemon on ``state``; seconds to READY=1 (after evicting the journal: cold)."""
        config = _daemon_config(
            self.work / "wheeld.toml",
            state=state,
            port=self.work / "wheel",
            broker=self.broker.port,
            key=self.key,
        )
        if cold:
            evict(state)
        sock = self.notify.sock
        with contextlib.suppress(TimeoutError, BlockingIOError):  # what an earlier run said
            sock.settimeout(0.001)
            while True:
                sock.recv(4096)
        with (self.work / "wheeld.log").open("ab") as log:
            started = time.monotonic()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
                env={**os.environ, "NOTIFY_SOCKET": str(self.notify.path)},
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=self.source,
            )
        deadline = started + 120
        while True:
            sock.settimeout(0.2)
            try:
                said = sock.recv(4096)
            except TimeoutError:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"wheeld run exited {self.process.returncode}: see {self.work}/wheeld.log"
                    ) from None
                if time.monotonic() > deadline:
                    raise
                continue
            if b"READY=1" in said:
                return time.monotonic() - started

    def memory(self) -> tuple[int, int]:
        """The daemon's peak and current resident memory (VmHWM, VmRSS), KiB."""
        assert self.process is not None
        return _status_kib(self.process.pid, "VmHWM:"), _status_kib(self.process.pid, "VmRSS:")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None

    def close(self) -> None:
        self.stop()
        self.pty.close()
        self.notify.close()
        self.broker.stop()


def measure_ready(session: Session, states: dict[str, Path], repeats: int) -> dict[str, Any]:
    """READY warm and cold (medians of ``repeats``) and peak memory for each of ``states``,
    their starts interleaved (the machine's load drifts)."""
    found: dict[str, dict[str, list[float]]] = {
        name: {"warm": [], "cold": [], "vmhwm": []} for name in states
    }
    for _ in range(repeats):
        for kind in ("warm", "cold"):
            for name, state in states.items():
                found[name][kind].append(session.start(state, cold=kind == "cold"))
                time.sleep(2.0)  # online, the broker's memory read, the first retention batch
                found[name]["vmhwm"].append(session.memory()[0])
                session.stop()
    return {
        name: {
            "warm_s": stats_.median(times["warm"]),
            "cold_s": stats_.median(times["cold"]),
            "warm_all": times["warm"],
            "cold_all": times["cold"],
            "vmhwm_kib": max(times["vmhwm"]),
        }
        for name, times in found.items()
    }


class Operator:
    """Sends commands (MQTT 5, an ``operator`` user property each) and reads their replies
    through ``mosquitto_sub`` (topic and length a line), so that receiving them costs the
    measuring process nothing while it times ``spinning``."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.replies = subprocess.Popen(
            [
                "mosquitto_sub",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-q",
                "1",
                "-V",
                "mqttv311",
                "-t",
                "wheeld-replies/bench/#",
                "-F",
                "%t %l",
            ],
            stdout=subprocess.PIPE,
        )
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.sent = 0
        self._pending = b""
        time.sleep(0.5)  # both subscribed and connected

    def recall(self, body: dict[str, Any]) -> None:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.sent += 1
        # One sender each of 16: ten recalls a round stay under each sender's rate.
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = [("operator", f"bench-{self.sent % 16}")]
        payload = {**body, "reply_to": f"wheeld-replies/bench/{self.sent}"}
        self.client.publish(
            "wheeld/T9/command/recall", json.dumps(payload), qos=1, properties=properties
        )

    def reply(self, timeout: float = 60) -> int:
        """The next reply's length in bytes."""
        size = self._next(time.monotonic() + timeout)
        if size is None:
            raise TimeoutError("no recall reply")
        return size

    def replies_until(self, deadline: float) -> int:
        """How many replies come before ``deadline`` (``time.monotonic()``)."""
        count = 0
        while self._next(deadline) is not None:
            count += 1
        return count

    def _next(self, deadline: float) -> int | None:
        import select

        stdout = self.replies.stdout
        assert stdout is not None
        while b"\n" not in self._pending:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError("mosquitto_sub ended")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return int(line.split()[1])

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
        self.replies.terminate()
        self.replies.wait(10)


def _percentile(samples: list[float], percent: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else math.nan
    return stats_.quantiles(samples, n=100, method="inclusive")[percent - 1]


def measure_recall(
    session: Session, state: Path, games: int, rounds: int, last_rotor: str | None
) -> dict[str, Any]:
    """``recall`` times, and ``spinning`` latency with and without 10 recalls running."""
    from wheeld.testing.rig import Subscriber

    session.start(state)
    status = Subscriber(session.broker.port, "wheeld/T9/status")
    status.wait("wheeld/T9/status", lambda body: body.get("state") == "online", timeout=30)
    status.close()
    game_topic = "wheeld/T9/game"
    games_seen = Subscriber(session.broker.port, game_topic)
    operator = Operator(session.broker.port)
    found: dict[str, Any] = {}
    # A launch must be valid: the rotor turns the other way from the last result's.
    wheel = ScriptedWheel(
        start=time.time(), rotor=cast(Any, opposite(cast(Any, last_rotor or "ccw")))
    )
    wheel.hello()
    wheel.advance(3000)
    session.pty.write(wheel.wire())

    def timed(body: dict[str, Any]) -> tuple[float, int]:
        time.sleep(RECALL_PACE_S)  # within the table's recall rate: every one answered
        sent = time.monotonic()
        operator.recall(body)
        size = operator.reply()
        return time.monotonic() - sent, size

    try:
        if games:
            middle = max(1, games // 2)
            for name, body in (
                ("last_10", {"last": 10}),
                ("middle_10", {"last": 10, "game_id": middle}),
                ("middle_1", {"last": 1, "game_id": middle}),
            ):
                evict(state)
                first, size = timed(body)
                warm = [timed(body)[0] for _ in range(5)]
                found[name] = {
                    "cold_s": first,
                    "warm_s": stats_.median(warm),
                    "reply_bytes": size,
                }
        # Of 10 recalls sent at once the table answers its burst (RECALL_BURST, 5) and
        # refuses the rest unread; the answered ones run RECALLS_AT_ONCE (2) at a time.
        spread = RECALL_BURST / 2 * found["last_10"]["warm_s"] if games else 0.0
        rng = random.Random(7)
        latencies: dict[str, list[float]] = {"without": [], "with": []}
        answered: list[int] = []

        def arrival(wanted: bytes, timeout: float = 30) -> float:
            deadline = time.monotonic() + timeout
            while True:
                topic, payload, _ = games_seen.messages.get(
                    timeout=max(0.0, deadline - time.monotonic())
                )
                if topic == game_topic and wanted in payload:
                    return time.monotonic()

        for index in range(2 * rounds):
            busy = bool(games) and index % 2 == 1
            wheel.lines.clear()
            wheel.pocket(None)
            wheel.advance(300)
            before = len(wheel.lines)
            wheel.launch()
            wheel.incident("object")  # void at once: the next launch can follow
            wheel.advance(wheel.rotor_period_ms * 3 + 100)
            session.pty.write(b"".join(frame + b"\r\n" for _, frame in wheel.lines[:before]))
            if busy:
                recalled = time.monotonic()
                for _ in range(10):
                    operator.recall({"last": 10})
                time.sleep(rng.uniform(0, spread))
            sent = time.monotonic()
            session.pty.write(wheel.lines[before][1] + b"\r\n")
            arrived = arrival(b'"event":"spinning"')
            latencies["with" if busy else "without"].append((arrived - sent) * 1000)
            session.pty.write(b"".join(frame + b"\r\n" for _, frame in wheel.lines[before + 1 :]))
            arrival(b'"event":"no_spin"')
            if busy:
                # Every answer, until the recall rate's bucket is full again for the next.
                answered.append(operator.replies_until(recalled + RECALL_BURST / RECALLS_PER_S))
        for kind, samples in latencies.items():
            if samples:
                found[f"spinning_{kind}"] = {
                    "p50_ms": stats_.median(samples),
                    "p99_ms": _percentile(samples, 99),
                    "max_ms": max(samples),
                    "n": len(samples),
                }
        if answered:
            found["recalls_answered"] = {"sent": 10 * len(answered), "answered": sum(answered)}
        found["vmhwm_kib"] = session.memory()[0]
    finally:
        operator.close()
        games_seen.close()
        session.stop()
    return found


def measure_recall_lag(state: Path, game_id: int, rounds: int) -> dict[str, Any]:
    """How late an event loop's 1 ms timer fires while 5 recalls (10 games each, ending at
    ``game_id``) are read as the daemon reads them (``RecallReader``: a process of its
    own, one at a time) and as it read them before (worker threads, two at a time, the
    GIL handed over every millisecond), and while nothing is read: ``rounds`` of each,
    in turn, in this process (the machine's load drifts)."""
    import asyncio

    from wheeld.shell.journal.recall import recall_json
    from wheeld.shell.recall_desk import RecallReader

    path = state / JOURNAL_FILE
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # as the daemon sets it

    async def lags_while(work: Callable[[], Any]) -> list[float]:
        lags: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                started = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - started - 0.001)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        await work()
        done.set()
        await task
        return lags

    async def measure() -> dict[str, list[float]]:
        reader = RecallReader(path)
        await reader.read(10, game_id)  # the process started
        threads = asyncio.Semaphore(2)

        async def in_thread() -> None:
            async with threads:
                await asyncio.to_thread(recall_json, path, 10, game_id)

        async def threaded() -> None:
            await asyncio.gather(*(in_thread() for _ in range(5)))

        async def in_process() -> None:
            await asyncio.gather(*(reader.read(10, game_id) for _ in range(5)))

        async def idle() -> None:
            await asyncio.sleep(0.3)

        found: dict[str, list[float]] = {"process": [], "thread": [], "idle": []}
        try:
            for _ in range(rounds):
                for name, work in (("process", in_process), ("thread", threaded), ("idle", idle)):
                    found[name] += await lags_while(work)
                    await asyncio.sleep(0.1)
        finally:
            reader.close()
        return found

    try:
        found = asyncio.run(measure())
    finally:
        sys.setswitchinterval(interval)
    return {
        name: {
            "ticks": len(lags),
            "p50_ms": stats_.median(lags) * 1000,
            "p99_ms": _percentile(lags, 99) * 1000,
            "max_ms": max(lags) * 1000,
            "over_5ms": sum(1 for lag in lags if lag > 0.005),
        }
        for name, lags in found.items()
    }


# -- wheeld verify, export and stats; retention ------------------------------------------------


def _tree_rss_kib(root: int) -> int:
    """The resident memory of ``root`` and every process under it (KiB, ``VmRSS``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    tree, grown = {root}, True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grown = True
    total = 0
    for pid in tree:
        with contextlib.suppress(OSError, ValueError):
            total += _status_kib(pid, "VmRSS:")
    return total


def measure_tool(args: Sequence[str], state: Path, out: Path) -> dict[str, Any]:
    """A ``python`` command (``-m wheeld ...``) after evicting the journal: wall time, CPU
    time (its processes', reaped ones included), peak memory (the whole process tree's
    resident memory sampled every 0.25 s: ``verify`` checks signatures in a pool; and
    ``ru_maxrss``, which counts the measuring process's memory the child was forked
    with), exit status and last line."""
    evict(state)
    peak = [0]
    with out.open("wb") as sink:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, *args], stdout=sink, stderr=subprocess.STDOUT, cwd=REPO
        )
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.25):
                peak[0] = max(peak[0], _tree_rss_kib(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - started
        done.set()
        sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    text = out.read_bytes()
    last = text.strip().splitlines()[-1].decode("utf-8", "replace")[:160] if text.strip() else ""
    return {
        "wall_s": wall,
        "maxrss_kib": usage.ru_maxrss,
        "tree_rss_kib": peak[0],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "exit": process.returncode,
        "last_line": last,
        "output_bytes": len(text),
    }


#: A step's half on the loop held it this long or more: its CPU, reads and the machine's
#: pauses meanwhile are kept, to tell the step's own time from the machine's.
LONG_HOLD_S = 0.005
#: A process that does nothing but sleep 1 ms, telling when it woke this much late: the
#: machine's own pauses (a VM descheduled, the host's I/O), the same clock as the loop's.
_PAUSE_PROBE = """
import sys, time
while True:
    began = time.perf_counter()
    time.sleep(0.001)
    late = time.perf_counter() - began - 0.001
    if late > 0.003:
        sys.stdout.write(f"{began + 0.001:.6f} {late:.6f}\\n")
        sys.stdout.flush()
"""


class MachinePauses:
    """``_PAUSE_PROBE`` run beside a measurement: ``stop`` gives its pauses (start, length)."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _PAUSE_PROBE], stdout=subprocess.PIPE, text=True
        )

    def stop(self) -> list[tuple[float, float]]:
        self._process.terminate()
        out, _ = self._process.communicate(timeout=30)
        return [
            (float(began), float(late))
            for began, late in (line.split() for line in out.splitlines() if line.strip())
        ]


def _paused_during(pauses: list[tuple[float, float]], began: float, wall: float) -> float:
    """How much of ``[began, began + wall]`` the machine spent in its own pauses."""
    return sum(
        max(0.0, min(began + wall, start + late) - max(began, start)) for start, late in pauses
    )


def _thread_read_bytes() -> int:
    """Bytes this thread has had read from the disk (not the page cache): ``read_bytes``."""
    try:
        with open("/proc/thread-self/io", encoding="ascii") as file:
            for line in file:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure_prune(
    state: Path, first: float, last: float, minutes: float | None = None
) -> dict[str, Any]:
    """The first retention run over the journal aged so that 3/4 of its lines and half its
    decisions are past their days (a year's journal at frames_days = 90 loses 3/4), run as
    ``RetentionJob`` runs it: each step found in a worker thread and deleted on the loop,
    ``RETENTION_PAUSE_S`` between them (and, in turn, all of it on the loop as before);
    meanwhile the event loop commits a line every ``LOOP_WRITE_S`` (the daemon's own
    writes) and sees how late a 1 ms timer fires: how long the loop is held. The same
    loop, with no prune, for half as long after. With ``minutes``, the run stops there (its
    steps are the same all the way: a sample of them)."""
    import asyncio

    from wheeld.shell.jobs.wal import WAL_CHECKPOINT_S
    from wheeld.shell.journal import Retention
    from wheeld.shell.journal.retention import DAY_S

    span_days = max(last - first, 1.0) / DAY_S
    retention = Retention(decisions_days=span_days * 0.5, frames_days=span_days * 0.25)
    # As at a table: the oldest rows, which retention reads first, have not been read
    # since they were written, weeks ago (the journal copied just now is all cached).
    evict(state)
    path = state / JOURNAL_FILE
    size_before = path.stat().st_size
    opened = time.perf_counter()
    journal = Journal(path)
    open_s = time.perf_counter() - opened
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    tables = ("frame_blocks", "decisions", "commands", "alarms")

    def lowest() -> tuple[Any, ...]:
        return tuple(db.execute(f"SELECT MIN(id) FROM {t}").fetchone()[0] for t in tables)

    journal.checkpoint_elsewhere()  # as the daemon's WAL job does: see loop_while
    pruner = journal.pruner(retention)
    steps: dict[str, list[float]] = {table: [] for table in tables}
    #: Each step's CPU time (its thread's): its own work, whatever the machine's load.
    cpu_steps: list[float] = []
    first_steps: list[float] = []
    rows: dict[str, int] = dict.fromkeys(tables, 0)
    now = last + 60
    before = [lowest()]

    def timed(work: Callable[[], Any]) -> tuple[Any, float]:
        cpu = time.thread_time()
        return work(), time.thread_time() - cpu

    async def step(on_loop: bool) -> int:
        """A step as the daemon runs it (found in a worker thread, deleted on the loop), or
        all of it on the loop as before; its wall time, its CPU in both threads."""
        started = time.perf_counter()
        if on_loop:
            on_loop_steps[0] += 1
        find = functools.partial(timed, functools.partial(pruner.find, now))
        batch, cpu_took = find() if on_loop else await asyncio.to_thread(find)
        deleting, read_before = time.perf_counter(), _thread_read_bytes()
        deleted, cpu_delete = timed(functools.partial(pruner.delete, batch))
        took = time.perf_counter() - started
        if deleted and not on_loop:
            held = time.perf_counter() - deleting
            held_by_step.append(held)
            if held > LONG_HOLD_S:  # kept whole, to be told apart from the machine's pauses
                long_holds.append((deleting, held, cpu_delete, _thread_read_bytes() - read_before))
        cpu_took += cpu_delete
        if deleted:
            after = lowest()
            table = next(
                (t for t, b, a in zip(tables, before[0], after, strict=True) if b != a), "?"
            )
            before[0] = after
            steps.setdefault(table, []).append(took)
            first_steps.append(took)
            cpu_steps.append(cpu_took)
            rows[table] = rows.get(table, 0) + deleted
        return int(deleted)

    stopped = [False]
    #: What the loop is doing now: "thread" (a step found in its worker thread and deleted
    #: on the loop, or the pause after it), "loop" (all of it on the loop, as before), "idle".
    mode = ["idle"]
    #: The daemon's way: how long each step's half on the loop (its delete) held it.
    held_by_step: list[float] = []
    #: Steps run all on the loop so far: a wait one of them began in is charged to them.
    on_loop_steps = [0]
    #: The daemon's way's holds past ``LONG_HOLD_S``: (began, wall, CPU, bytes read), s.
    long_holds: list[tuple[float, float, float, int]] = []
    #: The loop's waits past 10 ms by mode: (began, length, "timer" or "commit"), s.
    long_waits: dict[str, list[tuple[float, float, str]]] = {}

    async def loop_while(work: Callable[[], Any]) -> tuple[dict[str, Any], float]:
        """The loop's lateness and its commits' times (s) by ``mode`` while ``work`` runs."""
        lags: dict[str, list[float]] = {}
        commits: dict[str, list[float]] = {}
        done = asyncio.Event()

        def doing(since: tuple[str, int]) -> str:
            # A wait that an on-the-loop step began in is that step's, whatever the mode
            # was when the wait began (the mode turns to "loop" just before such a step).
            return "loop" if on_loop_steps[0] != since[1] else since[0]

        async def ticker() -> None:
            while not done.is_set():
                started, since = time.perf_counter(), (mode[0], on_loop_steps[0])
                await asyncio.sleep(0.001)
                lag = time.perf_counter() - started - 0.001
                kind = doing(since)
                lags.setdefault(kind, []).append(lag)
                if lag > 0.010:  # kept whole, to be set beside the machine's own pauses
                    long_waits.setdefault(kind, []).append((started + 0.001, lag, "timer"))

        async def writer() -> None:
            while not done.is_set():
                await asyncio.sleep(LOOP_WRITE_S)
                started, since = time.perf_counter(), (mode[0], on_loop_steps[0])
                journal.record_frames([FrameRecord(time.time(), "<", b"$H*00", None)])
                took = time.perf_counter() - started
                commits.setdefault(doing(since), []).append(took)
                if took > 0.010:
                    long_waits.setdefault(doing(since), []).append((started, took, "commit"))

        async def checkpoints() -> None:  # the daemon's WAL job: in a thread
            while not done.is_set():
                await asyncio.sleep(WAL_CHECKPOINT_S)
                await asyncio.to_thread(journal.checkpoint_log)

        tasks = [asyncio.create_task(job()) for job in (ticker, writer, checkpoints)]
        started = time.perf_counter()
        try:
            await work()
        finally:
            done.set()
            tasks[-1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return {kind: (lags[kind], commits.get(kind, [])) for kind in lags}, (
            time.perf_counter() - started
        )

    async def prune_all() -> None:
        # Runs of PRUNE_AB_STEPS steps each way in turn: the daemon's (a worker thread)
        # and, for comparison, on the loop itself as it ran before.
        index = 0
        deadline = time.perf_counter() + minutes * 60 if minutes else None
        while True:
            mode[0] = "loop" if (index // PRUNE_AB_STEPS) % 2 else "thread"
            if not await step(mode[0] == "loop"):
                break
            if deadline is not None and time.perf_counter() > deadline:
                stopped[0] = True
                break
            index += 1
            await asyncio.sleep(RETENTION_PAUSE_S)
        mode[0] = "idle"

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # as the daemon sets it
    probe = MachinePauses()
    try:
        pruned, pruned_wall = asyncio.run(loop_while(prune_all))
        idle, _ = asyncio.run(loop_while(lambda: asyncio.sleep(min(pruned_wall / 2, 60.0))))
    finally:
        sys.setswitchinterval(interval)
        pauses = probe.stop()
    pruner.close()
    db.close()
    journal.close()
    every = [took for taken in steps.values() for took in taken]

    def held(lags: list[float], commits: list[float]) -> dict[str, float]:
        return {
            "lag_longest_ms": max(lags, default=0.0) * 1000,
            "lag_p99_ms": _percentile(lags, 99) * 1000 if lags else 0.0,
            "lag_over_10ms": sum(1 for lag in lags if lag > 0.010),
            "commit_longest_ms": max(commits, default=0.0) * 1000,
            "commit_p99_ms": _percentile(commits, 99) * 1000 if commits else 0.0,
            "commits": len(commits),
        }

    return {
        "frames_days": retention.frames_days,
        "decisions_days": retention.decisions_days,
        "open_s": open_s,
        "steps": len(every),
        "rows": rows,
        "seconds": sum(every),
        "daemon_wall_s": pruned_wall,
        "longest_ms": max(every, default=0.0) * 1000,
        "p99_ms": _percentile(every, 99) * 1000 if every else 0.0,
        "over_10ms": sum(1 for took in every if took > 0.010),
        "cpu_longest_ms": max(cpu_steps, default=0.0) * 1000,
        "cpu_p99_ms": _percentile(cpu_steps, 99) * 1000 if cpu_steps else 0.0,
        "cpu_over_10ms": sum(1 for took in cpu_steps if took > 0.010),
        "first_10_ms": [round(took * 1000, 2) for took in first_steps[:10]],
        "delete_longest_ms": max(held_by_step, default=0.0) * 1000,
        "delete_p99_ms": _percentile(held_by_step, 99) * 1000 if held_by_step else 0.0,
        "delete_over_10ms": sum(1 for took in held_by_step if took > 0.010),
        "long_holds": [
            {
                "wall_ms": round(wall * 1000, 2),
                "cpu_ms": round(cpu * 1000, 2),
                "read_kib": read // 1024,
                "machine_paused_ms": round(_paused_during(pauses, began, wall) * 1000, 2),
            }
            for began, wall, cpu, read in long_holds
        ],
        "machine_pauses_over_10ms": sum(1 for _, late in pauses if late > 0.010),
        # Each of the loop's waits past 10 ms with the machine's own pause during it.
        "loop_waits_over_10ms": {
            kind: [
                {
                    "what": what,
                    "ms": round(length * 1000, 2),
                    "machine_paused_ms": round(_paused_during(pauses, began, length) * 1000, 2),
                }
                for began, length, what in waits
            ]
            for kind, waits in long_waits.items()
        },
        "machine_pause_longest_ms": max((late for _, late in pauses), default=0.0) * 1000,
        "by_table": {
            table: {"steps": len(taken), "longest_ms": max(taken) * 1000}
            for table, taken in steps.items()
            if taken
        },
        "loop_pruning": held(*pruned.get("thread", ([], []))),
        "loop_pruning_on_loop": held(*pruned.get("loop", ([], []))),
        "loop_idle": held(*idle.get("idle", ([], []))),
        "size_before": size_before,
        "size_after": path.stat().st_size,
        "stopped_at_minutes": minutes if stopped[0] else None,
    }


# -- the report ----------------------------------------------------------------------------------


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _load(figure: dict[str, Any]) -> str:
    """The 1-minute load average when the figure was taken, if kept."""
    load = figure.get("load")
    return f" [load {load[0]:.1f}]" if load else ""


def report(games: int, found: dict[str, Any]) -> list[str]:
    """Each figure beside its target, one line each."""
    lines: list[str] = []
    size = found.get("size")
    if size and games:
        lines.append(
            f"journal: {size['per_game']:,.0f} B/game ({size['bytes'] / 2**20:,.1f} MiB for"
            f" {games:,} games; {size['per_day'] / 2**20:,.1f} MiB/day,"
            f" {size['per_year'] / 2**30:,.2f} GiB/year) - target <= 2 KiB/game at 4 frames/s:"
            f" {_met(size['per_game'] <= 2048)}"
        )
        split = size.get("split_bytes", {})
        lines.append(
            "  of which a game: "
            + ", ".join(f"{kind} {bytes_ / games:,.0f} B" for kind, bytes_ in split.items())
        )
    ready, empty = found.get("ready"), found.get("ready_empty")
    if ready and empty:
        for kind in ("warm", "cold"):
            ratio = ready[f"{kind}_s"] / empty[f"{kind}_s"]
            lines.append(
                f"READY {kind}: {ready[f'{kind}_s'] * 1000:,.0f} ms against"
                f" {empty[f'{kind}_s'] * 1000:,.0f} ms on an empty journal, x{ratio:.2f}"
                f" - target <= x1.2: {_met(ratio <= 1.2)}{_load(ready)}"
            )
        growth = ready["vmhwm_kib"] / empty["vmhwm_kib"]
        lines.append(
            f"daemon peak memory (VmHWM) after start: {ready['vmhwm_kib'] / 1024:,.1f} MiB against"
            f" {empty['vmhwm_kib'] / 1024:,.1f} MiB empty, x{growth:.2f} - target flat:"
            f" {_met(growth <= 1.1)}"
        )
    recall = found.get("recall") or {}
    for name, label in (
        ("last_10", "the last 10 games"),
        ("middle_10", "10 games ending mid-journal"),
        ("middle_1", "1 game mid-journal"),
    ):
        if name in recall:
            figure = recall[name]
            lines.append(
                f"recall {label}: {figure['cold_s'] * 1000:,.0f} ms cold,"
                f" {figure['warm_s'] * 1000:,.0f} ms warm (median of 5);"
                f" reply {figure['reply_bytes'] / 1024:,.0f} KiB"
            )
    if "spinning_without" in recall:
        quiet = recall["spinning_without"]
        text = (
            f"spinning latency p99: {quiet['p99_ms']:.2f} ms (p50 {quiet['p50_ms']:.2f},"
            f" max {quiet['max_ms']:.2f}, n {quiet['n']})"
        )
        if "spinning_with" in recall:
            busy = recall["spinning_with"]
            extra = busy["p99_ms"] - quiet["p99_ms"]
            count = recall.get("recalls_answered", {})
            text += (
                f"; with 10 recalls sent at once {busy['p99_ms']:.2f} ms (p50"
                f" {busy['p50_ms']:.2f}, max {busy['max_ms']:.2f}; {count.get('answered', 0)} of"
                f" {count.get('sent', 0)} answered, the rest refused over the recall rate):"
                f" {extra:+.2f} ms - target <= +1 ms: {_met(extra <= 1)}{_load(recall)}"
            )
        lines.append(text)
        lines.append(
            f"daemon peak memory (VmHWM) after the recalls: {recall['vmhwm_kib'] / 1024:,.1f} MiB"
        )
    if "loop_lag" in recall:
        lag = recall["loop_lag"]
        lines.append(
            "an event loop's 1 ms timer late by, while 5 recalls of 10 games are read: "
            + "; ".join(
                f"{label} p50 {lag[name]['p50_ms']:.2f} ms, p99 {lag[name]['p99_ms']:.2f},"
                f" max {lag[name]['max_ms']:.1f}, {lag[name]['over_5ms']} of"
                f" {lag[name]['ticks']} over 5 ms"
                for name, label in (
                    ("process", "in the recall process (the daemon's way)"),
                    ("thread", "in worker threads (as before)"),
                    ("idle", "nothing read"),
                )
            )
            + _load(lag)
        )
    for name, figure in (found.get("tools") or {}).items():
        year = figure["wall_s"] * GAMES_PER_YEAR / games if games else 0.0
        # ru_maxrss starts from the measuring process's own (the child is forked from it):
        # the sampled resident memory of the tool's processes, when there, is the figure.
        peak_kib = figure.get("tree_rss_kib") or figure["maxrss_kib"]
        text = (
            f"wheeld {name}: {figure['wall_s']:,.1f} s ({figure['cpu_s']:,.1f} s CPU), peak"
            f" {peak_kib / 1024:,.0f} MiB all its processes (ru_maxrss"
            f" {figure['maxrss_kib'] / 1024:,.0f} MiB, the fork's included) (exit"
            f" {figure['exit']}: {figure['last_line'][:70]!r}) - target <= 200 MB:"
            f" {_met(peak_kib * 1024 <= 200e6)}{_load(figure)}"
        )
        if name in ("verify", "export") and games >= 10_000:
            cpu_year = figure["cpu_s"] * GAMES_PER_YEAR / games
            # What the machine's cores would take with nothing else on them: a bound a
            # shared machine cannot show, given beside the wall time it did.
            alone = cpu_year / (os.cpu_count() or 1)
            text += (
                f"; a year at this rate {year / 60:,.1f} min ({cpu_year / 60:,.1f} min of CPU,"
                f" {alone / 60:,.1f} min on {os.cpu_count()} idle cores at best)"
                f" - target <= 5 min: {_met(year <= 300)}"
            )
        lines.append(text)
    prune = found.get("prune")
    if prune:
        sample = prune.get("stopped_at_minutes")
        lines.append(
            (f"(stopped after {sample:g} min, a sample) " if sample else "")
            + f"first retention run (frames_days {prune['frames_days']:.2f},"
            f" decisions_days {prune['decisions_days']:.2f}): {prune['steps']:,} steps,"
            f" {sum(prune['rows'].values()):,} rows, {prune['seconds']:,.1f} s of work"
            f" ({prune['daemon_wall_s']:,.0f} s in all with its pauses); by wall time"
            f" the longest step {prune['longest_ms']:.1f} ms, p99 {prune['p99_ms']:.1f} ms,"
            f" {prune['over_10ms']} over 10 ms (CPU: longest"
            f" {prune.get('cpu_longest_ms', 0):.1f} ms,"
            f" p99 {prune.get('cpu_p99_ms', 0):.1f} ms, {prune.get('cpu_over_10ms', 0)} over 10 ms;"
            f" the first 10 steps {prune.get('first_10_ms')} ms)"
        )
        held, idle = prune.get("loop_pruning"), prune.get("loop_idle")
        if held and idle:
            lines[-1] += "; the loop meanwhile late by (its commits taking)"
            for label, figure in (
                ("steps found in a thread", held),
                ("steps on the loop", prune.get("loop_pruning_on_loop") or idle),
                ("no prune", idle),
            ):
                lines[-1] += (
                    f" - {label}: at most {figure['lag_longest_ms']:.1f} ms, p99"
                    f" {figure['lag_p99_ms']:.1f}, {figure['lag_over_10ms']} over 10 ms"
                    f" ({figure['commit_longest_ms']:.1f} ms at most, p99"
                    f" {figure['commit_p99_ms']:.1f}, n {figure['commits']})"
                )
            if "delete_longest_ms" in prune:
                # What a step holds the loop for is its half on the loop (the delete and
                # the pages given back), timed there; the 1 ms timer's lateness beside it
                # also has the machine's own pauses in it (the "no prune" figure).
                long_holds = prune.get("long_holds", [])
                own = [h["wall_ms"] - h["machine_paused_ms"] for h in long_holds]
                lines[-1] += (
                    f"; a step's half on the loop held it at most"
                    f" {prune['delete_longest_ms']:.1f} ms, p99 {prune['delete_p99_ms']:.1f},"
                    f" {prune['delete_over_10ms']} over 10 ms"
                )
                if "machine_pauses_over_10ms" in prune:
                    # A probe process sleeping 1 ms at a time tells the machine's own
                    # pauses (a VM descheduled): a hold they overlap is less the step's.
                    lines[-1] += (
                        f" (the machine itself paused {prune['machine_pauses_over_10ms']} times"
                        f" over 10 ms, at most {prune['machine_pause_longest_ms']:.1f} ms; the"
                        f" holds past {LONG_HOLD_S * 1000:.0f} ms as wall/CPU/KiB read/machine"
                        " paused, ms: "
                        + ", ".join(
                            f"{h['wall_ms']:.1f}/{h['cpu_ms']:.1f}/{h['read_kib']}/"
                            f"{h['machine_paused_ms']:.1f}"
                            for h in long_holds
                        )
                        + f"; the step's own time, the machine's pauses taken out, at most"
                        f" {max(own, default=0.0):.1f} ms)"
                    )
                if "loop_waits_over_10ms" in prune:
                    waits = prune["loop_waits_over_10ms"].get("thread", [])
                    lines[-1] += (
                        "; the loop's waits past 10 ms meanwhile (the daemon's way), ms with the"
                        " machine's own pause during it: "
                        + (
                            ", ".join(
                                f"{w['what']} {w['ms']:.1f} ({w['machine_paused_ms']:.1f})"
                                for w in waits
                            )
                            or "none"
                        )
                    )
                lines[-1] += (
                    f"; target: the loop never held over 10 ms by a step:"
                    f" {_met(max(own, default=prune['delete_longest_ms']) <= 10)}"
                )
            else:
                lines[-1] += (
                    f"; target: the loop never held over 10 ms by a step:"
                    f" {_met(held['lag_longest_ms'] <= 10)}"
                )
        lines[-1] += (
            f"{_load(prune)};"
            f" file {prune['size_before'] / 2**20:,.1f} ->"
            f" {prune['size_after'] / 2**20:,.1f} MiB"
        )
    return lines


def _last_result_rotor(state: Path) -> str | None:
    with contextlib.closing(sqlite3.connect(state / JOURNAL_FILE)) as db:
        row = db.execute("SELECT value FROM state WHERE key = 'engine'").fetchone()
    rotor = json.loads(row[0]).get("last_result_rotor") if row else None
    return rotor if isinstance(rotor, str) else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.history", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--games", type=int, required=True, help="games in the journal")
    parser.add_argument(
        "--frames-per-second", type=float, default=4.0, dest="fps", help="heartbeats a second"
    )
    parser.add_argument("--out", type=Path, help="where the journal is built (and reused)")
    parser.add_argument("--keep", action="store_true", help="keep the measuring work directory")
    parser.add_argument(
        "--build-only", action="store_true", help="build (or find) it, measure nothing"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="build --games both the daemon's way and the fast way (short days) and compare",
    )
    parser.add_argument("--rounds", type=int, default=150, help="launches timed each way")
    parser.add_argument(
        "--daemon-from",
        action="append",
        default=[],
        metavar="DIR",
        help="after the daemon phase, time the recalls' effect again twice with the daemon"
        " run from DIR (another checkout) and from this one, in turn",
    )
    parser.add_argument("--repeats", type=int, default=5, help="starts timed each way")
    parser.add_argument(
        "--build-minutes",
        type=float,
        help="build for at most this long (the game under way is then the last): fewer games",
    )
    parser.add_argument(
        "--prune-minutes",
        type=float,
        help="stop the first retention run after this long (a sample of its steps)",
    )
    parser.add_argument(
        "--phases",
        default="tools,daemon,prune",
        help="what to measure after the size: tools (verify, export, stats), daemon (READY,"
        " recall, spinning), prune; comma-separated (default: all)",
    )
    args = parser.parse_args(argv)
    games, fps = args.games, args.fps
    phases = set(args.phases.split(","))
    if args.check:
        check_wheel()
        print("QuickWheel writes what ScriptedWheel writes: ok")
        work = Path(tempfile.mkdtemp(prefix="wheeld-history-check-"))
        differences = compare(games, fps, work)
        for line in differences:
            print(f"  DIFFERS: {line}")
        print("the journals are the same, row for row" if not differences else "they differ")
        if not args.keep:
            shutil.rmtree(work)
        return 1 if differences else 0
    out = args.out or Path(f"/var/tmp/wheeld-history/games-{games}-fps-{fps:g}")
    found: dict[str, Any] = {"machine": machine()}
    box = found["machine"]
    print(
        f"machine: nproc {box['nproc']}, {box['cpu']}, {box['memory_gib']} GiB, Linux"
        f" {box['kernel']}, Python {box['python']}, SQLite {box['sqlite']}; load"
        f" {' '.join(f'{x:.2f}' for x in box['load'])}"
    )
    built_info = found["build"] = built(out, games, fps, args.build_minutes)
    if built_info.get("games_built", games) != games:
        games = built_info["games_built"]
        print(f"the build's time ran out: {games:,} games built, measured as they are")
    cpu = built_info["cpu_s"]
    print(
        f"build: {built_info['seconds']:,.0f} s, {built_info['games_per_s'] or 0:,.0f} games/s"
        f" (CPU: pipeline {cpu['pipeline']:,.0f} s, journal {cpu['journal']:,.0f} s, runs"
        f" {cpu['runs']:,.0f} s; load {built_info['load_before'][0]:.1f} ->"
        f" {built_info['load_after'][0]:.1f}); {built_info['results']:,} results,"
        f" {built_info['no_spins']:,} no-spins",
        flush=True,
    )
    if games:
        # No faster than its busiest process on a core of its own, nor than all of its CPU
        # spread over every core: the larger of the two bounds the build.
        cores = os.cpu_count() or 1
        busiest = max(cpu, key=cpu.__getitem__)
        alone_min = cpu[busiest] / games * 1e6 / 60
        spread_min = sum(cpu.values()) / games * 1e6 / 60 / cores
        print(
            f"  CPU a game: {', '.join(f'{k} {v / games * 1000:.2f} ms' for k, v in cpu.items())};"
            f" 1,000,000 games in {max(alone_min, spread_min):,.0f} min at best ({busiest}"
            f" {alone_min:,.0f} min alone on a core; all three {spread_min:,.0f} min over"
            f" {cores} cores) - target < 60 min",
            flush=True,
        )
    if args.build_only:
        return 0
    first, last = built_info["first_game_at"], built_info["last_game_at"]
    days = max(last - built_info["start"], 1.0) / 86_400
    found["size"] = journal_size(out / "state", games, days)
    print(*report(games, {"size": found["size"]}), sep="\n", flush=True)
    work = Path(tempfile.mkdtemp(prefix="wheeld-history-"))
    state = work / "state"
    state.mkdir()
    for path in (out / "state").iterdir():
        if path.name != "lock" and path.is_file():
            shutil.copy2(path, state / path.name)
    try:
        if games and "tools" in phases:
            found["tools"] = {}
            pub = out / "signing.pub"
            exported = work / "export.jsonl"
            wheeld = ["-m", "wheeld"]
            for name, command in (
                ("verify", [*wheeld, "verify", "--key", str(pub), "--state-dir", str(state)]),
                ("export", [*wheeld, "export", "--state-dir", str(state), "--out", str(exported)]),
                ("stats", [*wheeld, "stats", "--state-dir", str(state), "--json"]),
            ):
                found["tools"][name] = measure_tool(command, state, work / f"{name}.out")
                found["tools"][name]["load"] = os.getloadavg()
                print(*report(games, {"tools": {name: found["tools"][name]}}), sep="\n", flush=True)
            found["tools"]["export"]["file_bytes"] = (
                exported.stat().st_size if exported.exists() else 0
            )
            exported.unlink(missing_ok=True)
        if "daemon" in phases:
            session = Session(work, out / "signing.key")
            try:
                empty = work / "empty"
                session.start(empty)  # the first start makes the journal
                time.sleep(1.0)
                session.stop()
                ready = measure_ready(session, {"empty": empty, "built": state}, args.repeats)
                found["ready_empty"], found["ready"] = ready["empty"], ready["built"]
                found["ready"]["load"] = os.getloadavg()
                print(
                    *(
                        line
                        for line in report(games, found)
                        if line.startswith(("READY", "daemon"))
                    ),
                    sep="\n",
                    flush=True,
                )
                found["recall"] = measure_recall(
                    session, state, games, args.rounds, _last_result_rotor(state)
                )
                found["recall"]["load"] = os.getloadavg()
                if games:
                    found["recall"]["loop_lag"] = measure_recall_lag(state, games // 2, 30)
                    found["recall"]["loop_lag"]["load"] = os.getloadavg()
                sources = [*args.daemon_from, REPO] * 2 if args.daemon_from else []
                for turn, source in enumerate(sources):
                    # The recalls' effect again, the daemon from each tree in turn (A/B).
                    session.source = Path(source)
                    again = measure_recall(
                        session, state, games, args.rounds, _last_result_rotor(state)
                    )
                    again.update(load=os.getloadavg(), source=str(source), turn=turn)
                    found.setdefault("recall_ab", []).append(again)
                    print(f"daemon from {source}:", *report(games, {"recall": again}), flush=True)
                session.source = REPO
            finally:
                session.close()
        if games and "prune" in phases:
            found["prune"] = measure_prune(state, first, last, args.prune_minutes)
            found["prune"]["load"] = os.getloadavg()
        found["machine"]["load_after"] = os.getloadavg()
        print("\n== history benchmark, " + time.strftime("%Y-%m-%d %H:%M %Z"))
        print(f"{games:,} games at {fps:g} frames/s, built in {out}")
        print(*report(games, found), sep="\n")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        (out / f"results-{stamp}.json").write_text(json.dumps(found, indent=1, default=str) + "\n")
        print(f"(figures kept in {out}/results-{stamp}.json)")
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
