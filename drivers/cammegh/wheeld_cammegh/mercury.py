"""The Cammegh Mercury 360 (and the Mercury II it emulates): a sans-I/O decoder.

The Mercury's Break Out Box speaks one of three output levels per port, and
this decoder tells them apart line by line:

- **Basic**: ``*S`` (game started), ``*N`` (no more bets), ``*W nn`` (the
  number). No rotor, no ball, no revolutions: those rules are the wheel's.
- **Advanced**: the ``*X;s;ccc;nn;f;rrr;d`` status frame every 500 ms, read by
  the core the SS2 shares (``decoder.py``): the game, the confirmation of
  numbers, the rotor integrated from its speed. Ball direction and revolutions
  are the wheel's (its flags and its no more bets), and are null.
- **Extended Advanced**: the same frame plus ``EEEE;kk;b;ttttt;pp``. wheeld
  judges the mission's rules itself from the wheel's sensors: every ball
  revolution the counter ``kk`` confirms is a ``BallPassed`` in the ball's
  direction ``b`` (so ``insufficient_revolutions`` and ``ball_same_direction``
  are the engine's), and the status bit 0x01 held in two frames is
  ``rotor_stopped``. The wheel's own flag for a ball spun the rotor's way is
  then its verdict, not a void, and each game's end is told as a
  ``WheelVerdict`` so the pipeline can raise ``wheel_verdict_mismatch``.

The warning bits are read through a flag table chosen by model and firmware
(``flags.py``); state 7 (dealer lock) holds the game, undecided, until state 5
or a void. Every assumption made where the maker's guide is silent is in this
distribution's README.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from wheeld.core.events import (
    BallLaunched,
    BallPassed,
    Direction,
    Heartbeat,
    ReasonCode,
    WheelEvent,
    WheelNoMoreBets,
    WheelReply,
    WheelVerdict,
    WheelVoid,
    WinningNumber,
)
from wheeld.drivers import Driver, WheelDecoder
from wheeld_cammegh.decoder import (
    _DIRECTIONS,
    FLAG_SAME_DIRECTION,
    STATUS_GAP_MS,
    CammeghDecoder,
    OutputLevel,
    Status,
)
from wheeld_cammegh.flags import MERCURY, FlagRole, FlagTable, table_for
from wheeld_cammegh.mercury_log import MercuryLogReader, MercuryLogSession

NAME = "cammegh-mercury"
DEFAULT_BAUDRATE = 9600

GameMode = Literal["00", "20", "40", "03", "1C", "1F", "3F"]

#: The rules wheeld cannot judge at each level, and so takes from the wheel.
RULES_JUDGED_BY_WHEEL: dict[OutputLevel, list[ReasonCode]] = {
    "basic": [
        "ball_same_direction",
        "direction_not_alternated",
        "insufficient_revolutions",
        "rotor_stopped",
    ],
    "advanced": ["ball_same_direction", "insufficient_revolutions"],
    "extended": [],
}

_STATUS = re.compile(
    rb"\*X;([1-7]);(\d{3});([ \d]{2});([0-9A-Fa-f]);(\d{3});([01])"
    rb"(?:;([0-9A-Fa-f]{4});([0-9A-Fa-f]{2});([?01]);([0-9A-Fa-f]{5}|\?{5});([ \d]{2}|\?\?))?"
)
_BASIC_NUMBER = re.compile(rb"\*W ?([ \d]{1,2})")
_VERSION_REPLY = re.compile(rb"\*V ?(.+)")
#: The event log's answer: ``E <data>`` (the guide prints it without ``*``; either is taken).
_EVENT_LOG_REPLY = re.compile(rb"(?:\*E ?|E )(.*)")

BIT_ROTOR_STOPPED = 0x01
#: One ball revolution in ``ttttt`` units is this many per second (1/32768 s).
REVOLUTION_TIME_UNITS = 32768
#: The counter ``kk`` is 8 bits: the most one 500 ms frame can add is far below this.
MAX_REVOLUTIONS_PER_FRAME = 8


@dataclass(slots=True)
class Sensors:
    """The five fields Extended Advanced adds to a status frame."""

    bits: int
    revolutions: int
    ball: Direction | None
    #: The ball's last revolution in 1/32768 s; None when the wheel writes ``?????``.
    revolution_time: int | None
    #: The pocket the ball is in; None when the wheel writes ``??``.
    pocket: str | None


@dataclass(slots=True)
class MercuryStatus(Status):
    """A Mercury status frame: the SS2's fields, and the sensors on Extended."""

    sensors: Sensors | None = None


