"""WRP/1, the reference wheel reader protocol: a sans-I/O decoder and encoder.

Bytes go in, in any chunking; wheel events come out. The decoder never raises on
input: anything it cannot use is counted and skipped, and it resynchronises on
the next ``$`` (see ``docs/wrp.md``).

Framing decisions depend only on the bytes, never on how they were split: a
frame candidate runs from ``$`` to the first LF or the next ``$``, whichever
comes first, and is judged once that end (or the 82-byte limit) is in view
(``wheeld.core.framing`` cuts the candidates, as it cuts every line in wheeld).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from wheeld.core.events import (
    BallPassed,
    Direction,
    FrameDropped,
    Heartbeat,
    IncidentCode,
    PocketReading,
    RotorDatum,
    SequenceGap,
    WheelEvent,
    WheelHello,
    WheelIncident,
)
from wheeld.core.framing import LineSplitter
from wheeld.drivers import CounterSet, Driver, GreetingSession, WheelDecoder

#: A whole frame, ``$`` to LF, is at most this many bytes.
MAX_FRAME = 82
_SEQ_MOD = 1 << 16


def frame_splitter() -> LineSplitter:
    """WRP/1's framing: a candidate runs from ``$`` to LF (or the next ``$``), 82 bytes at most."""
    return LineSplitter(ends=b"\n", start=b"$", limit=MAX_FRAME - 1)


_TICK_MAX = (1 << 32) - 1

_HEX_PAIRS = {f"{i:02X}".encode(): i for i in range(256)}
#: The common sentences in their usual shape, fields captured in one C call:
#: body, type, seq, tick, first field, second field, checksum digits.
_USUAL_FRAME = re.compile(
    rb"\$(WR(HBT|ROT|BAL|POC|EVT),(\d{1,5}),(\d{1,10})(?:,([A-Z0-9_-]{1,12})(?:,(\d{1,10}))?)?)"
    rb"\*([0-9A-F]{2})"
)
#: The same, ``$`` to LF: a whole frame of the usual shape, matched in the stream
#: itself when no candidate is open (what the splitter would cut there, exactly).
_WHOLE_FRAME = re.compile(_USUAL_FRAME.pattern + rb"\r?\n")
_DIRECTION_BYTES: dict[bytes, Direction] = {b"CW": "cw", b"CCW": "ccw"}
_PRINTABLE = bytes(range(0x20, 0x7F))
_DIRECTIONS: dict[str, Direction] = {"CW": "cw", "CCW": "ccw"}
_DIRECTION_WIRE = {"cw": "CW", "ccw": "CCW"}
_INCIDENTS: dict[str, IncidentCode] = {
    "LAUNCH": "launch",
    "OBJECT": "object",
    "BALL_OUT": "ball_out",
    "ROTOR_FAULT": "rotor_fault",
    "SENSOR_FAULT": "sensor_fault",
    "COVER_OPEN": "cover_open",
    "COVER_CLOSED": "cover_closed",
}


class _Malformed(Exception):
    """A checksum-valid frame whose fields do not make sense."""


class _UnknownIncident(Exception):
    """An ``EVT`` code this decoder does not know: ignored, as the spec says."""


@dataclass(slots=True)
class DecoderCounters(CounterSet):
    """What the decoder has seen since it started; published with the wheel state."""

    frames: int = 0
    bad_checksum: int = 0
    garbage_bytes: int = 0
    overlong_lines: int = 0
    malformed: int = 0
    unknown_types: int = 0
    unknown_events: int = 0
    sequence_gaps: int = 0
    frames_lost: int = 0


def checksum(body: bytes) -> int:
    """XOR of every byte between ``$`` and ``*`` (at most 80 of them)."""
    # Folding the body as one integer takes a handful of C-level operations
    # instead of a Python step per byte: halves are XORed down to 64 bits,
    # then the eight bytes of that word into one.
    value = int.from_bytes(body, "little")
    value ^= value >> 512
    value ^= value >> 256
    value ^= value >> 128
    value ^= value >> 64
    value &= 0xFFFF_FFFF_FFFF_FFFF
    value ^= value >> 32
    value ^= value >> 16
    value ^= value >> 8
    return value & 0xFF


# Each parser takes the frame's fields after the tick (``parts[3:]``, not sliced)
# and raises _Malformed on anything it cannot read. ``str.isdigit`` keeps out
# signs, spaces and underscores that ``int()`` would accept; the body is ASCII.


