"""The capture format, version 1: serial traffic as text, one line per line.

``<host time> <direction> <line>``, where ``<`` is from the wheel and ``>`` to
it; bytes outside printable ASCII, and the backslash, are written ``\\xNN``.
A line the wheel ran on for more than ``CUT_BYTES`` without a line end is
written in pieces (``wheeld.core.framing`` cuts them), each after a ``# cut:``
comment. A step of the host's
wall clock (seen by ``run`` against a monotonic clock) is a ``# clock-step:
+S`` comment before the next line: without it a gap in the times is silence.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from wheeld.core.framing import CUT_BYTES

FORMAT_LINE = "# wheeld-capture 1"
#: The comment written before each piece of a cut line.
CUT_MARK = f"# cut: the next line ran on past {CUT_BYTES} bytes without a line end\n"
#: The longest capture line read: a cut piece escaped (4 characters a byte),
#: its time and direction, with room for hand-edited files.
MAX_LINE_CHARS = 64 * 1024
#: The comment key that records a step of the host's wall clock, in seconds.
CLOCK_STEP_KEY = "clock-step"
#: A step larger than this (about 32 years) is a corrupt comment, not a clock.
MAX_CLOCK_STEP_S = 1e9
#: The host's wall clock moving this much unlike its monotonic clock has been stepped
#: (``run`` then writes a clock-step comment; smaller backward moves are a clock's jitter).
CLOCK_STEP_S = 1.0
#: 9999-12-31T23:59:59.999Z: the last time a payload's timestamp can show.
MAX_TIME = 253_402_300_799.999

_ESCAPE = re.compile(rb"[^\x20-\x5b\x5d-\x7e]")
_UNESCAPE = re.compile(rb"\\x([0-9A-Fa-f]{2})")
_RECORD = re.compile(r"(\d+(?:\.\d*)?) ([<>])(?: (.*))?")
#: Every byte as capture text, indexed by its value.
_ESCAPED = [
    chr(byte) if 0x20 <= byte <= 0x7E and byte != 0x5C else f"\\x{byte:02X}" for byte in range(256)
]


class CaptureError(Exception):
    """A capture that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class CaptureLine:
    """One line that crossed the link, without its terminator."""

    at: float
    direction: Literal["<", ">"]
    data: bytes
    #: The host's wall clock stepped by this many seconds just before this line
    #: (a ``# clock-step: +S`` comment, which ``run --capture`` writes when it sees one).
    clock_step: float = 0.0


@dataclass(frozen=True, slots=True)
class Capture:
    """A whole capture file: its header comments, its lines, and what was skipped."""

    driver: str | None
    lines: list[CaptureLine]
    #: One line each, naming file and line: what was read around, not refused.
    warnings: list[str] = field(default_factory=list)


def escape(data: bytes) -> str:
    """A line's bytes as capture text."""
    if _ESCAPE.search(data) is None:
        return data.decode("ascii")
    # One table lookup a byte: a regex callback a byte costs ten times more.
    return "".join(map(_ESCAPED.__getitem__, data))


def unescape(text: str) -> bytes:
    """Capture text back to the bytes that crossed the link."""
    raw = text.encode("utf-8", "surrogateescape")
    if b"\\" not in raw:
        return raw
    return _UNESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw)


def format_line(at: float, direction: Literal["<", ">"], data: bytes) -> str:
    """One capture line, with its newline."""
    return f"{at:.3f} {direction} {escape(data)}\n"


def _parse_line(raw: str, name: str, number: int) -> CaptureLine | tuple[str, str] | None:
    """A record, a ``(key, value)`` comment, or None for blank lines and other comments."""
    line = raw.rstrip("\r\n")
    if not line.strip():
        return None
    if line.startswith("#"):
        key, sep, value = line[1:].partition(":")
        return (key.strip().lower(), value.strip()) if sep else None
    match = _RECORD.fullmatch(line)
    if match is None:
        raise CaptureError(f"{name}:{number}: not a capture line (expected '<time> <|> <line>')")
    at_text, direction, text = match.groups()
    at = float(at_text)
    if not at <= MAX_TIME:
        raise CaptureError(f"{name}:{number}: time {at_text[:24]} is past the year 9999")
    return CaptureLine(at, direction, unescape(text or ""))  # type: ignore[arg-type]


