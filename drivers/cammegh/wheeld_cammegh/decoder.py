"""The Cammegh Slingshot 2 (SS2) automatic wheel: a sans-I/O decoder and encoder.

The SS2 judges its own game and reports phases in a status frame every 500 ms
(``*X;state;spin;win;flags;speed;dir``), so this driver turns those snapshots
into the engine's events: state 3 is the launch, state 4 the wheel's no more
bets, state 5 the winning number; warning flags, ``*F`` faults and state 6
void the game with the closest reason code (see this distribution's ``README.md``).

No line carries a checksum, and one flipped bit turns a state-4 frame (whose
``win`` is the previous game's number) into a state-5 one. So a number is
published only once confirmed: by the next state-5 frame of the spin saying
the same, or, for the first state-5 frame, by the bare winning-number line the
wheel sent during the same game. The previous game's number (the ``win`` this
spin's state 1-4 frames carried) is what flipped state-4 frames announce, so
it needs three agreeing state-5 frames in a row, and the bare line (which a
stray copy of the previous game's would fake) never confirms it. A game whose
state-5 frames are not confirmed before the state moves on is void
(``frame_loss``).

There is no wheel clock: ``tick`` is host time in milliseconds, except that a
jump of host time between two reads counts as at most ``MAX_TICK_STEP_MS`` (a
wall-clock step must not fire the rules' timers). The rotor's revolutions are
integrated from its reported speed, one ``RotorDatum`` per turn, so the re-spin
rule can count them. Lines are judged whole, however the bytes are chunked;
anything that is not a known line (the truncated, doubled and garbled lines
real captures show) is counted and skipped, never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from wheeld.core.events import (
    AlternationUnknown,
    BallLaunched,
    BallPassed,
    BallRunning,
    Direction,
    DisplayMismatch,
    Heartbeat,
    ReasonCode,
    ResultContradicted,
    RotorDatum,
    WheelEvent,
    WheelNoMoreBets,
    WheelProfile,
    WheelReply,
    WheelVoid,
    WinningNumber,
)
from wheeld.core.framing import LineSplitter
from wheeld.drivers import CounterSet
from wheeld_cammegh.flags import FLAG_BITS, SS2_V2_10, FlagRole, FlagTable
from wheeld_cammegh.wheel_log import MAX_PAGE_LINE, WheelLogReader

NAME = "cammegh-ss2"
DEFAULT_BAUDRATE = 9600
MAX_LINE = 120
_TICK_MASK = (1 << 32) - 1

_STATUS = re.compile(rb"\*X;([1-7]);(\d{3});([ \d]{2}|0{3,4});([0-9A-Fa-f]);(\d{3});([01])")
#: Two characters, or 000 and 0000 on firmware 2.52's 39- and 40-pocket wheels.
_BARE_NUMBER = re.compile(rb"\d{1,2}|0{3,4}")
_FAULT = re.compile(rb"\*F ?(\d{1,3})")
_SENSOR_PASS = re.compile(rb"\*bs ?(\d)")
_REPLY = re.compile(rb"\*([A-Za-z)]) ?(.*)")
#: Bonus lines: the SS2's ``*Y;k;nnn[;dd]`` and the Mercury's ``*Y:k:nnn``, ``*Y:P:n``
#: (an Aurora prize game) and ``*Y:A:nn`` (the Aurora colour).
_BONUS = re.compile(rb"\*Y([;:])([1-6PA])[;:](\d{1,3})(?:[;:]\d{1,3})?")
_DIRECTIONS: dict[bytes, Direction] = {b"0": "cw", b"1": "ccw"}

#: A Cammegh port's output level, as ``<base>/wheel`` names it (the SS2's is Advanced).
OutputLevel = Literal["basic", "advanced", "extended"]

FLAG_SAME_DIRECTION = 2
#: The order in which warning flags held together are judged (the first void wins).
_ROLE_ORDER: tuple[FlagRole, ...] = (
    "same_direction",
    "sensor_fault",
    "void_game",
    "launch_failed",
    "ball_missing",
)
#: The maker's grace periods before a persisting flag voids the game.
LAUNCH_FAILED_GRACE_MS = 3000
BALL_MISSING_GRACE_MS = 5000
#: Longer than this between status frames and the game was not fully seen.
STATUS_GAP_MS = 1600
#: Longer than this between frames and the rotor integration restarts.
MAX_INTEGRATION_MS = 2000
#: The most wheel time one jump of host time between two reads stands for. The
#: wheel's frames come every 500 ms whatever the host clock does, so a longer
#: jump is a clock step (or a host that was not running), not wheel time: it
#: still counts as a status gap and stops the rotor integration (both need more
#: than 2 s), but stays below every timer of the rules (3 s and more).
MAX_TICK_STEP_MS = 2500

#: Agreeing state-5 frames in a row that confirm a number on their own.
CONFIRMING_FRAMES = 2
#: The same for the previous game's number, the ``win`` field this spin's state
#: 1-4 frames carried: two state-4 frames flipped to state 5 give exactly that,
#: so it takes one more. The wheel sends six or more state-5 frames a game.
CONFIRMING_FRAMES_PREVIOUS = 3

#: ``*F`` fault codes and the reason code each voids a game with.
FAULT_REASONS: dict[int, ReasonCode] = {
    1: "rotor_malfunction",  # hardware
    2: "ball_out_of_wheel",  # no ball
    3: "ball_not_settled",  # no ball position
    4: "ball_same_direction",  # wrong ball direction
    5: "rotor_malfunction",  # motor
    6: "rotor_malfunction",  # encoder
    7: "rotor_malfunction",  # cannot play clockwise
    8: "rotor_malfunction",  # cannot play anticlockwise
}


def fault_reason(code: int) -> ReasonCode:
    """The reason code a ``*F`` fault voids a game with (sensor faults: malfunction)."""
    return FAULT_REASONS.get(code, "rotor_malfunction")


@dataclass(slots=True)
class Status:
    """One ``*X`` status frame."""

    state: int
    spin: int
    win: str | None
    flags: int
    speed: int  # rpm x 10
    direction: Direction


@dataclass(slots=True)
class CammeghCounters(CounterSet):
    """What the decoder has seen since it started."""

    frames: int = 0
    status_frames: int = 0
    winning_number_lines: int = 0
    replies: int = 0
    faults: int = 0
    sensor_events: int = 0
    bonus_lines: int = 0
    malformed: int = 0
    garbage_bytes: int = 0
    overlong_lines: int = 0
    status_gaps: int = 0
    spins_missed: int = 0
    #: Games voided because their state-5 frames never confirmed a number.
    unconfirmed_numbers: int = 0
    #: Confirmed numbers the bare winning-number line disagreed with.
    display_mismatches: int = 0
    #: Published numbers that later state-5 frames of the same spin outvoted
    #: (they agreed on another number as many times as confirms one).
    contradicted_results: int = 0
    #: Bonus lines that could not be read (the others are in ``bonus_lines``).
    bonus_malformed: int = 0
    #: Reads of the wheel's own log (live control, state 6), its pages read, those
    #: whose checksum failed, and replies to the log commands that could not be read.
    log_reads: int = 0
    log_pages: int = 0
    log_pages_bad: int = 0
    log_replies_malformed: int = 0


def _longest(line: bytes | bytearray) -> int:
    """The longest line allowed: a page of the wheel's log (``*s r``) is longer than any."""
    return MAX_PAGE_LINE if line.startswith(b"*s r") else MAX_LINE


