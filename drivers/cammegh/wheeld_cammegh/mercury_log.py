"""The Mercury 360's own event log, read while the table is closed. Sans-I/O.

The game engine keeps a log of events; ``*E?`` answers how many entries it
holds, ``*EG`` the first game entry and ``*EN`` the next of that type, each as
``E <data>`` (``E None`` when there is no more). The guide gives no format for
``<data>``: the assumptions (README, "The Mercury's event log") are that game
entries come newest first and end with the game's winning number, written as
the bare line writes it. The session asks when the wheel enters state 6 (the
table closed); the decoder hands each reply here, and once the read ends one
:class:`WheelRecords` goes to the pipeline (``wheel_log_mismatch``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wheeld.core.events import LoggedGame, WheelEvent, WheelRecords, WheelReply
from wheeld.core.game import Decision
from wheeld_cammegh.wheel_log import WheelLogCounters

#: The most game entries read at once: more than the results wheeld remembers.
MAX_ENTRIES = 256
#: A game entry's winning number: its last field, as the bare line writes it.
_LAST_NUMBER = re.compile(r"(?:.*[ ;,])?(00|0?\d|[12]\d|3[0-6])")
_COUNT = re.compile(r"\d{1,6}")
#: The Mercury's closed table, the only time its log is read.
CLOSED_STATE = 6
REPLY_TIMEOUT_S = 1.0
RETRIES = 3


def game_number(data: str) -> str | None:
    """The winning number a game entry ends with (``07`` read as ``7``), or None."""
    match = _LAST_NUMBER.fullmatch(data.strip())
    if match is None:
        return None
    number = match.group(1)
    return number if number == "00" else str(int(number))


class MercuryLogReader:
    """Follows one read of the event log, reply by reply."""

    def __init__(self, counters: WheelLogCounters) -> None:
        self.counters = counters
        self._entries: list[LoggedGame] | None = None
        #: Entries the log held at the last read, so the next judges only new games.
        self._held_at_last_read: int | None = None
        self._held = 0

    @property
    def reading(self) -> bool:
        return self._entries is not None

    def on_reply(self, text: str, tick: int) -> WheelRecords | None:
        """An ``E`` reply: the records once the read ends (``E None`` or enough entries)."""
        text = text.strip()
        if self._entries is None:
            if _COUNT.fullmatch(text):
                # A count opens a read, whoever asked (a replayed capture has no session).
                self._entries, self._held = [], int(text)
            return None
        if text == "None":
            return self._done(tick)
        number = game_number(text)
        if number is None:
            self.counters.log_replies_malformed += 1
        self._entries.append(LoggedGame(number, {"entry": len(self._entries), "data": text}))
        return self._done(tick) if len(self._entries) >= MAX_ENTRIES else None

    def _done(self, tick: int) -> WheelRecords:
        newest_first = self._entries or []
        self._entries = None
        self.counters.log_reads += 1
        games = tuple(reversed(newest_first))
        before, self._held_at_last_read = self._held_at_last_read, self._held
        judged_from = 0
        if before is not None and self._held >= before:
            judged_from = max(0, len(games) - (self._held - before))
        return WheelRecords(tick, games, judged_from)


@dataclass(slots=True)
class _Asked:
    command: str
    at: float
    tries: int


class MercuryLogSession:
    """What wheeld says to a Mercury: ``*V`` on connect (if asked), and the event log
    read each time the table closes (if asked). One command in flight at a time."""

    def __init__(self, decoder: object, *, ask_version: bool, read_log: bool) -> None:
        self._decoder = decoder
        self._ask_version = ask_version
        self._read_log = read_log
        self._pending: _Asked | None = None
        self._closed = False
        self._reading = False
        self.unanswered: list[str] = []

    def on_connect(self, now: float) -> list[bytes]:
        self._pending, self._closed, self._reading = None, False, False
        return [b"*V\r\n"] if self._ask_version else []

    def on_disconnect(self, now: float) -> None:
        self._pending = None

    def _send(self, command: str, now: float) -> list[bytes]:
        self._pending = _Asked(command, now, 1)
        return [command.encode("ascii") + b"\r\n"]

    def on_event(self, event: WheelEvent, now: float) -> list[bytes]:
        if not isinstance(event, WheelReply) or event.command != "E" or not self._reading:
            return []
        asked, self._pending = self._pending, None
        if event.text.strip() == "None" or not self._log_reading():
            self._reading = False
            return []
        # After the count, the first game entry; after each entry, the next.
        return self._send("*EG" if asked is not None and asked.command == "*E?" else "*EN", now)

    def _log_reading(self) -> bool:
        log = getattr(self._decoder, "event_log", None)
        return isinstance(log, MercuryLogReader) and log.reading

    def after_decisions(self, decisions: list[Decision], now: float) -> list[bytes]:
        status = getattr(self._decoder, "last_status", None)
        closed = getattr(status, "state", None) == CLOSED_STATE
        opening = closed and not self._closed
        self._closed = closed
        if opening and self._read_log and not self._reading and self._pending is None:
            self._reading = True
            return self._send("*E?", now)
        return []

    def on_timer(self, now: float) -> list[bytes]:
        pending = self._pending
        if pending is None or now - pending.at < REPLY_TIMEOUT_S:
            return []
        if pending.tries >= RETRIES:
            self.unanswered.append(pending.command)
            self._pending, self._reading = None, False
            return []
        pending.tries += 1
        pending.at = now
        return [pending.command.encode("ascii") + b"\r\n"]

    def next_deadline(self) -> float | None:
        return None if self._pending is None else self._pending.at + REPLY_TIMEOUT_S
