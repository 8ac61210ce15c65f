"""A Cammegh SS2 in software that answers commands, for live-control tests and demos.

It plays games on its own (or waits for ``*u 1`` in manual-start mode, bit 2),
reverses the rotor before every game when operating mode bit 1 is set (else
only before its first), broadcasts status every 500 ms when bit 128 is set, answers
``*X`` polls, ``*o``, ``*P``, ``*I 4``, ``*u 1`` and ``*R``, and can misbehave
on demand: a miss-spin (flag 2 in state 3) that waits for ``*R``, ``BUSY``
replies, or a wheel that stops answering altogether.

It keeps a winning-number log as the guide describes it (``*s t`` pages of 256
games, ``*s r <page>`` with its checksum, in state 6 only; ``*w`` its
chi-squared, ``*W`` its counts, in states 5 and 6), and with ``close_after`` it
closes (state 6) after that many games, so a controller can read it; ``*P 1``
opens it again. Firmware 2.52's 39- and 40-pocket wheels play their extra
zeros (``000``, ``0000``), which the log cannot hold (it stores 0-37 only).
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass

from wheeld.core.events import Direction
from wheeld.core.layout import DOUBLE_ZERO_ORDER, layout_for
from wheeld_cammegh.decoder import Status, encode_status
from wheeld_cammegh.wheel_log import MISFIRE_BASE, PAGE_SIZE, encode_page
from wheeld_simulators.targets import PtySink


@dataclass
class SS2Faults:
    busy_replies: int = 0  # answer this many commands with BUSY first
    mute: bool = False  # answer nothing at all
    miss_spin_games: tuple[int, ...] = ()  # 1-based game numbers that miss-spin
    misslogged_games: tuple[int, ...] = ()  # logged with another number than announced


#: The states in which the wheel answers its statistics commands (else ``BUSY``).
STATISTICS_STATES = (5, 6)
CLOSED = 6


def log_value(number: str) -> int | None:
    """A pocket's value in the winning-number log (0-36, 37 for 00); None: not loggable."""
    if number == "00":
        return 37
    return int(number) if number.isdigit() and len(number) <= 2 else None


def chi_squared(counts: list[int]) -> float:
    """Pearson's chi-squared of the counts against an even wheel."""
    total = sum(counts)
    if not total:
        return 0.0
    expected = total / len(counts)
    return sum((c - expected) ** 2 / expected for c in counts)