def parse(lines: Iterable[str], name: str) -> Iterator[CaptureLine | tuple[str, str]]:
    """Capture lines, and ``(key, value)`` for ``# key: value`` comments."""
    for number, raw in enumerate(lines, start=1):
        item = _parse_line(raw, name, number)
        if item is not None:
            yield item


def epoch_of(path: Path) -> str:
    """The epoch a replay of the capture at ``path`` announces its games in.

    Made from the file's bytes, as a journal's is made at random: the same
    capture always replays in the same epoch, another capture in another.
    """
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 16):
                digest.update(chunk)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read capture: {exc.strerror or exc}") from None
    return base64.urlsafe_b64encode(digest.digest()[:12]).decode("ascii")


def read(path: Path) -> Capture:
    """Read a whole capture; raises CaptureError with a one-line reason.

    A last line without its line end, what a recording stopped mid-write
    leaves, is skipped with a warning; a bad line anywhere else is an error.
    """
    try:
        # utf-8-sig: an editor's or a Windows tool's byte order mark before the format
        # line is no reason to refuse a capture whose every line is right.
        with path.open(encoding="utf-8-sig", errors="surrogateescape") as handle:
            return _collect(handle, str(path))
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read capture: {exc.strerror or exc}") from None


def _collect(handle: TextIO, name: str) -> Capture:
    driver: str | None = None
    lines: list[CaptureLine] = []
    warnings: list[str] = []
    number = 0
    step = 0.0
    while raw := handle.readline(MAX_LINE_CHARS + 1):
        number += 1
        if len(raw) > MAX_LINE_CHARS:
            raise CaptureError(f"{name}:{number}: line over {MAX_LINE_CHARS:,} characters")
        if number == 1:
            _check_format(raw.rstrip("\r\n"), name)
            continue
        if not raw.endswith("\n"):
            if raw.strip():
                warnings.append(f"{name}:{number}: last line has no line end (cut short): skipped")
            break
        item = _parse_line(raw, name, number)
        if isinstance(item, CaptureLine):
            # Beyond any step a comment said (run writes one before such a line): this
            # capture was edited or joined. Read as the step run would have seen, said.
            unsaid = item.at - lines[-1].at - step if lines else 0.0
            if unsaid <= -CLOCK_STEP_S:
                if unsaid < -MAX_CLOCK_STEP_S:
                    raise CaptureError(
                        f"{name}:{number}: time goes back {-unsaid:.3g} s: not a clock's step"
                    )
                step += unsaid
                warnings.append(
                    f"{name}:{number}: time goes back {-unsaid:.3f} s with no clock-step"
                    " comment before it: read as a step of the host's clock"
                )
            if step:
                item = CaptureLine(item.at, item.direction, item.data, step)
                step = 0.0
            lines.append(item)
        elif item is not None and item[0] == "driver":
            driver = item[1]
        elif item is not None and item[0] == CLOCK_STEP_KEY:
            step += _clock_step(item[1], name, number)
    if number == 0:
        raise CaptureError(f"{name}: empty file, not a wheeld capture")
    return Capture(driver, lines, warnings)


def _clock_step(value: str, name: str, number: int) -> float:
    try:
        step = float(value)
    except ValueError:
        step = math.nan
    if not abs(step) <= MAX_CLOCK_STEP_S:
        raise CaptureError(f"{name}:{number}: clock-step {value[:24]!r} is not a number of seconds")
    return step


def clock_step_comment(step_s: float) -> str:
    """The comment line that records a step of the host's wall clock."""
    return f"# {CLOCK_STEP_KEY}: {step_s:+.3f}\n"


def _check_format(first: str, name: str) -> None:
    if first == FORMAT_LINE:
        return
    version = first.removeprefix("# wheeld-capture").strip()
    if version != first.strip() and version:
        raise CaptureError(
            f"{name}:1: capture format {version[:20]!r}; this wheeld reads format 1 only"
        )
    raise CaptureError(f"{name}:1: not a wheeld capture (the first line must be '{FORMAT_LINE}')")
