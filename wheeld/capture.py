"""The capture format, version 1: serial traffic as text, one line per line.

``<host time> <direction> <line>``, where ``<`` is from the wheel and ``>`` to
it; bytes outside printable ASCII, and the backslash, are written ``\\xNN``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

FORMAT_LINE = "# wheeld-capture 1"
_ESCAPE = re.compile(rb"[^\x20-\x5b\x5d-\x7e]")
_UNESCAPE = re.compile(rb"\\x([0-9A-Fa-f]{2})")
_RECORD = re.compile(r"(\d+(?:\.\d*)?) ([<>])(?: (.*))?")


class CaptureError(Exception):
    """A capture that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class CaptureLine:
    """One line that crossed the link, without its terminator."""

    at: float
    direction: Literal["<", ">"]
    data: bytes


@dataclass(frozen=True, slots=True)
class Capture:
    """A whole capture file: its header comments and its lines."""

    driver: str | None
    lines: list[CaptureLine]


def escape(data: bytes) -> str:
    """A line's bytes as capture text."""
    return _ESCAPE.sub(lambda m: b"\\x%02X" % m.group()[0], data).decode("ascii")


def unescape(text: str) -> bytes:
    """Capture text back to the bytes that crossed the link."""
    raw = text.encode("utf-8", "surrogateescape")
    if b"\\" not in raw:
        return raw
    return _UNESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw)


def format_line(at: float, direction: Literal["<", ">"], data: bytes) -> str:
    """One capture line, with its newline."""
    return f"{at:.3f} {direction} {escape(data)}\n"


def parse(lines: Iterator[str], name: str) -> Iterator[CaptureLine | tuple[str, str]]:
    """Capture lines, and ``(key, value)`` for ``# key: value`` comments."""
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                yield key.strip().lower(), value.strip()
            continue
        match = _RECORD.fullmatch(line)
        if match is None:
            raise CaptureError(
                f"{name}:{number}: not a capture line (expected '<time> <|> <line>')"
            )
        at, direction, text = match.groups()
        yield CaptureLine(float(at), direction, unescape(text or ""))  # type: ignore[arg-type]


def read(path: Path) -> Capture:
    """Read a whole capture; raises CaptureError with a one-line reason."""
    try:
        with path.open(encoding="utf-8", errors="surrogateescape") as handle:
            return _collect(handle, str(path))
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read capture: {exc.strerror or exc}") from None


def _collect(handle: TextIO, name: str) -> Capture:
    driver: str | None = None
    lines: list[CaptureLine] = []
    for item in parse(iter(handle), name):
        if isinstance(item, CaptureLine):
            lines.append(item)
        elif item[0] == "driver":
            driver = item[1]
    return Capture(driver, lines)
