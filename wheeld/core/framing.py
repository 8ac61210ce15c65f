"""Framing: a byte stream cut into lines, the one line splitter of the whole project.

Every reader of the wheel's bytes (the drivers' decoders, the pipeline's frame
records, the capture) cuts them here, so all of them agree on where a line
ends however the reads were cut. A line ends at any of its ``ends`` bytes; one
ended by LF loses a CR before it. A line that runs on past ``limit`` bytes is
handed over in pieces of ``limit`` bytes as it comes, so garbage costs memory
in proportion to nothing; the last piece is what is left at its end.

With a ``start`` byte (WRP/1's ``$``) a line is a frame candidate: it begins at
that byte, bytes before it are junk (counted, never buffered), and another
start byte ends it early, cut short.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: The longest line a capture and the journal record whole; longer ones come in pieces.
CUT_BYTES = 4096
_CR = 0x0D


class Line(NamedTuple):
    """One line, or one piece of a line that ran on past the limit."""

    #: Its bytes, without its end (a line ended by LF without the CR before it).
    data: bytes
    #: The bytes of the stream it took: its end included, a start byte that cut it short not.
    size: int
    #: What ended it: an ``ends`` byte, the ``start`` byte (cut short), or ``b""`` (a piece
    #: of a line still running on).
    end: bytes
    #: A piece of a line longer than the limit (the last piece, ended, included).
    over: bool


class LineSplitter:
    """Bytes as they came off the link in; the lines (and pieces) they complete out.

    The same bytes give the same lines, split at any points.
    """

    def __init__(self, *, ends: bytes = b"\n", limit: int = CUT_BYTES, start: bytes = b"") -> None:
        if not ends or limit < 1 or len(start) > 1 or (start and start in ends):
            raise ValueError("a line splitter needs end bytes, a positive limit, one start byte")
        self._ends = ends
        self._limit = limit
        self._start = start
        stops = ends + start
        #: One C call finds the first of several stop bytes; a lone one needs no regex.
        self._stop = re.compile(b"[" + re.escape(stops) + b"]") if len(stops) > 1 else None
        self._partial = bytearray()
        #: The one byte that ends a line, for ``whole_line``: None with several, or a start byte.
        self._lone_end = ends if len(ends) == 1 and not start else None
        #: Within a line (always, without a start byte); with one, within a candidate.
        self._open = not start
        #: The line being read has run past the limit: its pieces are ``over``.
        self._over = False
        #: Bytes outside any line (before a start byte), counted since the last ``take_junk``.
        self._junk = 0

    @property
    def partial(self) -> bytes:
        """What has come of the line not ended yet."""
        return bytes(self._partial)

    @property
    def between_lines(self) -> bool:
        """No line is open: the next byte fed begins a line (or, with a start byte, is
        junk unless it is one). A caller that recognises a whole line itself may skip it
        here, and these lines are still the same however the bytes were cut."""
        return not self._partial and not self._over and (not self._start or not self._open)

    def whole_line(self, data: bytes) -> bytes | None:
        """The line ``data`` is, when it is one whole line and nothing else and no line is
        open: what ``feed`` would return for it, and the splitter left as ``feed`` would
        leave it. Else None (``feed`` then). A link read a line at a time takes this short
        way with every line: no list, no ``Line``."""
        end = self._lone_end
        last = len(data) - 1
        if end is None or self._partial or self._over or data.find(end) != last:
            return None
        if not 0 <= last <= self._limit:
            return None  # no line at all, or one that comes in pieces
        if end == b"\n" and last and data[last - 1] == _CR:
            return data[: last - 1]  # an LF's CR goes, as in ``feed``
        return data[:last]

    def take_junk(self) -> int:
        """Bytes that fell outside every line since last asked (only with a start byte)."""
        junk, self._junk = self._junk, 0
        return junk

    def feed(self, data: bytes) -> list[Line]:
        """The lines ``data`` completes, and the pieces of any that run on."""
        lines: list[Line] = []
        partial = self._partial
        start, limit, find_end = self._start, self._limit, self._find_end
        pos, end = 0, len(data)
        while pos < end:
            if not self._open:
                begin = data.find(start, pos)
                if begin < 0:
                    self._junk += end - pos
                    break
                self._junk += begin - pos
                pos = begin
                self._open = True
            cut = find_end(data, pos + 1 if start and not partial else pos)
            if not partial and 0 <= cut <= pos + limit:
                # The usual line, whole in ``data``: no copy through the partial line.
                ender = data[cut : cut + 1]
                if ender == start:  # cut short by the next candidate
                    lines.append(Line(data[pos:cut], cut - pos, ender, False))
                    pos = cut
                else:
                    crlf = ender == b"\n" and cut > pos and data[cut - 1] == _CR
                    lines.append(Line(data[pos : cut - crlf], cut + 1 - pos, ender, False))
                    pos = cut + 1
                self._open = not start
                continue
            if cut < 0:
                partial += data[pos:]
                pos = end
            else:
                partial += data[pos:cut]
                pos = cut if data[cut : cut + 1] == start else cut + 1
            while len(partial) > limit:
                lines.append(Line(bytes(partial[:limit]), limit, b"", True))
                del partial[:limit]
                self._over = True
            if cut >= 0:
                lines.append(self._ended(data[cut : cut + 1]))
        return lines

    def _find_end(self, data: bytes, pos: int) -> int:
        """Where the line open at ``pos`` ends in ``data`` (an end byte or a start byte), or -1."""
        if self._stop is None:
            return data.find(self._ends, pos)
        found = self._stop.search(data, pos)
        return -1 if found is None else found.start()

    def _ended(self, end: bytes) -> Line:
        partial = self._partial
        cut_short = end == self._start
        size = len(partial) + (0 if cut_short else 1)
        line = bytes(partial)
        if end == b"\n" and line.endswith(b"\r"):
            line = line[:-1]
        out = Line(line, size, end, self._over)
        partial.clear()
        self._over = False
        self._open = not self._start
        return out


def lines_of(block: bytes) -> list[bytes]:
    """The lines of a block written whole (what wheeld writes to the wheel): its last
    line's end optional, each without its end."""
    splitter = LineSplitter()
    return [line.data for line in splitter.feed(block.rstrip(b"\r\n") + b"\n")]


def cut_after_line_ends(data: bytes) -> list[bytes]:
    """``data`` cut after each LF, its bytes untouched: a decoder fed one line at a time
    lets each line's frame record name the game it fell in."""
    if data.find(b"\n") == len(data) - 1:
        return [data]  # the usual read: one line, or none ended (and no LF to cut at)
    pieces = data.split(b"\n")
    segments = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1] or not segments:
        segments.append(pieces[-1])
    return segments