def parse_status(line: bytes) -> Status | None:
    """A status frame's fields, or None when the line is not one."""
    match = _STATUS.fullmatch(line)
    if match is None:
        return None
    state, spin, win, flags, speed, direction = match.groups()
    win_text = win.strip().decode()
    if win_text and not (
        win_text.isdigit()
        and (win[:1] == b" " or win in (b"00", b"000", b"0000") or win[:1] != b"0")
    ):
        return None
    return Status(
        int(state),
        int(spin),
        win_text or None,
        int(flags, 16),
        int(speed),
        _DIRECTIONS[direction],
    )


def _opposite(direction: Direction) -> Direction:
    return "ccw" if direction == "cw" else "cw"


def _previous_spin(spin: int) -> int:
    return 256 if spin <= 1 else spin - 1


#: The largest value of each bonus line (Bonus Numbers 000-255, the Aurora colour 00-07,
#: the Aurora prize flag 1).
BONUS_LIMITS = {"A": 7, "P": 1}
#: Every SS2 bonus number once its licence has run out.
LICENCE_OUT = 999


def parse_bonus(line: bytes) -> tuple[str, int | str] | None:
    """A bonus line's key and value for a result's ``bonus`` (never a winning number)."""
    match = _BONUS.fullmatch(line)
    if match is None:
        return None
    form, kind, value = (group.decode() for group in match.groups())
    number = int(value)
    if number > BONUS_LIMITS.get(kind, 255) and not (form == ";" and number == LICENCE_OUT):
        return None  # outside the guide's range: a garbled line, not a bonus to publish
    if kind == "A":
        return "aurora", value.zfill(2)
    if kind == "P":
        return "aurora_prize", number
    return kind, number