def number_text(field: bytes) -> str | None:
    """A winning number as the Mercury writes it (``0``, `` 0``, ``00``, ``07``, `` 7``),
    in wheeld's form; None for blanks and anything else."""
    text = field.decode("ascii", "replace")
    if text.strip() == "" or not text.strip().isdigit() or text != text.rstrip():
        return None
    if text == "00":
        return "00"  # double zero: only a double-zero wheel has the pocket
    value = int(text)
    return str(value) if value <= 36 else None


def parse_mercury_status(line: bytes) -> MercuryStatus | None:
    """A Mercury ``*X`` frame (Advanced or Extended Advanced), or None."""
    match = _STATUS.fullmatch(line)
    if match is None:
        return None
    state, spin, win, flags, speed, direction, bits, kk, ball, time, pocket = match.groups()
    number = number_text(win)
    if number is None and win.strip():
        return None
    sensors = None
    if bits is not None:
        sensors = Sensors(
            int(bits, 16),
            int(kk, 16),
            None if ball == b"?" else _DIRECTIONS[ball],
            None if time.startswith(b"?") else int(time, 16),
            None if pocket == b"??" else number_text(pocket),
        )
    return MercuryStatus(
        int(state),
        int(spin),
        number,
        int(flags, 16),
        int(speed),
        _DIRECTIONS[direction],
        sensors,
    )


def encode_mercury_status(status: MercuryStatus) -> bytes:
    """The status frame a Mercury sends, Extended when it carries sensors (simulators)."""
    win = "  " if status.win is None else status.win.rjust(2)
    direction = "0" if status.direction == "cw" else "1"
    line = (
        f"*X;{status.state};{status.spin:03d};{win};{status.flags:X};{status.speed:03d};{direction}"
    )
    sensors = status.sensors
    if sensors is not None:
        ball = "?" if sensors.ball is None else ("0" if sensors.ball == "cw" else "1")
        time = "?????" if sensors.revolution_time is None else f"{sensors.revolution_time:05X}"
        pocket = "??" if sensors.pocket is None else sensors.pocket.rjust(2)
        line += f";{sensors.bits:04X};{sensors.revolutions:02X};{ball};{time};{pocket}"
    return (line + "\r\n").encode("ascii")