def _hello(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    if len(parts) != 7 or not parts[3].isdigit():
        raise _Malformed
    pockets = int(parts[3])
    # A count past the protocol's largest number is out of range like any other: it
    # reached a signed pockets_unsupported alarm, which RFC 8785 cannot encode past 2^53.
    if pockets > _TICK_MAX:
        raise _Malformed
    return WheelHello(seq, tick, pockets, parts[4], parts[5], parts[6])


def _heartbeat(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    if len(parts) != 3:
        raise _Malformed
    return Heartbeat(seq, tick)


def _direction_and_period(parts: list[str]) -> tuple[Direction, int]:
    """The ``dir,period_ms`` fields that ROT and BAL share."""
    direction = _DIRECTIONS.get(parts[3]) if len(parts) == 5 else None
    text = parts[-1]
    period = int(text) if text.isdigit() else -1
    if direction is None or not 0 <= period <= _TICK_MAX:
        raise _Malformed
    return direction, period


def _rotor(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    return RotorDatum(seq, tick, *_direction_and_period(parts))


def _ball(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    return BallPassed(seq, tick, *_direction_and_period(parts))


def _pocket(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    if len(parts) != 4 or not parts[3]:
        raise _Malformed
    # Any non-empty reading passes: whether the wheel has that pocket is a game
    # rule (invalid_pocket), not a framing question.
    pocket = parts[3]
    return PocketReading(seq, tick, None if pocket == "-" else pocket)


def _incident(seq: int, tick: int, parts: list[str]) -> WheelEvent:
    if len(parts) != 4:
        raise _Malformed
    code = _INCIDENTS.get(parts[3])
    if code is None:
        raise _UnknownIncident
    return WheelIncident(seq, tick, code)


_INCIDENT_BYTES = {code.encode(): name for code, name in _INCIDENTS.items()}

_SENTENCES: dict[str, Callable[[int, int, list[str]], WheelEvent]] = {
    "WRHEL": _hello,
    "WRHBT": _heartbeat,
    "WRROT": _rotor,
    "WRBAL": _ball,
    "WRPOC": _pocket,
    "WREVT": _incident,
}


class WrpDecoder:
    """Incremental WRP/1 decoder: ``feed(bytes)`` returns the events completed so far."""

    __slots__ = ("_frames", "_last_seq", "_running_on", "counters")
    #: WRP/1's HEL announces 37 or 38 pockets: any other count is pockets_unsupported
    #: (found by fuzzing: a HEL of 40, then POC 0000, published the result "0000").
    hello_pockets = (37, 38)

    def __init__(self) -> None:
        self._frames = frame_splitter()
        #: The candidate being read ran on past ``MAX_FRAME``: counted once, dropped whole.
        self._running_on = False
        self._last_seq: int | None = None
        self.counters = DecoderCounters()

    def feed(self, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        """Take bytes as they came off the link; return every event they complete.

        ``now`` is unused: WRP/1 carries the wheel's own clock in every frame.
        """
        out: list[WheelEvent] = []
        frames, usual = self._frames, self._usual
        whole = _WHOLE_FRAME.match
        pos, end = 0, len(data)
        split = False
        while pos < end:
            # Fast path: between candidates, whole frames of the usual shape are matched
            # in place by one regex in C each, without the splitter. Anything else (a
            # frame cut by the read, an unusual one, junk) goes the general way up to its
            # LF, after which the splitter is between candidates again.
            if frames.between_lines:
                while pos < end and (match := whole(data, pos)) is not None and usual(match, out):
                    pos = match.end()
                if pos == end:
                    break
            stop = data.find(b"\n", pos) + 1 or end
            self._lines(data[pos:stop], out)
            split = True
            pos = stop
        if split:  # junk is only ever counted by the splitter, and taken after every feed
            self.counters.garbage_bytes += frames.take_junk()
        return out

    def _lines(self, data: bytes, out: list[WheelEvent]) -> None:
        """The general way: the splitter's lines, each judged as a frame candidate."""
        counters = self.counters
        for line in self._frames.feed(data):
            if line.over or line.end != b"\n":
                # Past the limit, or cut short by a new '$': no frame, and resynchronised.
                if line.over and not self._running_on:
                    counters.overlong_lines += 1
                self._running_on = line.over and not line.end
                counters.garbage_bytes += line.size
                continue
            # A frame in its usual shape, matched whole by one regex in C; anything
            # unusual is judged field by field.
            match = _USUAL_FRAME.fullmatch(line.data)
            if match is None or not self._usual(match, out):
                self._judge(line.data, line.size, out)

    def _judge(self, line: bytes, size: int, out: list[WheelEvent]) -> None:
        wanted = _HEX_PAIRS.get(line[-2:]) if len(line) >= 4 and line[-3] == 0x2A else None
        body = line[1:-3]
        if wanted is None or body.translate(None, _PRINTABLE):
            self.counters.garbage_bytes += size
            return
        self._checked(body, wanted, out)

    def _usual(self, match: re.Match[bytes], out: list[WheelEvent]) -> bool:
        """Decode a frame of the usual shape; False (nothing done) if it is not one."""
        body, kind, seq_digits, tick_digits, first, second, digits = match.groups()
        seq, tick = int(seq_digits), int(tick_digits)
        if seq >= _SEQ_MOD or tick > _TICK_MAX:
            return False
        event: WheelEvent
        if second is not None:
            period = int(second)
            direction = _DIRECTION_BYTES.get(first)
            if direction is None or period > _TICK_MAX:
                return False
            if kind == b"BAL":
                event = BallPassed(seq, tick, direction, period)
            elif kind == b"ROT":
                event = RotorDatum(seq, tick, direction, period)
            else:
                return False
        elif kind == b"HBT" and first is None:
            event = Heartbeat(seq, tick)
        elif kind == b"POC" and first is not None:
            event = PocketReading(seq, tick, None if first == b"-" else first.decode())
        elif kind == b"EVT" and first in _INCIDENT_BYTES:
            event = WheelIncident(seq, tick, _INCIDENT_BYTES[first])
        else:
            return False
        if checksum(body) != _HEX_PAIRS[digits]:
            self.counters.bad_checksum += 1
            out.append(FrameDropped("bad_checksum"))
            return True
        last = self._last_seq
        self._last_seq = seq
        if last is not None and seq != (last + 1) % _SEQ_MOD:
            self._sequence_jump(last, seq, False, out)
        self.counters.frames += 1
        out.append(event)
        return True

    def _checked(self, body: bytes, wanted: int, out: list[WheelEvent]) -> None:
        """A well-formed frame's body and checksum: verify, parse, track the sequence."""
        counters = self.counters
        if checksum(body) != wanted:
            counters.bad_checksum += 1
            out.append(FrameDropped("bad_checksum"))
            return
        parts = body.decode("ascii").split(",")
        if len(parts) < 3:
            counters.malformed += 1
            out.append(FrameDropped("malformed"))
            return
        seq_text, tick_text = parts[1], parts[2]
        if not (seq_text.isdigit() and tick_text.isdigit()):
            counters.malformed += 1
            out.append(FrameDropped("malformed"))
            return
        seq, tick = int(seq_text), int(tick_text)
        if seq >= _SEQ_MOD or tick > _TICK_MAX:
            counters.malformed += 1
            out.append(FrameDropped("malformed"))
            return
        last = self._last_seq
        self._last_seq = seq
        if last is not None and seq != (last + 1) % _SEQ_MOD:
            self._sequence_jump(last, seq, parts[0] == "WRHEL", out)
        parse = _SENTENCES.get(parts[0])
        if parse is None:
            counters.unknown_types += 1
            return
        try:
            event = parse(seq, tick, parts)
        except _UnknownIncident:
            counters.unknown_events += 1
            return
        except _Malformed:
            counters.malformed += 1
            out.append(FrameDropped("malformed"))
            return
        counters.frames += 1
        out.append(event)

    def _sequence_jump(self, last: int, seq: int, hello: bool, out: list[WheelEvent]) -> None:
        if hello and seq == 0:
            return  # the head rebooted and restarted at 0
        expected = (last + 1) % _SEQ_MOD
        lost = (seq - expected) % _SEQ_MOD
        self.counters.sequence_gaps += 1
        self.counters.frames_lost += lost
        out.append(SequenceGap(expected, seq, lost))


def encode(sentence: str, seq: int, tick: int, *args: str) -> bytes:
    """One WRP/1 frame, ``$`` to CR LF, with its checksum."""
    body = ",".join((f"WR{sentence}", str(seq % _SEQ_MOD), str(tick & _TICK_MAX), *args))
    raw = body.encode("ascii")
    return b"$%s*%02X\r\n" % (raw, checksum(raw))


def encode_query() -> bytes:
    """The host's only sentence: ask the head to send ``HEL``."""
    return encode("QRY", 0, 0)


def encode_event(event: WheelEvent) -> bytes:
    """The frame a wheel sends for ``event`` (used by simulators and tests)."""
    match event:
        case WheelHello(seq, tick, pockets, model, firmware, serial):
            return encode("HEL", seq, tick, str(pockets), model, firmware, serial)
        case Heartbeat(seq, tick):
            return encode("HBT", seq, tick)
        case RotorDatum(seq, tick, direction, period):
            return encode("ROT", seq, tick, _DIRECTION_WIRE[direction], str(period))
        case BallPassed(seq, tick, direction, period):
            return encode("BAL", seq, tick, _DIRECTION_WIRE[direction], str(period))
        case PocketReading(seq, tick, pocket):
            return encode("POC", seq, tick, "-" if pocket is None else pocket)
        case WheelIncident(seq, tick, code):
            return encode("EVT", seq, tick, code.upper())
    raise ValueError(f"{type(event).__name__} is not sent by a wheel")


def _session(decoder: WheelDecoder, settings: object) -> GreetingSession:
    # WRP/1 heads take one sentence: QRY on connect, to learn pockets and identity.
    return GreetingSession(encode_query())


DRIVER = Driver(
    name="wrp",
    default_baudrate=115200,
    decoder=WrpDecoder,
    session=_session,
)