class CammeghDecoder:
    """Incremental SS2 decoder: ``feed(bytes, now)`` returns engine events.

    The core both Cammegh drivers share: the lines, the ``*X`` status frames and
    their game, the confirmation of numbers, the rotor's integration and the bonus
    lines. The Mercury decoder (``mercury.py``) overrides the hooks below (the
    status format, the spin counter, the flags, its own lines and the launch).
    """

    #: States in which the ball is in play (their ``win`` is the previous game's): 3
    #: ball in the rim, 4 no more bets, and 7 (SS2 firmware 2.52 with ``*T g`` bit 32,
    #: the Mercury's dealer lock), held undecided until state 5 or another state.
    RUNNING_STATES: tuple[int, ...] = (3, 4, 7)
    #: What each warning bit means (the SS2 firmware 2.5x's: the V2.10 guide).
    flag_table: FlagTable = SS2_V2_10

    def __init__(self) -> None:
        #: Lines end at CR or LF; one past the longest (a log page's) comes in pieces, each
        #: dropped; a line past ``MAX_LINE`` that is no log page is dropped whole.
        self._lines = LineSplitter(ends=b"\r\n", limit=MAX_PAGE_LINE)
        #: The line being read is over-long: counted once, dropped up to its terminator.
        self._discarding = False
        self._host_ms: int | None = None
        self._tick = 0
        self.counters = CammeghCounters()
        self.last_status: Status | None = None
        self._last_status_ms: int | None = None
        self._game_spin: int | None = None
        self._game_seen_whole = False
        self._game_direction: Direction | None = None
        self._last_whole_spin: int | None = None
        self._flag_since: dict[int, int] = {}
        self._rotor_turns = 0.0
        self._sensor_streaming = False
        self._reference_sensor: bytes | None = None
        self._last_pass_ms: int | None = None
        #: The last bare winning-number line, for a cross-check with state 5.
        self.last_bare_number: str | None = None
        #: The bare line heard during the game in progress (one from an earlier
        #: game would vouch for a stale number).
        self._game_display: str | None = None
        #: The previous game's number as this spin's state 1-4 frames carry it
        #: (every value heard, should one of them be corrupted).
        self._previous_numbers: set[str] = set()
        #: State-5 frames of the spin so far, and the latest run of agreeing ones.
        self._state_5_frames = 0
        self._run_number: str | None = None
        self._run_length = 0
        #: The spin and number last published, held against later state-5 frames.
        self._published: tuple[int, str] | None = None
        #: The bonus lines of the game in progress (``*Y``), published with its result.
        self._bonus: dict[str, int | str] = {}
        self.output_level: OutputLevel | None = None
        #: The wheel's own records, read in live control (``*w``, ``*s t``, ``*s r``).
        self.wheel_log = WheelLogReader(self.counters)
        #: What was last said of the wheel's output on <base>/wheel.
        self._said: dict[str, object] = {}

    def feed(self, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        """Bytes from the wheel heard at host time ``now``; the events they complete."""
        counters = self.counters
        out: list[WheelEvent] = []
        tick = self._tick_at(now)
        for piece in self._lines.feed(data):
            if piece.over:
                # Judged on the line's length, which does not depend on how the reads
                # were cut: the rest of it is dropped as it comes.
                if not self._discarding:
                    counters.overlong_lines += 1
                self._discarding = not piece.end
                counters.garbage_bytes += len(piece.data)
            elif len(piece.data) > _longest(piece.data):
                # Past a frame's length but within a log page's (the splitter's limit):
                # only a page of the wheel's log (``*s r``) may be that long.
                counters.overlong_lines += 1
                counters.garbage_bytes += len(piece.data)
            elif line := piece.data.strip():
                self._line(line, tick, out)
        return out

    def _tick_at(self, now: float) -> int:
        """The tick for host time ``now``: host milliseconds, jumps bounded."""
        host_ms = int(now * 1000)
        if self._host_ms is None:
            self._tick = host_ms & _TICK_MASK
        else:
            step = min(max(host_ms - self._host_ms, 0), MAX_TICK_STEP_MS)
            self._tick = (self._tick + step) & _TICK_MASK
        self._host_ms = host_ms
        return self._tick

    # -- lines ---------------------------------------------------------------

    def _line(self, line: bytes, tick: int, out: list[WheelEvent]) -> None:
        counters = self.counters
        if line.startswith(b"*X"):
            status = self._parse(line)
            if status is None:
                counters.malformed += 1  # truncated, doubled or garbled: a snapshot missed
                return
            counters.frames += 1
            counters.status_frames += 1
            self._status(status, tick, out)
        elif _BARE_NUMBER.fullmatch(line) and (bare := self._bare_number(line.decode())):
            counters.frames += 1
            counters.winning_number_lines += 1
            self.last_bare_number = bare
            if self._game_spin is not None:
                self._game_display = self.last_bare_number
        elif match := _FAULT.fullmatch(line):
            counters.frames += 1
            counters.faults += 1
            code = int(match.group(1))
            out.append(WheelVoid(tick, fault_reason(code), f"*F {code}"))
        elif match := _SENSOR_PASS.fullmatch(line):
            counters.frames += 1
            counters.sensor_events += 1
            self._sensor_pass(match.group(1), tick, out)
        elif line.startswith(b"*bn"):
            counters.frames += 1
            counters.sensor_events += 1  # ball in pocket: the state-5 number is authoritative
        elif line.startswith(b"*Y"):
            counters.frames += 1
            counters.bonus_lines += 1
            bonus = parse_bonus(line)
            if bonus is None:
                counters.bonus_malformed += 1
            elif self._bonus_game():
                self._bonus[bonus[0]] = bonus[1]
        elif self._other_line(line, tick, out):
            counters.frames += 1
        elif match := _REPLY.fullmatch(line):
            counters.frames += 1
            counters.replies += 1
            letter, text = match.group(1).decode(), match.group(2).decode("latin-1")
            out.append(WheelReply(letter, text))
            if records := self.wheel_log.on_reply(letter, text, tick):
                out.append(records)
        else:
            counters.malformed += 1
            counters.garbage_bytes += len(line)

    # -- the output level, said on <base>/wheel -------------------------------------

    def _profile(self, level: OutputLevel, tick: int, out: list[WheelEvent]) -> None:
        """Say the output level, the rules left to the wheel and the flag table, on change."""
        self.output_level = level
        facts: dict[str, object] = {
            "output_level": level,
            "rules_judged_by_wheel": self._judged_by_wheel(level),
            "flag_table": self.flag_table.name,
        }
        if facts != self._said:
            self._said = facts
            out.append(WheelProfile(tick, dict(facts)))

    # -- what a wheel of the family does its own way (the Mercury overrides) -------

    def _level_of(self, status: Status) -> OutputLevel:
        """The output level a status frame is written in (the SS2 has one)."""
        return "advanced"

    def _judged_by_wheel(self, level: OutputLevel) -> list[ReasonCode]:
        """The rules wheeld takes from the wheel at ``level``: the SS2 reports no ball
        direction (flag 2 is its word) and, without ``*bs`` passes, no revolutions."""
        if self._sensor_streaming:
            return ["ball_same_direction"]
        return ["ball_same_direction", "insufficient_revolutions"]

    def _parse(self, line: bytes) -> Status | None:
        """A status frame's fields, or None when the line is not one."""
        return parse_status(line)

    def _bare_number(self, text: str) -> str | None:
        """The number a bare winning-number line names, as the status frames write it
        (None: no pocket of this wheel's, a malformed line)."""
        return text if text.startswith("0") or int(text) <= 36 else None

    def _other_line(self, line: bytes, tick: int, out: list[WheelEvent]) -> bool:
        """A line of this wheel's own (before replies): True when it was one."""
        return False

    def _bonus_game(self) -> bool:
        """Whether a game is in progress for a bonus line to belong to."""
        return self._game_spin is not None

    def _spin_before(self, spin: int) -> int:
        """The spin number before ``spin`` on this wheel's counter."""
        return _previous_spin(spin)

    def _in_this_game(self, status: Status) -> bool:
        """Whether ``status`` belongs to the game in progress (its spin number)."""
        return status.spin == self._game_spin

    def _launch_event(self, status: Status, tick: int) -> BallLaunched:
        """The launch a state-3 frame after state 1 or 2 stands for."""
        rotor: Direction | None = status.direction if status.speed > 0 else None
        ball: Direction | None = None
        if rotor is not None:
            same = status.flags & FLAG_SAME_DIRECTION
            ball = rotor if same else _opposite(rotor)
        extra: dict[str, object] = {"spin": status.spin}
        if status.speed > 0:
            # The rotor's speed as the wheel reports it at launch (docs/statistics.md).
            extra["rotor_rpm"] = status.speed / 10
        return BallLaunched(tick, rotor, ball, self._sensor_streaming, extra)

    def _in_game(self, status: Status, tick: int, out: list[WheelEvent]) -> bool:
        """What else a frame of the game in progress says; True when it voided it."""
        return False

    def _respun(self, status: Status, previous: Status | None, gap: int | None) -> bool:
        """Whether a frame with no game in progress shows the ball spun again without the
        wheel going back to betting (the SS2 always does: never)."""
        return False

    def _game_over(
        self, number: str | None, void: str | None, tick: int, out: list[WheelEvent]
    ) -> None:
        """The wheel ended its game: with ``number``, or void for ``void``."""

    def _void_event(self, tick: int, reason: ReasonCode, detail: str) -> WheelVoid:
        """The void of the game in progress, as the status frames tell it."""
        return WheelVoid(tick, reason, detail)

    # -- status: the game as the wheel sees it -------------------------------------

    def _status(self, status: Status, tick: int, out: list[WheelEvent]) -> None:
        self._profile(self._level_of(status), tick, out)
        previous = self.last_status
        gap = None if self._last_status_ms is None else (tick - self._last_status_ms) & _TICK_MASK
        self.last_status = status
        self._last_status_ms = tick
        if gap is not None and gap > STATUS_GAP_MS:
            self.counters.status_gaps += 1
            if self._game_spin is not None:
                self._game_seen_whole = False
        self._integrate_rotor(status, gap, tick, out)
        state = status.state

        if self._game_spin is None:
            out.append(Heartbeat(0, tick))
            if self._published is not None:
                self._after_result(status, tick, out, *self._published)
            launched = (
                state == 3
                and previous is not None
                and previous.state in (1, 2)
                and (gap is None or gap <= STATUS_GAP_MS)
            )
            if launched or self._respun(status, previous, gap):
                self._launch(status, previous, tick, out)
            else:
                self._track_flags(status, tick)
            return

        # A game is in progress, as far as the wheel has told us.
        if not self._in_this_game(status):
            # The wheel moved on to another spin: its end went by unseen.
            self._end_game(whole=False)
            out.append(self._void_event(tick, "frame_loss", "spin changed mid-game"))
            return
        if state in self.RUNNING_STATES:
            out.append(BallRunning(tick))
            if status.win is not None:
                self._previous_numbers.add(status.win)
        else:
            out.append(Heartbeat(0, tick))
        if self._flags_void(status, tick, out) or self._in_game(status, tick, out):
            return
        if state == 5:
            self._winning_number(status, tick, out)
        elif self._state_5_frames:
            # The wheel never leaves state 5 before the next spin: a frame that
            # did (or a state-5 frame that was not one) was corrupted on the line.
            self.counters.unconfirmed_numbers += 1
            detail = f"state 5 then {state}: number not confirmed"
            out.append(self._void_event(tick, "frame_loss", detail))
            self._game_over(None, "number not confirmed", tick, out)
            self._end_game(whole=False)
        elif state == 4 and (previous is None or previous.state != 4):
            out.append(WheelNoMoreBets(tick))
        elif state == 6:
            out.append(self._void_event(tick, "rotor_malfunction", "wheel closed (state 6)"))
            self._game_over(None, "table closed (state 6)", tick, out)
            self._end_game(whole=False)
        elif state in (1, 2):
            detail = "back to betting without a number"
            out.append(self._void_event(tick, "ball_not_settled", detail))
            self._game_over(None, "back to betting without a number", tick, out)
            self._end_game(whole=False)

    def _winning_number(self, status: Status, tick: int, out: list[WheelEvent]) -> None:
        """A state-5 frame: publish its number once other lines confirm it."""
        self._state_5_frames += 1
        number = status.win
        run = self._agreeing_run(number)
        if number is None:
            if run >= CONFIRMING_FRAMES:
                out.append(self._void_event(tick, "invalid_pocket", "state 5 without a number"))
                self._game_over(None, "state 5 without a number", tick, out)
                self._end_game(whole=False)
            return
        if run >= self._frames_to_confirm(number):
            self._confirm(number, tick, out)
        elif (
            self._state_5_frames == 1
            and number == self._game_display
            and number not in self._previous_numbers
            # A wheel sending bonus lines sends the last of them after this frame
            # (SS2 *Y;4 and *Y;5): the next frame confirms, so they go with the result.
            and not self._bonus
        ):
            # The first state-5 frame: the bare line the wheel sent just before
            # it is the only other witness so far. It never vouches for the
            # previous game's number: a stray copy of that game's bare line and
            # one flipped state-4 frame would agree on it.
            self._confirm(number, tick, out)
        # Otherwise the frame waits for the next ones to say the same: frames
        # that disagree restart the run, so a corrupted one is outvoted.

    def _frames_to_confirm(self, number: str) -> int:
        """How many agreeing state-5 frames in a row confirm ``number``."""
        if number in self._previous_numbers:
            return CONFIRMING_FRAMES_PREVIOUS
        return CONFIRMING_FRAMES

    def _agreeing_run(self, number: str | None) -> int:
        """The run of state-5 frames in a row giving ``number``, this frame included."""
        if self._run_length and self._run_number == number:
            self._run_length += 1
        else:
            self._run_number, self._run_length = number, 1
        return self._run_length

    def _after_result(
        self, status: Status, tick: int, out: list[WheelEvent], spin: int, number: str
    ) -> None:
        """A status frame after the result of ``spin``: do later state-5 frames outvote it?"""
        other = status.win
        if status.spin != spin:
            self._published = None  # the next spin: that game is over
        elif status.state != 5 or other is None or other == number:
            self._run_length = 0
        elif self._agreeing_run(other) >= self._frames_to_confirm(other):
            # A published number cannot be withdrawn (hence the rules before
            # publishing): the contradiction is counted on <base>/wheel, once.
            self.counters.contradicted_results += 1
            out.append(ResultContradicted(tick, number, other))
            self._published = None

    def _confirm(self, number: str, tick: int, out: list[WheelEvent]) -> None:
        display = self._game_display
        if display is not None and display != number:
            # The status frames agree with each other: they stand, but the
            # passive displays are showing players another number.
            self.counters.display_mismatches += 1
            out.append(DisplayMismatch(tick, number, display))
        extra: dict[str, object] = {"bonus": dict(self._bonus)} if self._bonus else {}
        out.append(WinningNumber(tick, number, extra))
        self._game_over(number, None, tick, out)
        spin = self._game_spin
        self._end_game(whole=self._game_seen_whole)
        if spin is not None:
            self._published = (spin, number)

    def _launch(
        self, status: Status, previous: Status | None, tick: int, out: list[WheelEvent]
    ) -> None:
        launch = self._launch_event(status, tick)
        if self._last_whole_spin != self._spin_before(status.spin):
            # The spin before this one was not seen whole (or spins went by unseen):
            # its rotor direction is unknown, so alternation cannot be judged.
            if self._last_whole_spin is not None:
                self.counters.spins_missed += 1
            out.append(AlternationUnknown(tick))
        self._game_spin = status.spin
        self._game_seen_whole = True
        self._game_display = None
        self._previous_numbers = {
            frame.win
            for frame in (previous, status)
            if frame is not None and frame.spin == status.spin and frame.win is not None
        }
        self._published = None
        self._game_direction = launch.ball_direction
        self._flag_since.clear()
        self._last_pass_ms = None
        self._bonus = {}
        out.append(launch)
        if not self._flags_void(status, tick, out):
            self._in_game(status, tick, out)

    def _end_game(self, *, whole: bool) -> None:
        if whole and self._game_spin is not None:
            self._last_whole_spin = self._game_spin
        else:
            self._last_whole_spin = None
        self._game_spin = None
        self._game_display = None
        self._state_5_frames = 0
        self._run_number, self._run_length = None, 0
        self._flag_since.clear()

    def _track_flags(self, status: Status, tick: int) -> None:
        for flag in FLAG_BITS:
            if status.flags & flag:
                self._flag_since.setdefault(flag, tick)
            else:
                self._flag_since.pop(flag, None)

    def _flags_void(self, status: Status, tick: int, out: list[WheelEvent]) -> bool:
        """Void the game for a warning flag, as the maker prescribes; True if voided."""
        self._track_flags(status, tick)
        held: dict[FlagRole, tuple[int, int]] = {}
        for flag, since in self._flag_since.items():
            role = self.flag_table.role(flag)
            if role is not None:
                held[role] = (flag, (tick - since) & _TICK_MASK)
        reason: tuple[ReasonCode, str] | None = None
        for role in _ROLE_ORDER:
            if role in held:
                reason = self._flag_reason(role, *held[role], status.state)
                if reason is not None:
                    break
        if reason is None:
            return False
        out.append(self._void_event(tick, *reason))
        self._game_over(None, reason[1], tick, out)
        self._end_game(whole=False)
        return True

    def _flag_reason(
        self, role: FlagRole, flag: int, held_ms: int, state: int
    ) -> tuple[ReasonCode, str] | None:
        """The void a warning flag held ``held_ms`` in ``state`` stands for, if any."""
        if role == "same_direction" and state == 3:
            return "ball_same_direction", f"flag {flag} in state 3"
        if role == "sensor_fault":
            return "rotor_malfunction", f"flag {flag}: sensor, motor or encoder fault"
        if role == "void_game":
            return "rotor_malfunction", f"flag {flag}: the wheel voids the game"
        if role == "launch_failed" and state == 3 and held_ms >= LAUNCH_FAILED_GRACE_MS:
            return "rotor_malfunction", f"flag {flag}: launch failed for 3 s"
        if role == "ball_missing" and state == 4 and held_ms >= BALL_MISSING_GRACE_MS:
            return "ball_out_of_wheel", f"flag {flag}: ball not detected for 5 s"
        return None

    def _integrate_rotor(
        self, status: Status, gap: int | None, tick: int, out: list[WheelEvent]
    ) -> None:
        """One RotorDatum per whole turn, integrated from the reported speed."""
        if gap is None or gap > MAX_INTEGRATION_MS or status.speed == 0:
            return
        rpm = status.speed / 10
        self._rotor_turns += rpm * gap / 60_000
        while self._rotor_turns >= 1.0:
            self._rotor_turns -= 1.0
            out.append(RotorDatum(0, tick, status.direction, round(60_000 / rpm)))

    def _sensor_pass(self, sensor: bytes, tick: int, out: list[WheelEvent]) -> None:
        if not self._sensor_streaming and self.output_level is not None:
            self._sensor_streaming = True
            self._profile(self.output_level, tick, out)  # revolutions are wheeld's now
        self._sensor_streaming = True
        if self._reference_sensor is None:
            self._reference_sensor = sensor
        if sensor != self._reference_sensor or self._game_spin is None:
            return
        if self._game_direction is None:
            return
        # Between two passes of the reference sensor the ball turned once: the
        # first pass of a game only starts the count.
        last, self._last_pass_ms = self._last_pass_ms, tick
        if last is not None:
            period = max(1, (tick - last) & _TICK_MASK)
            out.append(BallPassed(0, tick, self._game_direction, period))


# -- host to wheel ------------------------------------------------------------------


def encode_command(command: str) -> bytes:
    """A command line for the wheel (``*u 1``, ``*R``, ``*X``, ``*I 4`` ...)."""
    if not command.startswith("*") or any(c in command for c in "\r\n"):
        raise ValueError(f"not an SS2 command: {command!r}")
    return command.encode("ascii") + b"\r\n"


def encode_status(status: Status) -> bytes:
    """The status frame a wheel sends (used by the simulator and tests)."""
    win = "  " if status.win is None else status.win.rjust(2)
    direction = "0" if status.direction == "cw" else "1"
    return (
        f"*X;{status.state};{status.spin:03d};{win};{status.flags:X};"
        f"{status.speed:03d};{direction}\r\n"
    ).encode("ascii")