class MercuryDecoder(CammeghDecoder):
    """Incremental Mercury decoder: ``feed(bytes, now)`` returns engine events."""

    def __init__(self) -> None:
        super().__init__()
        #: The wheel's event log (``*E?``, ``*EG``, ``*EN``), read when the table closes.
        self.event_log = MercuryLogReader(self.counters)
        self.flag_table: FlagTable = MERCURY
        self.game_mode: GameMode = "00"
        self._previous_sensors: Sensors | None = None
        #: Extended: revolutions this game that two frames in a row confirm.
        self._revolutions = 0
        self._ball: Direction | None = None
        self._rotor_voided = False
        #: Why the wheel's own flags voided the game in progress, where wheeld judges,
        #: and the flag that said it (2, or 8 in game mode 3F).
        self._wheel_void: str | None = None
        self._wheel_void_flag = FLAG_SAME_DIRECTION
        #: Basic: a game between ``*N`` and ``*W``.
        self._basic_game = False
        #: The wheel flagged the ball spun the rotor's way in state 3: its respin (the
        #: flag clearing, still in state 3) is a new launch.
        self._respin_due = False
        self._respin_launch = False
        #: The flag whose clearing is that respin (2, or 8 in game mode 3F).
        self._respin_flag = FLAG_SAME_DIRECTION

    def configure(self, model: str | None, firmware: str | None, game_mode: GameMode) -> None:
        """What the configuration says of the wheel, until ``*V`` says otherwise."""
        self.flag_table = table_for(model, firmware)
        self.game_mode = game_mode

    # -- hooks of the shared core ---------------------------------------------------

    def _level_of(self, status: Status) -> OutputLevel:
        sensors = status.sensors if isinstance(status, MercuryStatus) else None
        return "extended" if sensors is not None else "advanced"

    def _judged_by_wheel(self, level: OutputLevel) -> list[ReasonCode]:
        return list(RULES_JUDGED_BY_WHEEL[level])

    def _parse(self, line: bytes) -> Status | None:
        return parse_mercury_status(line)

    def _bare_number(self, text: str) -> str | None:
        # Two characters at most (``000`` is no Mercury's), a pocket's number or none.
        return number_text(text.encode().rjust(2)) if len(text) <= 2 else None

    def _spin_before(self, spin: int) -> int:
        return (spin - 1) % 256  # games completed, 0-255, wrapping

    def _in_this_game(self, status: Status) -> bool:
        # "Games completed" may count this game once its number stands.
        game = self._game_spin
        return game is not None and status.spin in (game, (game + 1) % 256)

    def _status(self, status: Status, tick: int, out: list[WheelEvent]) -> None:
        sensors = status.sensors if isinstance(status, MercuryStatus) else None
        if self._basic_game:
            self._end_basic(None, "the output level changed", tick, out, "frame_loss")
        elif self._game_spin is not None and self._level_of(status) != self.output_level:
            # Extended <-> Advanced mid-game: the sensors that judge its rules came or
            # went, so neither level saw it whole (as when the port turns Basic).
            reason = "the output level changed"
            out.append(self._void_event(tick, "frame_loss", reason))
            self._game_over(None, reason, tick, out)
            self._end_game(whole=False)
        idle = self._game_spin is None and not self._basic_game
        super()._status(status, tick, out)
        self._previous_sensors = sensors
        if idle and self._game_spin is None:
            self._bonus = {}  # this frame launched nothing: the lines before it are no game's

    def _respun(self, status: Status, previous: Status | None, gap: int | None) -> bool:
        # The respin of the spec: the flag clears while the wheel stays in state 3.
        if not self._respin_due:
            return False
        if status.state != 3:
            self._respin_due = False  # back to betting: the next launch is an ordinary one
            return False
        if status.flags & self._respin_flag:
            return False
        self._respin_due = False
        self._respin_launch = True
        return gap is None or gap <= STATUS_GAP_MS

    def _launch_event(self, status: Status, tick: int) -> BallLaunched:
        sensors = status.sensors if isinstance(status, MercuryStatus) else None
        previous = self._previous_sensors
        self._revolutions = 0
        if self._respin_launch and sensors is not None and previous is not None:
            # A respin in state 3 goes on counting: only the revolutions after it are its own.
            self._revolutions = min(previous.revolutions, sensors.revolutions)
        self._respin_launch = self._respin_due = False
        self._rotor_voided = False
        self._wheel_void = None
        extra: dict[str, object] = {"spin": status.spin}
        if status.speed > 0:
            extra["rotor_rpm"] = status.speed / 10
        if sensors is None:
            # Advanced: the ball's direction and revolutions are the wheel's to judge.
            rotor = status.direction if status.speed > 0 else None
            self._ball = None
            return BallLaunched(tick, rotor, None, False, extra)
        stopped = sensors.bits & BIT_ROTOR_STOPPED
        self._rotor_voided = bool(stopped)  # the engine voids a launch with no rotor
        self._ball = sensors.ball
        rotor = None if stopped else status.direction
        return BallLaunched(tick, rotor, sensors.ball, True, extra)

    def _in_game(self, status: Status, tick: int, out: list[WheelEvent]) -> bool:
        sensors = status.sensors if isinstance(status, MercuryStatus) else None
        if sensors is None:
            return False
        previous = self._previous_sensors
        respun = self._wheel_void is not None and not status.flags & self._wheel_void_flag
        if respun and status.state == 3:
            # The wheel's respin after its flag 2: that game is over (void, as the wheel
            # says), and the ball spun again is a new one.
            out.append(self._void_event(tick, "ball_same_direction", "respun after flag 2"))
            self._game_over(None, "respun", tick, out)
            self._end_game(whole=False)
            self._respin_launch = True
            self._launch(status, None, tick, out)
            return True
        if sensors.ball is not None:
            self._ball = sensors.ball
        stopped = previous is not None and sensors.bits & previous.bits & BIT_ROTOR_STOPPED
        if stopped and not self._rotor_voided:
            # Two frames in a row: one flipped bit does not stop a rotor.
            self._rotor_voided = True
            detail = "status bit 0x01: rotor stopped"
            out.append(self._void_event(tick, "rotor_stopped", detail))
        if previous is not None and self._ball is not None:
            # A revolution counts once two frames in a row show it (no checksum).
            confirmed = min(previous.revolutions, sensors.revolutions)
            added = confirmed - self._revolutions
            if 0 < added <= MAX_REVOLUTIONS_PER_FRAME:
                period = 1
                if sensors.revolution_time is not None:
                    period = max(1, sensors.revolution_time * 1000 // REVOLUTION_TIME_UNITS)
                for _ in range(added):
                    out.append(BallPassed(0, tick, self._ball, period))
                self._revolutions = confirmed
        return False  # the game goes on: wheeld's voids leave the wheel's game to follow

    def _flag_reason(
        self, role: FlagRole, flag: int, held_ms: int, state: int
    ) -> tuple[ReasonCode, str] | None:
        if role == "speed_warning":
            return None  # the game goes on; the wheel logs it
        # On Extended wheeld judges the ball's direction from ``b``: the flag is the
        # wheel's verdict; its respin (the flag cleared in state 3) ends the wheel's game.
        if role == "void_game" and self._same_direction_in_3f(state):
            role = "same_direction"  # game mode 3F raises flag 8 in place of flag 2
        if state == 3 and (
            role == "same_direction" or (role == "void_game" and self.game_mode == "3F")
        ):
            # Advanced cannot tell mode 3F's flag 8 for a ball spun the rotor's way from
            # a rotor error: should it clear in state 3, that was the respin, a new game.
            self._respin_due = True
            self._respin_flag = flag
        if role == "same_direction" and self.output_level == "extended":
            self._wheel_void = f"flag {flag}: ball spun the rotor's way"
            self._wheel_void_flag = flag
            return None
        if role == "void_game":
            why: ReasonCode = "rotor_malfunction"
            if self.game_mode == "1C":
                why = "ball_out_of_wheel"  # the mode that flags ball errors only
            return why, f"flag {flag}: the wheel voids the game (game mode {self.game_mode})"
        return super()._flag_reason(role, flag, held_ms, state)

    def _same_direction_in_3f(self, state: int) -> bool:
        """Game mode 3F's flag 8 in state 3 where the sensors show the ball running with
        the rotor: the same-direction flag (elsewhere it is a void of its own)."""
        status = self.last_status
        return (
            self.game_mode == "3F"
            and state == 3
            and self.output_level == "extended"
            and status is not None
            and self._ball == status.direction
        )

    def _game_over(
        self, number: str | None, void: str | None, tick: int, out: list[WheelEvent]
    ) -> None:
        out.append(WheelVerdict(tick, number, self._wheel_void or void))
        self._wheel_void = None
        self._bonus = {}  # published with the result, if any: the next game's are its own

    def _void_event(self, tick: int, reason: ReasonCode, detail: str) -> WheelVoid:
        # The decoder follows the wheel's game past wheeld's own end of it.
        return WheelVoid(tick, reason, detail, alarm_between_games=False)

    # -- Basic, and the wheel's identity ---------------------------------------------

    def _basic_line(self, tick: int, out: list[WheelEvent]) -> None:
        """A Basic line: the port speaks Basic now; a status frames' game cannot go on."""
        self._profile("basic", tick, out)
        if self._game_spin is not None:
            reason = "the output level changed"
            out.append(self._void_event(tick, "frame_loss", reason))
            self._game_over(None, reason, tick, out)
            self._end_game(whole=False)

    def _other_line(self, line: bytes, tick: int, out: list[WheelEvent]) -> bool:
        if match := _EVENT_LOG_REPLY.fullmatch(line):
            # The event log's answers (``E <data>``, with or without the ``*``).
            text = match.group(1).decode("latin-1")
            out.append(WheelReply("E", text))
            if records := self.event_log.on_reply(text, tick):
                out.append(records)
            return True
        if line == b"*S":
            self._basic_line(tick, out)
            if self._basic_game:
                self._end_basic(None, "a new game without a number", tick, out)
            out.append(Heartbeat(0, tick))
            return True
        if line == b"*N":
            self._basic_line(tick, out)
            if not self._basic_game:
                self._basic_game = True
                self._bonus = {}
                # Basic says nothing of the rotor or the ball, and nothing between its
                # events: neither is judged, and its silence is no lost link.
                out.append(
                    BallLaunched(tick, None, None, False, rotor_reported=False, link_judged=False)
                )
            out.append(WheelNoMoreBets(tick))
            return True
        if match := _BASIC_NUMBER.fullmatch(line):
            number = number_text(match.group(1).rjust(2))
            if number is None:
                return False  # malformed
            self._basic_line(tick, out)
            if self._basic_game:
                self._end_basic(number, None, tick, out)
            return True
        if match := _VERSION_REPLY.fullmatch(line):
            text = match.group(1).decode("ascii", "replace")
            self.flag_table = table_for(text, text)
            if self.output_level is not None:
                self._profile(self.output_level, tick, out)
            out.append(WheelReply("V", text))
            return True
        return False

    def _end_basic(
        self,
        number: str | None,
        void: str | None,
        tick: int,
        out: list[WheelEvent],
        reason: ReasonCode = "ball_not_settled",
    ) -> None:
        self._basic_game = False
        if number is not None:
            extra: dict[str, object] = {"bonus": dict(self._bonus)} if self._bonus else {}
            out.append(WinningNumber(tick, number, extra))
        else:
            out.append(self._void_event(tick, reason, void or "no number"))
        self._game_over(number, void, tick, out)

    def _bonus_game(self) -> bool:
        # "At the start of state 3" (*Y:P, *Y:k) may come before the first state-3 frame:
        # heard while betting, a line is kept for the launch the next frame must be.
        status = self.last_status
        betting = status is not None and status.state in (1, 2)
        return self._basic_game or self._game_spin is not None or betting

    def _launch(
        self, status: Status, previous: Status | None, tick: int, out: list[WheelEvent]
    ) -> None:
        heard = self._bonus  # before this first state-3 frame (_bonus_game)
        super()._launch(status, previous, tick, out)
        if self._game_spin is not None:
            self._bonus = {**heard, **self._bonus}


class MercuryConfig(BaseModel):
    """``[wheel.mercury]``: what the wheel may not say of itself while wheeld only listens."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    model: str = Field(
        default="mercury-360",
        min_length=1,
        description="The product, for the warning-flag table (an SS2 model name reads the "
        "SS2 table, anything else the Mercury's); the wheel's `*V` answer overrides it.",
    )
    firmware: str | None = Field(
        default=None, description="The firmware, for the flag table, until `*V` says."
    )
    game_mode: GameMode = Field(
        default="00",
        description="The Mercury 360 game mode (`*G?`): which causes flag 8 voids for "
        "(drivers/cammegh/README.md).",
    )
    ask_version: bool = Field(
        default=False,
        description="Ask the wheel `*V` on every connect, so its answer picks the flag table.",
    )
    read_log: bool = Field(
        default=False,
        description="Each time the table closes (state 6), read the wheel's event log (`*E?`, "
        "`*EG`, `*EN`): `wheel_log_mismatch` for every game it logged that wheeld did not "
        "publish, or published differently (drivers/cammegh/README.md).",
    )


def _session(decoder: WheelDecoder, settings: MercuryConfig | None) -> MercuryLogSession | None:
    # *V once per connect, the event log when the table closes, and nothing else:
    # *X to a Mercury 360 reads its level sensor.
    if settings is not None and (settings.ask_version or settings.read_log):
        return MercuryLogSession(
            decoder, ask_version=settings.ask_version, read_log=settings.read_log
        )
    return None  # listening only


def configure(decoder: WheelDecoder, settings: MercuryConfig) -> None:
    """Tell a new Mercury decoder its ``[wheel.mercury]`` section."""
    if isinstance(decoder, MercuryDecoder):
        decoder.configure(settings.model, settings.firmware, settings.game_mode)


DRIVER: Driver[MercuryConfig] = Driver(
    name=NAME,
    default_baudrate=DEFAULT_BAUDRATE,
    decoder=MercuryDecoder,
    session=_session,
    settings=MercuryConfig,
    section="mercury",
    configure=configure,
)
