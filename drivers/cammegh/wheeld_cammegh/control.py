"""Live control of a Cammegh SS2: which command to send, and when. Sans-I/O.

Fed the driver's events and the host time, it returns the command lines to
write and the next moment it wants to be woken. One command is in flight at a
time; each waits for its reply, is retried after a timeout a few times, and a
``BUSY`` reply means "later". Polls are never closer than the maker's 100 ms.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wheeld.core.events import Direction, WheelEvent, WheelReply
from wheeld_cammegh.decoder import Status, encode_command
from wheeld_cammegh.wheel_log import WheelLogReader

REPLY_TIMEOUT_S = 1.0
RETRIES = 3
BUSY_RETRY_S = 1.0
MIN_POLL_S = 0.1
AUTO_STATUS_BIT = 128
#: Closed/idle: the only state in which the wheel gives its log pages (``*s r``).
CLOSED_STATE = 6
MANUAL_START_BIT = 2
REVERSE_BIT = 1
#: ``*T g`` (firmware 2.52): the host picks each game's direction (``*u 1``/``*u 3``).
DIRECTION_CONTROL_OPTION = 16
#: A wheel clock further than this from the host's is said (and set, if asked).
CLOCK_TOLERANCE_S = 2.0
#: ``*d g HH:MM:SS - DD/MM/YY`` (the guide prints an en dash between the two).
_CLOCK = re.compile(r"g ?(\d\d):(\d\d):(\d\d)\D+(\d\d)/(\d\d)/(\d\d)\s*")


def wheel_clock(text: str) -> datetime | None:
    """The time a ``*d g`` reply gives (taken as UTC), or None when it is not one."""
    match = _CLOCK.fullmatch(text)
    if match is None:
        return None
    hour, minute, second, day, month, year = (int(part) for part in match.groups())
    try:
        return datetime(2000 + year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None


def clock_commands(now: float) -> list[str]:
    """``*d s <field> <value>`` for each field, 0 seconds to 5 year, to host time ``now``."""
    moment = datetime.fromtimestamp(now, UTC)
    fields = (moment.second, moment.minute, moment.hour, moment.day, moment.month)
    return [f"*d s {i} {v:02d}" for i, v in enumerate((*fields, moment.year % 100))]


@dataclass(frozen=True, slots=True)
class ControlSettings:
    """``[wheel.control]``: what wheeld does to the wheel, beyond listening."""

    operating_mode: int = 1159
    start_games: bool = True
    bets_open_s: float = 15.0
    sensor_events: bool = True
    poll_s: float = 0.5
    #: Firmware 2.52's game options (``*T g``), set on connect; None: not sent.
    game_options: int | None = None
    #: Read the wheel's clock (``*d g``) on connect and say when it is off the host's.
    check_clock: bool = False
    #: ... and set it (``*d s``) to the host's when it is.
    set_clock: bool = False
    #: Read the wheel's own records (``*w``, ``*W``, ``*s t``, ``*s r``) each time it closes.
    read_log: bool = False

    @property
    def picks_direction(self) -> bool:
        """Direction control: with mode bit 1 the wheel no longer alternates, wheeld does."""
        options = self.game_options or 0
        return bool(options & DIRECTION_CONTROL_OPTION and self.operating_mode & REVERSE_BIT)


@dataclass(slots=True)
class _Pending:
    command: str
    sent_at: float
    tries: int


class SS2Controller:
    """Decides the commands for a wheel wheeld controls."""

    def __init__(self, settings: ControlSettings, wheel_log: WheelLogReader | None = None) -> None:
        self.settings = settings
        #: Where the replies to the log commands are read (the decoder's).
        self.wheel_log = wheel_log
        self._queue: deque[str] = deque()
        self._pending: _Pending | None = None
        self._not_before = 0.0
        self._next_poll: float | None = None
        self._last_status: Status | None = None
        self._betting_since: float | None = None
        self._start_sent_for: int | None = None
        #: The rotor direction of the last result: the next game turns the other way.
        self.last_result: Direction | None = None
        self.unanswered: list[str] = []
        #: Alarms for the pipeline to raise: (code, members).
        self.alarms: list[tuple[str, dict[str, Any]]] = []

    @property
    def polling(self) -> bool:
        """Without automatic status (mode bit 128), wheeld polls ``*X``."""
        return not self.settings.operating_mode & AUTO_STATUS_BIT

    def on_connect(self, now: float) -> list[bytes]:
        """The port opened: set the mode, power on, ask for sensor events."""
        self._queue.clear()
        self._pending = None
        self._queue.append(f"*o {self.settings.operating_mode}")
        if self.settings.game_options is not None:
            self._queue.append(f"*T g {self.settings.game_options}")
        self._queue.append("*P 1")
        if self.settings.sensor_events:
            self._queue.append("*I 4")
        if self.settings.check_clock or self.settings.set_clock:
            self._queue.append("*d g")
        self._next_poll = now if self.polling else None
        return self.on_timer(now)

    def void(self, now: float) -> list[bytes]:
        """A game was voided: acknowledge it, so the wheel re-spins."""
        self._queue.append("*R")
        return self.on_timer(now)

    def on_status(self, status: Status, now: float) -> list[bytes]:
        """A status frame arrived (as a broadcast or as a poll's answer)."""
        if self._pending is not None and self._pending.command == "*X":
            self._pending = None
        previous, self._last_status = self._last_status, status
        closing = status.state == CLOSED_STATE and (
            previous is None or previous.state != CLOSED_STATE
        )
        if closing and self.settings.read_log and self.wheel_log is not None:
            # Idle or closed: the wheel's log is read now, never while a game runs.
            self._queue.extend(self.wheel_log.begin())
        if status.state in (3, 4, 5):
            self._start_sent_for = None  # the game started: the next start is a new one
        if status.state == 2 and not status.flags:
            if self._betting_since is None:
                self._betting_since = now
        else:
            self._betting_since = None
        return self.on_timer(now)

    def on_event(self, event: WheelEvent, now: float) -> list[bytes]:
        """A reply from the wheel settles the command in flight."""
        if not isinstance(event, WheelReply) or self._pending is None:
            return []
        if event.command != self._pending.command[1:2]:
            return []
        command = self._pending.command
        self._pending = None
        if event.text.startswith("BUSY"):
            self._queue.appendleft(command)
            self._not_before = now + BUSY_RETRY_S
        elif command == "*d g":
            self._judge_clock(event.text, now)
        elif command.startswith("*s") and self.wheel_log is not None:
            self._queue.extend(self.wheel_log.take_requests())
        return self.on_timer(now)

    def _judge_clock(self, text: str, now: float) -> None:
        """The wheel's clock against the host's: ``wheel_clock_off``, and set it if asked."""
        clock = wheel_clock(text)
        if clock is None:
            return
        offset = round(clock.timestamp() - now, 1)
        if abs(offset) <= CLOCK_TOLERANCE_S:
            return
        detail = {"wheel_time": clock.isoformat(), "offset_s": offset}
        self.alarms.append(("wheel_clock_off", detail))
        if self.settings.set_clock:
            self._queue.extend(clock_commands(now))

    def on_timer(self, now: float) -> list[bytes]:
        """Time passed: send what is due."""
        out: list[bytes] = []
        pending = self._pending
        if pending is not None and now - pending.sent_at >= REPLY_TIMEOUT_S:
            if pending.tries >= RETRIES:
                self.unanswered.append(pending.command)
                self._pending = None
            else:
                pending.tries += 1
                pending.sent_at = now
                out.append(encode_command(pending.command))
        self._maybe_start(now)
        if self._pending is None and now >= self._not_before:
            if self._queue:
                command = self._queue.popleft()
                self._pending = _Pending(command, now, 1)
                self._not_before = now + MIN_POLL_S
                out.append(encode_command(command))
            elif self._next_poll is not None and now >= self._next_poll:
                self._pending = _Pending("*X", now, RETRIES)  # a lost poll is not retried
                self._next_poll = now + max(MIN_POLL_S, self.settings.poll_s)
                self._not_before = now + MIN_POLL_S
                out.append(encode_command("*X"))
        return out

    def _maybe_start(self, now: float) -> None:
        status = self._last_status
        if (
            not self.settings.start_games
            or not self.settings.operating_mode & MANUAL_START_BIT
            or status is None
            or status.state != 2
            or self._betting_since is None
            or self._start_sent_for == status.spin
            or now - self._betting_since < self.settings.bets_open_s
        ):
            return
        self._start_sent_for = status.spin
        # With direction control, anticlockwise (*u 3) after a clockwise result, so no
        # game wheeld starts is ever void for direction_not_alternated.
        anticlockwise = self.settings.picks_direction and self.last_result == "cw"
        self._queue.append("*u 3" if anticlockwise else "*u 1")

    def next_deadline(self) -> float | None:
        """When ``on_timer`` next has something to do."""
        moments = []
        if self._pending is not None:
            moments.append(self._pending.sent_at + REPLY_TIMEOUT_S)
        if self._queue:
            moments.append(self._not_before)
        if self._next_poll is not None:
            moments.append(max(self._next_poll, self._not_before))
        status = self._last_status
        if (
            self.settings.start_games
            and self._betting_since is not None
            and status is not None
            and self._start_sent_for != status.spin
        ):
            moments.append(self._betting_since + self.settings.bets_open_s)
        return min(moments) if moments else None
