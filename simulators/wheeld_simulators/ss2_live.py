"""A Cammegh SS2 in software that answers commands, for live-control tests and demos.

It plays games on its own (or waits for ``*u 1`` in manual-start mode, bit 2),
reverses the rotor before every game when operating mode bit 1 is set (else
only before its first), broadcasts status every 500 ms when bit 128 is set, answers
``*X`` polls, ``*o``, ``*P``, ``*I 4``, ``*u 1`` and ``*R``, and can misbehave
on demand: a miss-spin (flag 2 in state 3) that waits for ``*R``, ``BUSY``
replies, or a wheel that stops answering altogether.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass

from wheeld.core.events import Direction
from wheeld.core.layout import layout_for
from wheeld_cammegh.decoder import Status, encode_status
from wheeld_simulators.targets import PtySink


@dataclass
class SS2Faults:
    busy_replies: int = 0  # answer this many commands with BUSY first
    mute: bool = False  # answer nothing at all
    miss_spin_games: tuple[int, ...] = ()  # 1-based game numbers that miss-spin


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
            else:
                self.powered.clear()
            self._send("*P OK")
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
        await self._phase(self.bets_s, state=2, flags=0)
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
        number = self.rng.choice(layout_for(37).order)
        if not self.mode & 16:
            self._send(number.rjust(2))
        await self._phase(2.0, state=5, win=number)
        status.spin = status.spin % 256 + 1
        status.state = 2

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
