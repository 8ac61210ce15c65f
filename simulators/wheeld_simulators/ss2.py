"""A scripted Cammegh SS2 wheel: status frames every 500 ms, games step by step.

Like ``ScriptedWheel`` for WRP/1: time moves only when the script says so, and
the output is ``(host time, line)`` pairs to write as a capture or feed to the
driver. A full game looks as the real captures do: state 2 while the rotor
reverses, 3 (ball in rim), 4 (no more bets), the bare winning-number line,
state 5 for a few frames, then state 2 with the spin number incremented.
"""

from __future__ import annotations

from collections.abc import Iterable

from wheeld.core.capture import FORMAT_LINE, clock_step_comment
from wheeld.core.events import Direction
from wheeld_cammegh.decoder import NAME, Status, encode_status
from wheeld_simulators.timeline import STATUS_EVERY_MS, StatusTimeline


class ScriptedSS2(StatusTimeline):
    """An SS2 in automatic-status mode (operating mode bit 128)."""

    status: Status

    def __init__(
        self,
        *,
        start: float = 1_760_000_000.0,
        spin: int = 1,
        direction: Direction = "cw",
        speed: int = 170,
        bare_numbers: bool = True,
    ) -> None:
        super().__init__(start)
        self.status = Status(
            state=2, spin=spin, win=None, flags=0, speed=speed, direction=direction
        )
        self.cruise = speed
        self.bare_numbers = bare_numbers
        #: Wall-clock steps (seconds) seen just before the line at each index.
        self.clock_steps: dict[int, float] = {}

    def close(self, ms: int = 2000) -> None:
        """State 6: the wheel closes (left still), its rotor stopped."""
        self.run(ms, state=6, speed=0)

    def send_status(self) -> None:
        self.line(encode_status(self.status).rstrip(b"\r\n"))

    def clock_step(self, ms: int) -> None:
        """The host's wall clock steps by ``ms`` (frames keep coming; no time is lost)."""
        self.ms += ms
        self.clock_steps[len(self.lines)] = self.clock_steps.get(len(self.lines), 0.0) + ms / 1000

    def silence(self, ms: int) -> None:
        """Nothing arrives for ``ms`` (a dead link, or a recorder that missed frames)."""
        self.ms += ms

    def reverse(self) -> None:
        """State 2: the rotor slows to 0, turns the other way and speeds up again."""
        for speed in (120, 60, 10, 0):
            self.run(STATUS_EVERY_MS, state=2, speed=speed)
        flipped: Direction = "ccw" if self.status.direction == "cw" else "cw"
        for speed in (20, 110, self.cruise):
            self.run(STATUS_EVERY_MS, speed=speed, direction=flipped)
        self.run(1000)

    def game(
        self,
        number: str,
        *,
        reverse: bool = True,
        in_rim_ms: int = 3000,
        no_more_bets_ms: int = 10_000,
        flags_in_rim: int = 0,
        skip_no_more_bets: bool = False,
        sensor_passes: int | None = None,
        dealer_lock_ms: int = 0,
        start: bytes | None = None,
    ) -> None:
        """One whole game, ending in ``number`` (state 5) and the next spin's state 2."""
        if reverse:
            self.reverse()
        else:
            self.run(2000, state=2)
        if start is not None:
            self.ask(start, b"*u OK")  # a controlled wheel waits for the host's start
        self.run(in_rim_ms, state=3, flags=flags_in_rim)
        if sensor_passes is not None:
            for sensor in range(sensor_passes * 3):
                self.line(b"*bs %d" % (sensor % 3 + 1))
                self.ms += 100
        if not skip_no_more_bets:
            self.run(no_more_bets_ms, state=4, flags=0)
        if dealer_lock_ms:
            self.run(dealer_lock_ms, state=7)  # firmware 2.52 with *T g bit 32
        if self.bare_numbers:
            self.line(number.rjust(2).encode())
        self.run(3000, state=5, win=number, flags=0)
        self.run(STATUS_EVERY_MS, state=2, spin=self.status.spin % 256 + 1)

    def capture(self, comments: Iterable[str] = ()) -> str:
        head = [FORMAT_LINE, f"# driver: {NAME}", *(f"# {c}" for c in comments)]
        body = [
            (clock_step_comment(self.clock_steps[index]) if index in self.clock_steps else "")
            + self.capture_line(index)
            for index in range(len(self.lines))
        ]
        return "\n".join(head) + "\n" + "".join(body)
