"""A roulette wheel in software, driven by a small physical model.

The rotor turns at 15-30 rpm and alternates direction from one result to the
next; the ball is launched against it, slows from about 0.6 s per revolution
until it leaves the rim (typically 8-15 revolutions), drops, bounces across
0-4 pockets and rests in the pocket under it, which depends on the rotor's
angle at that moment. Faults for every no-spin cause, and line faults, are
injected on demand or at a rate, reproducibly from a seed.

Pure: it writes frames into a ``ScriptedWheel`` (wheel time only) and says
what the rules must decide for each game; the targets module puts the frames
on a pty, a TCP socket or a capture file.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from wheeld.core.events import Direction
from wheeld.core.layout import layout_for
from wheeld_simulators.faults import FAULTS, WHEEL_FAULTS
from wheeld_simulators.scripted import ScriptedWheel, opposite

HEARTBEAT_MS = 250


@dataclass(frozen=True, slots=True)
class Disconnect:
    """The link goes away for ``ms`` of wall time (the pty or socket is closed)."""

    ms: int


@dataclass(slots=True)
class GamePlan:
    """One game as the wheel plays it, and what the rules must decide."""

    expected: str  # the winning number, or the reason code of the no-spin
    fault: str | None
    number: str | None  # where the ball came to rest, if it did


@dataclass(slots=True)
class SimulatorSettings:
    pockets: int = 37
    seed: int | None = None
    #: Probability that a game carries a wheel fault (chosen among ``faults``).
    fault_rate: float = 0.0
    faults: tuple[str, ...] = FAULTS
    #: Per-frame probability of line noise inserted before the frame (harmless).
    noise_rate: float = 0.0
    min_rpm: float = 15.0
    max_rpm: float = 30.0
    #: Wall-clock length of a disconnect fault.
    disconnect_ms: int = 3000


class WheelSimulator:
    """Plays game after game into a scripted WRP/1 head."""

    def __init__(self, settings: SimulatorSettings | None = None) -> None:
        self.settings = settings or SimulatorSettings()
        self.rng = random.Random(self.settings.seed)
        self.layout = layout_for(self.settings.pockets)
        self.wheel = ScriptedWheel(
            pockets=self.settings.pockets,
            start=0.0,
            rotor=self.rng.choice(["cw", "ccw"]),
            rotor_period_ms=self._rotor_period(),
            heartbeat_ms=HEARTBEAT_MS,
        )
        #: Disconnect markers, by index into ``wheel.lines`` where they happen.
        self.disconnects: dict[int, Disconnect] = {}
        self._last_result_rotor: Direction | None = None
        self._voided = False  # the last game was a no-spin: the rotor must turn 3 times
        self.wheel.hello()
        self.wheel.advance(3000)

    # -- the physical model ------------------------------------------------

    def _rotor_period(self) -> int:
        rpm = self.rng.uniform(self.settings.min_rpm, self.settings.max_rpm)
        return round(60_000 / rpm)

    def _pocket_under(self, ball_turn: float, ball: Direction) -> int:
        """Index, in wheel order, of the pocket under the ball at this moment."""
        rotor = self.wheel.rotor or "cw"
        signed_ball = ball_turn if ball == "cw" else -ball_turn
        phase = self.wheel.rotor_phase()
        signed_rotor = phase if rotor == "cw" else -phase
        relative = (signed_ball - signed_rotor) % 1.0
        return math.floor(relative * self.layout.pockets) % self.layout.pockets

    def _ball_periods(self, fault: str | None) -> list[int]:
        rng = self.rng
        first = rng.uniform(560, 640)
        if fault == "few_revolutions":
            return [round(first * 1.9), round(first * 3.4)][: rng.choice([1, 2])]
        growth = rng.uniform(1.07, 1.13)
        leaves_at = rng.uniform(1500, 1900)
        periods: list[int] = []
        period = first
        while period < leaves_at or len(periods) < 8:
            periods.append(round(period))
            period *= growth
            if len(periods) >= 15:
                break
        return periods

    # -- the croupier -----------------------------------------------------------

    def follow_table(self, last_result_rotor: Direction | None, *, voided: bool) -> None:
        """Go by what the controller announced rather than by what the wheel played.

        The croupier turns the rotor against the direction of the last result
        the table announced (``None``: none yet), and after an announced no-spin
        lets it turn the re-spin revolutions. Left alone, the simulator assumes
        every game it played cleanly was a result; a controller that voided one
        for a cause of its own (a line fault, a restart) would then see the
        next game repeat the direction of its last real result.
        """
        self._last_result_rotor = last_result_rotor
        self._voided = voided

    # -- games ----------------------------------------------------------------

    def play(self, fault: str | None = None) -> list[GamePlan]:
        """Play one game (two for ``early_respin``: a void, then the hasty re-spin)."""
        if fault is None and self.rng.random() < self.settings.fault_rate:
            fault = self.rng.choice(self.settings.faults)
        if fault is not None and fault not in WHEEL_FAULTS:
            raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
        if fault == "early_respin":
            first = self._game("ball_out")
            return [first, self._game("early_respin")]
        return [self._game(fault)]

    def _prepare_rotor(self, fault: str | None) -> None:
        wheel = self.wheel
        wanted: Direction = (
            opposite(self._last_result_rotor) if self._last_result_rotor else wheel.rotor or "cw"
        )
        if fault == "no_alternation" and self._last_result_rotor is not None:
            wanted = self._last_result_rotor
        if wheel.rotor != wanted:
            # The croupier reverses the rotor: it slows, stops and turns the other way.
            wheel.rotor_period_ms = self._rotor_period()
            wheel.set_rotor(None)
            wheel.advance(self.rng.randint(1200, 2500))
            wheel.set_rotor(wanted)
            # Up to speed again: the datum passes once the new way before any launch.
            wheel.advance(wheel.rotor_period_ms + 100)
        if self._voided and fault != "early_respin":
            # "at least 3 revolutions" before a re-spin, with a margin.
            wheel.advance(wheel.rotor_period_ms * 3 + 200)
        # Bets are placed; the launch comes at a random rotor phase.
        wheel.advance(self.rng.randint(1500, 3000) + self.rng.randrange(wheel.rotor_period_ms))

    def _game(self, fault: str | None) -> GamePlan:
        wheel, rng = self.wheel, self.rng
        wheel.pocket(None)  # the ball is picked up from the last pocket
        wheel.advance(400)
        self._prepare_rotor(fault)
        if fault == "no_alternation" and self._last_result_rotor is None:
            fault = None  # nothing to alternate with yet: a plain game
        if fault == "early_respin" and not self._voided:
            fault = None
        rotor = wheel.rotor or "cw"
        ball = rotor if fault == "same_direction" else opposite(rotor)
        wheel.launch(ball)
        periods = self._ball_periods(fault)
        incident_at = rng.randrange(1, max(2, len(periods) - 1))
        line_fault_at = rng.randrange(1, max(2, len(periods) - 1))
        for index, period in enumerate(periods):
            if fault == "rotor_stop" and index == 1:
                wheel.set_rotor(None)
            wheel.advance(period)
            wheel.ball(ball, period)
            if index == incident_at and fault in ("foreign_object", "ball_out", "rotor_fault"):
                code = {
                    "foreign_object": "object",
                    "ball_out": "ball_out",
                    "rotor_fault": "rotor_fault",
                }[fault]
                wheel.incident(code)  # type: ignore[arg-type]
                if fault == "ball_out":
                    return self._void(fault)
            if index == line_fault_at and fault == "dropped_frame":
                wheel.lose_frame()
            if index == line_fault_at and fault == "corrupted_frame":
                wheel.corrupt_next()
            if index == line_fault_at and fault == "disconnect":
                self.disconnects[len(wheel.lines)] = Disconnect(self.settings.disconnect_ms)
                wheel.silence(self.settings.disconnect_ms)
        if fault == "rotor_stop":
            # The ball keeps running until the rotor timeout has surely passed.
            while True:
                wheel.advance(1900)
                wheel.ball(ball, 1900)
                if wheel.tick - (wheel.last_datum_tick or 0) > 9000:
                    break
        if fault == "suspended_ball":
            wheel.advance(16_000)
            return self._void(fault)
        # The ball leaves the rim, travels part of a turn and drops.
        fraction = rng.uniform(0.3, 0.9)
        wheel.advance(round(periods[-1] * 1.2 * fraction))
        index = self._pocket_under(fraction, ball)
        if fault == "invalid_pocket":
            wheel.pocket("37")
            wheel.advance(1500)
            return self._void(fault)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 4])):
            wheel.pocket(self.layout.order[index])
            wheel.advance(rng.randint(150, 400))
            wheel.pocket(None)
            wheel.advance(rng.randint(80, 200))
            index = (index + rng.choice([-3, -2, -1, 1, 2, 3])) % self.layout.pockets
        number = self.layout.order[index]
        wheel.pocket(number)
        wheel.advance(rng.randint(2000, 3500))
        if fault is not None:
            return self._void(fault, number)
        self._last_result_rotor = rotor
        self._voided = False
        return GamePlan(number, None, number)

    def _void(self, fault: str, number: str | None = None) -> GamePlan:
        if self.wheel.rotor is None:
            self.wheel.set_rotor(opposite(self._last_result_rotor or "ccw"))
            self.wheel.advance(500)
        self._voided = True
        return GamePlan(WHEEL_FAULTS[fault], fault, number)

    def noise(self) -> bytes:
        """Line noise: bytes that are never a frame (no '$', no line break)."""
        size = self.rng.randint(1, 12)
        alphabet = bytes(b for b in range(256) if b not in (0x24, 0x0A))
        return bytes(self.rng.choice(alphabet) for _ in range(size))
