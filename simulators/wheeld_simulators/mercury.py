"""A scripted Cammegh Mercury 360 at any output level: games step by step.

Like ``ScriptedSS2``: time moves only when the script says so, and the output
is ``(host time, line)`` pairs to write as a capture or feed to the driver. One
script plays the same games at every level: Basic sends ``*S``, ``*N`` and
``*W nn``; Advanced the ``*X`` status frame every 500 ms and the bare
winning-number line; Extended Advanced the status frame with the ball's
sensors (revolutions, direction, revolution time, pocket). The ball makes one
revolution a second; the wheel counts a game completed on its first state-5
frame (an assumption the driver's README states).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Literal

from wheeld.core.capture import FORMAT_LINE
from wheeld.core.events import Direction
from wheeld_cammegh.mercury import NAME, MercuryStatus, Sensors, encode_mercury_status
from wheeld_simulators.targets import Sink
from wheeld_simulators.timeline import STATUS_EVERY_MS, StatusTimeline

Level = Literal["basic", "advanced", "extended"]
LEVELS: tuple[Level, ...] = ("basic", "advanced", "extended")

REVOLUTION_MS = 1000
BIT_ROTOR_STOPPED = 0x01
BIT_LEGAL_SPEED = 0x02
BIT_CLOCKWISE = 0x10
BIT_ANTICLOCKWISE = 0x20
BIT_NO_BALL = 0x80
BIT_IN_POCKET = 0x100
FLAG_SPEED = 1
FLAG_SAME_DIRECTION = 2


def _opposite(direction: Direction) -> Direction:
    return "ccw" if direction == "cw" else "cw"


def _rotor_bits(direction: Direction) -> int:
    return BIT_LEGAL_SPEED | (BIT_CLOCKWISE if direction == "cw" else BIT_ANTICLOCKWISE)


class ScriptedMercury(StatusTimeline):
    """A Mercury 360 behind a Break Out Box port set to ``level``."""

    status: MercuryStatus

    def __init__(
        self,
        level: Level,
        *,
        start: float = 1_760_000_000.0,
        games_completed: int = 0,
        direction: Direction = "cw",
        speed: int = 220,
        bare_numbers: bool = True,
    ) -> None:
        super().__init__(start)
        self.level = level
        self.cruise = speed
        self.bare_numbers = bare_numbers
        self.status = MercuryStatus(
            state=1,
            spin=games_completed,
            win=None,
            flags=0,
            speed=speed,
            direction=direction,
            sensors=Sensors(_rotor_bits(direction) | BIT_NO_BALL, 0, None, None, None),
        )

    def basic(self, text: bytes) -> None:
        """A line only the Basic level sends."""
        if self.level == "basic":
            self.line(text)

    def send_status(self) -> None:
        if self.level == "basic":
            return
        status = self.status
        if self.level == "advanced":
            status = replace(status, sensors=None)
        self.line(encode_mercury_status(status).rstrip(b"\r\n"))

    def sense(self, **changes: object) -> None:
        """Change the Extended sensors' fields (``bits``, ``revolutions``, ``ball``...)."""
        sensors = self.status.sensors
        assert sensors is not None
        self.status.sensors = replace(sensors, **changes)  # type: ignore[arg-type]

    def reverse(self) -> None:
        """State 1: the rotor slows to 0, turns the other way and speeds up again."""
        for speed in (150, 80, 20, 0):
            self.sense(bits=_rotor_bits(self.status.direction) | BIT_NO_BALL)
            self.run(STATUS_EVERY_MS, state=1, speed=speed)
        flipped = _opposite(self.status.direction)
        self.sense(bits=_rotor_bits(flipped) | BIT_NO_BALL)
        for speed in (60, 150, self.cruise):
            self.run(STATUS_EVERY_MS, speed=speed, direction=flipped)

    def _revolution(self, count: int, state: int, ball: Direction) -> None:
        """The ball completes revolution ``count`` in ``state`` (it slows as it goes)."""
        seconds = 0.5 + 0.1 * count  # the last revolution's time
        self.sense(revolutions=count, ball=ball, revolution_time=int(seconds * 32768))
        self.run(REVOLUTION_MS, state=state)

    def game(
        self,
        number: str,
        *,
        revolutions: int = 10,
        ball_same_direction: bool = False,
        rotor_stops: bool = False,
        reverse: bool = True,
        dealer_lock_ms: int = 0,
        bonus: Iterable[bytes] = (),
        respin: bool = False,
    ) -> None:
        """One game from state 1: the number, or the wheel's own void for a ball spun
        the rotor's way (flag 2; the dealer respins in the next game, or with ``respin``
        in state 3: the ball rests, the flag clears and the ball is spun again)."""
        self.basic(b"*S")
        if reverse:
            self.reverse()
        self.sense(revolutions=0, ball=None, revolution_time=None, pocket=None)
        self.run(3000, state=1, flags=0)
        self.run(6000, state=2)  # place bets: enough rotor turns for a respin too
        rotor = self.status.direction
        ball = rotor if ball_same_direction else _opposite(rotor)
        bits = _rotor_bits(rotor)
        self.sense(bits=bits)
        bonus_lines = list(bonus)
        if ball_same_direction:
            # The wheel records the error and will not call no more bets.
            self.status.flags = FLAG_SAME_DIRECTION
            for count in (1, 2, 3):
                self._revolution(count, 3, ball)
            if not respin:
                self.status.flags = 0
                return
            self.sense(ball=None, revolution_time=None)
            self.run(9000)  # the ball rests in a pocket while the rotor turns (3+ turns)
            self.status.flags = 0
            ball = _opposite(rotor)
            self.sense(ball=ball)
            self.run(STATUS_EVERY_MS)
            last = 3 + revolutions
            for count in range(4, last + 1):
                if count == last:
                    self.basic(b"*N")
                self._revolution(count, 3 if count < last else 4, ball)
            self._drop(number, bonus_lines, dealer_lock_ms)
            return
        # State 3: the ball seen after its first revolution; state 4 with about
        # three to go (two when there are only two).
        to_no_more_bets = max(1, revolutions - 3)
        for count in range(1, revolutions + 1):
            if count == 1:
                self._revolution(count, 3, ball)
                for text in bonus_lines[:1]:
                    self.line(text)
                if rotor_stops:
                    self.sense(bits=bits | BIT_ROTOR_STOPPED)
                    self.status.speed = 0
                    self.status.flags = FLAG_SPEED
                continue
            if count == to_no_more_bets + 1:
                self.basic(b"*N")
            self._revolution(count, 3 if count <= to_no_more_bets else 4, ball)
        if revolutions == 1:
            self.basic(b"*N")
        self._drop(number, bonus_lines, dealer_lock_ms)
        if rotor_stops:
            self.status.speed = self.cruise  # the dealer spins the rotor again
            self.status.flags = 0

    def _drop(self, number: str, bonus_lines: list[bytes], dealer_lock_ms: int) -> None:
        """The ball drops into ``number``: the dealer lock if any, the bare line, state 5."""
        self.run(STATUS_EVERY_MS, state=4)
        self.sense(pocket=number, bits=self.status.sensors.bits | BIT_IN_POCKET)  # type: ignore[union-attr]
        if dealer_lock_ms:
            self.run(dealer_lock_ms, state=7)
        if self.bare_numbers and self.level != "basic":
            self.line(number.rjust(2).encode())
        for text in bonus_lines[1:]:
            self.line(text)
        self.basic(b"*W " + number.rjust(2).encode())
        self.status.spin = (self.status.spin + 1) % 256
        self.run(3000, state=5, win=number)

    def games(self, plan: Iterable[tuple[str, dict[str, object]]]) -> None:
        """Play ``(number, options)`` games in order."""
        for number, options in plan:
            self.game(number, **options)  # type: ignore[arg-type]
        self.run(2000, state=1)

    def capture(self, comments: Iterable[str] = ()) -> str:
        head = [FORMAT_LINE, f"# driver: {NAME}", *(f"# {c}" for c in comments)]
        body = [self.capture_line(index) for index in range(len(self.lines))]
        return "\n".join(head) + "\n" + "".join(body)

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        return iter(self.lines)