class LiveSS2:
    """One simulated SS2 on a pty."""

    def __init__(
        self,
        sink: PtySink,
        *,
        speed: float = 1.0,
        mode: int = 0,
        seed: int | None = None,
        faults: SS2Faults | None = None,
        bets_s: float = 4.0,
        pockets: int = 37,
        close_after: int | None = None,
        logged: int = 0,
    ) -> None:
        self.sink = sink
        self.speed = speed
        self.mode = mode
        self.rng = random.Random(seed)
        self.faults = faults or SS2Faults()
        self.bets_s = bets_s
        self.status = Status(state=2, spin=1, win=None, flags=0, speed=170, direction="cw")
        # Mode 0: a wheel that waits for its host to configure it and power it on.
        self.powered = asyncio.Event()
        if mode:
            self.powered.set()
        self.sensors = False
        #: Firmware 2.52's ``*T g`` game options (16: the host picks the direction).
        self.game_options = 0
        self._start_direction: Direction = "cw"
        self.games = 0
        self._start = asyncio.Event()
        self._respin = asyncio.Event()
        self._input = b""
        self.commands: list[str] = []
        self.pockets = pockets
        self.close_after = close_after
        #: The winning-number log: one value a game (38 and more: a misfire).
        numbers = DOUBLE_ZERO_ORDER if pockets != 37 else layout_for(37).order
        self.log: list[int] = [
            v for n in self.rng.choices(numbers, k=logged) if (v := log_value(n)) is not None
        ]
        #: The numbers announced, in order (what a controller should have published).
        self.announced: list[str] = []
        sink.drain_input = False

    def _sleep(self, seconds: float) -> asyncio.Future[None]:
        return asyncio.ensure_future(asyncio.sleep(seconds / self.speed))

    def _reported(self) -> bytes:
        # Time runs `speed` times faster here, so the rotor must too: the daemon
        # counts rotor turns from the reported speed over its own clock.
        status = self.status
        scaled = Status(
            status.state,
            status.spin,
            status.win,
            status.flags,
            min(999, round(status.speed * self.speed)),
            status.direction,
        )
        return encode_status(scaled)

    def _send(self, line: str | bytes) -> None:
        data = line.encode() if isinstance(line, str) else line
        self.sink.write(data if data.endswith(b"\r\n") else data + b"\r\n")

    # -- commands ------------------------------------------------------------

    def _readable(self) -> None:
        try:
            self._input += os.read(self.sink.master, 1024)
        except (BlockingIOError, OSError):
            return
        *lines, self._input = self._input.replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            if line.strip():
                self._command(line.strip().decode("ascii", "replace"))

    def _command(self, command: str) -> None:
        self.commands.append(command)
        if self.faults.mute:
            return
        letter = command[1:2]
        if self.faults.busy_replies > 0 and command != "*X":
            self.faults.busy_replies -= 1
            self._send(f"*{letter} BUSY")
            return
        playing = self.status.state in (3, 4, 5)
        if command == "*X":
            self._send(self._reported())
        elif command.startswith("*o"):
            if playing:
                self._send("*o BUSY")
            else:
                self.mode = int(command[2:].strip() or self.mode)
                self._send(f"*o {self.mode}")
        elif command.startswith("*P"):
            if command.strip().endswith("1"):
                self.powered.set()
                if self.status.state == CLOSED:
                    self.status.state = 2
            else:
                self.powered.clear()
                if not playing:
                    self.status.state = CLOSED
            self._send("*P OK")
        elif command.startswith(("*w", "*W", "*s")):
            self._statistics(command)
        elif command.startswith("*T Z"):
            self._send(f"*T z {self.pockets}")
        elif command.startswith("*I"):
            self.sensors = command.strip().endswith("4")
            self._send("*I OK")
        elif command.startswith("*u"):
            ok = self.status.state == 2 and not self._start.is_set()
            self._send("*u OK" if ok else "*u NO")
            if ok:
                self._start_direction = "ccw" if command[2:].strip() == "3" else "cw"
                self._start.set()
        elif command.startswith("*T g"):
            self.game_options = int(command[4:].strip() or 0)
            self._send("*T OK")
        elif command.startswith("*R"):
            self._send("*R OK")
            self._respin.set()
        else:
            self._send(f"*{letter} NO")

    def _statistics(self, command: str) -> None:
        """``*w``, ``*W``, ``*s t`` and ``*s r <page>``: the wheel's own records."""
        letter = command[1:2]
        state = self.status.state
        if state not in STATISTICS_STATES or (command.startswith("*s r") and state != CLOSED):
            self._send(f"*{letter} BUSY")
            return
        counts = [0] * 38
        for entry in self.log:
            if entry < MISFIRE_BASE:
                counts[entry] += 1
        counts = counts[: 38 if self.pockets != 37 else 37]
        if command == "*w":
            figure = chi_squared(counts)
            # The guide prints no example: a percentage beside it, as a share of a bound.
            self._send(f"*w {figure:.2f} {min(99, round(figure / len(counts) * 50))}%")
        elif command == "*W":
            self._send("*W " + ";".join(str(c) for c in counts))
        elif command == "*s t":
            self._send(f"*s t {max(1, -(-len(self.log) // PAGE_SIZE))}")
        elif command.startswith("*s r") and command[4:].strip().isdigit():
            page = int(command[4:].strip())
            values: list[int | None] = list(self.log[page * PAGE_SIZE : (page + 1) * PAGE_SIZE])
            self._send(encode_page(page, values))
        else:
            self._send(f"*{letter} NO")

    # -- the wheel ------------------------------------------------------------------

    async def _broadcast(self) -> None:
        while True:
            await self._sleep(0.5)
            if self.mode & 128 and not self.faults.mute:
                self._send(self._reported())

    async def _phase(self, seconds: float, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.status, key, value)
        await self._sleep(seconds)

    async def _game(self) -> None:
        status = self.status
        self._start.clear()
        await self.powered.wait()
        await self._phase(self.bets_s, state=2, flags=0, speed=status.speed or 170)
        if self.mode & 2:
            await self._start.wait()
        if self.game_options & 16:
            # 2.52 direction control: the host's *u 1 / *u 3 (bit 1), else anticlockwise.
            wanted: Direction = self._start_direction if self.mode & 1 else "ccw"
            turn = wanted != status.direction
        else:
            turn = bool(self.mode & 1) or self.games == 0
        if turn:
            for rpm in (100, 30, 0):
                await self._phase(0.5, speed=rpm)
            status.direction = "ccw" if status.direction == "cw" else "cw"
            for rpm in (60, 140, 170):
                await self._phase(0.5, speed=rpm)
        self.games += 1
        if self.games in self.faults.miss_spin_games:
            self.log.append(MISFIRE_BASE + 0)  # the guide's misfire entry (the pocket unknown)
            self._respin.clear()
            await self._phase(0, state=3, flags=2)
            try:
                await asyncio.wait_for(self._respin.wait(), 75 / self.speed)
            finally:
                status.flags = 0
            await self._phase(0.5, state=2)
            return
        await self._phase(1.0, state=3)
        passes = self.rng.randint(9, 14)
        for _ in range(passes if self.sensors else 0):
            for sensor in (1, 2, 3):
                self._send(f"*bs {sensor}")
                await self._sleep(0.1)
        await self._phase(3.0, state=4)
        if self.game_options & 32:
            await self._phase(1.0, state=7)  # 2.52's state 7 between no more bets and the number
        number = self.rng.choice(layout_for(self.pockets).order)
        self.announced.append(number)
        logged = log_value(number)
        if logged is not None:
            if self.games in self.faults.misslogged_games:
                logged = (logged + 1) % 37  # a log that disagrees with what was announced
            self.log.append(logged)
        if not self.mode & 16:
            self._send(number.rjust(2))
        await self._phase(2.0, state=5, win=number)
        status.spin = status.spin % 256 + 1
        status.state = 2
        if self.close_after is not None and self.games >= self.close_after:
            # Left still, the wheel closes: only the host's *P 1 opens it again.
            self.close_after = None
            self.powered.clear()
            await self._phase(0, state=CLOSED, speed=0)

    async def run(self, games: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.sink.master, self._readable)
        broadcaster = asyncio.create_task(self._broadcast())
        try:
            while games is None or self.games < games:
                await self._game()
            await self._phase(1.0)
        finally:
            broadcaster.cancel()
            loop.remove_reader(self.sink.master)
