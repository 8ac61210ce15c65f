"""A scripted WRP/1 wheel: games written step by step, for tests and captures.

Time only moves when the script says so; while it moves, the rotor's datum
frames and the heartbeats that a real head sends are emitted on schedule. The
output is a list of ``(host time, frame bytes)`` that can be written as a
capture or fed straight to a decoder.
"""

from __future__ import annotations

from collections.abc import Iterable

from wheeld.core.capture import FORMAT_LINE, format_line
from wheeld.core.events import (
    BallPassed,
    Direction,
    Heartbeat,
    IncidentCode,
    PocketReading,
    RotorDatum,
    WheelEvent,
    WheelHello,
    WheelIncident,
)
from wheeld.drivers.wrp import encode_event

#: A ball that slows from 0.6 s per revolution; crosses 1400 ms at the 11th pass.
DEFAULT_BALL_PERIODS = (600, 650, 700, 760, 830, 910, 1000, 1100, 1220, 1350, 1500, 1650)
HEARTBEAT_MS = 250


def opposite(direction: Direction) -> Direction:
    """The other way round."""
    return "ccw" if direction == "cw" else "cw"


class ScriptedWheel:
    """A WRP/1 head whose every frame is written by the script."""

    def __init__(
        self,
        *,
        pockets: int = 37,
        start: float = 1_760_000_000.0,
        tick: int = 1000,
        seq: int = 0,
        rotor: Direction | None = "cw",
        rotor_period_ms: int = 2400,
        heartbeat_ms: int | None = HEARTBEAT_MS,
    ) -> None:
        self.pockets = pockets
        self.start = start
        self.tick = tick
        self.seq = seq
        self.rotor: Direction | None = rotor
        self.rotor_period_ms = rotor_period_ms
        self.heartbeat_ms = heartbeat_ms
        self.lines: list[tuple[float, bytes]] = []
        self._next_rotor = tick + rotor_period_ms
        self._next_heartbeat = tick + (heartbeat_ms or 0)
        #: Tick of the last rotor datum pass sent, if any.
        self.last_datum_tick: int | None = None

    # -- what the head sends ---------------------------------------------

    def host_time(self, tick: int | None = None) -> float:
        """Host time at which a frame sent at ``tick`` is heard (2 ms of link)."""
        return round(self.start + ((self.tick if tick is None else tick) + 2) / 1000.0, 3)

    def send(self, event: WheelEvent) -> None:
        """Emit one event as a frame at the current tick."""
        self.lines.append((self.host_time(), encode_event(event).rstrip(b"\r\n")))

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq = (seq + 1) % 65536
        return seq

    def hello(self, model: str = "RefWheel", firmware: str = "1.0.0") -> None:
        self.send(WheelHello(self._next_seq(), self.tick, self.pockets, model, firmware, "SN0001"))

    def heartbeat(self) -> None:
        self.send(Heartbeat(self._next_seq(), self.tick))

    def rotor_datum(self, direction: Direction | None = None) -> None:
        """One datum pass now (the rotor's own passes come with ``advance``)."""
        turning = direction or self.rotor or "cw"
        self.send(RotorDatum(self._next_seq(), self.tick, turning, self.rotor_period_ms))
        self.last_datum_tick = self.tick

    def ball(self, direction: Direction, period_ms: int) -> None:
        self.send(BallPassed(self._next_seq(), self.tick, direction, period_ms))

    def pocket(self, pocket: str | None) -> None:
        self.send(PocketReading(self._next_seq(), self.tick, pocket))

    def incident(self, code: IncidentCode) -> None:
        self.send(WheelIncident(self._next_seq(), self.tick, code))

    def noise(self, data: bytes) -> None:
        """Bytes on the line that are no frame at all."""
        self.lines.append((self.host_time(), data))

    def lose_frame(self) -> None:
        """A frame the head sent that never arrived: its sequence number is skipped."""
        self._next_seq()

    def corrupt_next(self) -> None:
        """Damage the most recent frame's checksum, as line noise would."""
        at, frame = self.lines[-1]
        digit = b"0" if frame[-1:] != b"0" else b"1"
        self.lines[-1] = (at, frame[:-1] + digit)

    # -- time --------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Let ``ms`` of wheel time pass, with rotor datum passes and heartbeats."""
        until = self.tick + ms
        while True:
            due = [until]
            if self.rotor is not None:
                due.append(self._next_rotor)
            if self.heartbeat_ms:
                due.append(self._next_heartbeat)
            step = min(due)
            if step > until:
                break
            self.tick = step
            if self.rotor is not None and step == self._next_rotor:
                self.rotor_datum()
                self._next_rotor += self.rotor_period_ms
            if self.heartbeat_ms and step == self._next_heartbeat:
                self.heartbeat()
                self._next_heartbeat += self.heartbeat_ms
            if step == until:
                break
        self.tick = until

    def rotor_phase(self) -> float:
        """Fraction of a turn the rotor's datum has moved past its sensor."""
        return (1.0 - (self._next_rotor - self.tick) / self.rotor_period_ms) % 1.0

    def set_rotor(self, direction: Direction | None) -> None:
        """Start, reverse or (None) stop the rotor; the next datum is a period away."""
        self.rotor = direction
        self._next_rotor = self.tick + self.rotor_period_ms

    def silence(self, ms: int) -> None:
        """Wheel time passes and nothing at all is sent (a dead link, or frames lost)."""
        self.tick += ms
        self._next_rotor = max(self._next_rotor, self.tick + 1)
        self._next_heartbeat = max(self._next_heartbeat, self.tick + 1)

    # -- whole phases --------------------------------------------------------

    def launch(self, ball: Direction | None = None) -> Direction:
        """The launcher fires: first pass of the ball, against the rotor by default."""
        direction = ball or opposite(self.rotor or "cw")
        self.ball(direction, 0)
        return direction

    def run_ball(self, direction: Direction, periods: Iterable[int]) -> None:
        """The ball's further passes, one per period."""
        for period in periods:
            self.advance(period)
            self.ball(direction, period)

    def drop(self, *pockets: str, bounce_ms: int = 300) -> None:
        """The ball leaves the rim and visits ``pockets``, resting in the last."""
        self.advance(400)
        for index, pocket in enumerate(pockets):
            if index:
                self.pocket(None)
                self.advance(bounce_ms // 2)
            self.pocket(pocket)
            if index < len(pockets) - 1:
                self.advance(bounce_ms)

    def game(
        self,
        number: str,
        *,
        ball: Direction | None = None,
        periods: Iterable[int] = DEFAULT_BALL_PERIODS,
        bounces: Iterable[str] = (),
        settle_ms: int = 1500,
    ) -> None:
        """A whole game: pick-up, launch, ball run, drop (with bounces), rest."""
        self.pocket(None)
        self.advance(700)
        direction = self.launch(ball)
        self.run_ball(direction, periods)
        self.drop(*bounces, number)
        self.advance(settle_ms)

    def reverse_rotor(self, ms: int = 3000) -> None:
        """Between games: the rotor slows, stops and turns the other way."""
        self.set_rotor(opposite(self.rotor or "ccw"))
        self.advance(ms)

    # -- output --------------------------------------------------------------

    def wire(self) -> bytes:
        """Everything sent, as the bytes on the line."""
        return b"".join(frame + b"\r\n" for _, frame in self.lines)

    def capture(self, comments: Iterable[str] = ()) -> str:
        """Everything sent, as a capture file."""
        head = [FORMAT_LINE, "# driver: wrp", *(f"# {comment}" for comment in comments)]
        body = [format_line(at, "<", frame) for at, frame in self.lines]
        return "\n".join(head) + "\n" + "".join(body)