#: Faults the Mercury simulator plays, each as ``game`` options, and the levels at
#: which wheeld publishes no result for it.
FAULTS: dict[str, tuple[dict[str, object], tuple[Level, ...]]] = {
    "same_direction": ({"ball_same_direction": True}, LEVELS),
    "rotor_stops": ({"rotor_stops": True}, ("advanced", "extended")),
    "short_spin": ({"revolutions": 2}, ("extended",)),
    "dealer_lock": ({"dealer_lock_ms": 4000}, ()),
}


async def play_mercury(
    session: MercurySession,
    sink: Sink,
    *,
    speed: float = 1.0,
    games: int | None = None,
    on_game: Callable[[int, str, str | None], None] | None = None,
) -> None:
    """Play ``session``'s games into ``sink`` as the wheel sends them, ``speed`` times
    faster than real time (``games`` None: for ever); ``on_game`` hears each one."""
    import asyncio

    wheel = session.wheel
    loop = asyncio.get_running_loop()
    began, sent, number = loop.time(), 0, 0
    while games is None or number < games:
        number += 1
        result, fault = session.next_game()
        if on_game is not None:
            on_game(number, result, fault)
        for at, line in wheel.lines[sent:]:
            delay = began + (at - wheel.start) / speed - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # paced as the wheel sends
            sink.write(line + b"\r\n")
        sent = len(wheel.lines)


class MercurySession:
    """Games one after another, as a table plays them: random numbers and faults, and
    a rotor turned the other way from the last game wheeld will publish at this level."""

    def __init__(self, wheel: ScriptedMercury, seed: int | None, fault_rate: float) -> None:
        self.wheel = wheel
        self._random = random.Random(seed)
        self._fault_rate = fault_rate
        self._last_result: Direction | None = None

    def next_game(self, fault: str | None = None) -> tuple[str, str | None]:
        """Play one game; its number and fault (None: a clean game)."""
        wheel = self.wheel
        if fault is None and self._random.random() < self._fault_rate:
            fault = self._random.choice(sorted(FAULTS))
        options, voided_at = FAULTS[fault] if fault else ({}, ())
        number = str(self._random.randrange(37))
        reverse = self._last_result is None or wheel.status.direction == self._last_result
        wheel.game(number, reverse=reverse, **options)  # type: ignore[arg-type]
        if wheel.level not in voided_at:
            self._last_result = wheel.status.direction
        return number, fault


#: The issue's case, in an order every level can play: a clean game, a ball spun
#: the rotor's way, a rotor that stops, a game of two revolutions, a clean game.
#: (The rotor keeps its direction after the void games, so the last two alternate
#: with the first, the last result, at every level.)
DONE_WHEN: list[tuple[str, dict[str, object]]] = [
    ("17", {}),
    ("5", {"ball_same_direction": True}),
    ("23", {"rotor_stops": True, "reverse": False}),
    ("8", {"revolutions": 2, "reverse": False}),
]
