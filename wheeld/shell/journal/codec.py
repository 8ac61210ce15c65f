"""How the journal stores what it keeps small: game payloads and blocks of serial lines. Pure.

A year of a table is some 550,000 games and, at 4 lines a second, a hundred
million serial lines; stored as they come (a row and a hash per line) that is
tens of gigabytes. Two encodings keep it near a kilobyte a game, both lossless,
so every recall is byte for byte what was published and heard (a payload is
hashed into its chain as published, a block as stored):

- **Payloads**: raw deflate against a fixed dictionary of the words every game
  message repeats (member names, events, colours, sectors). A row's payload is
  a ``bytes`` value starting with ``PAYLOAD_FORMAT``; a ``str`` is a payload
  stored as it was by an older wheeld, read as it is.
- **Frame blocks**: the lines of one game (or of the traffic between games) in
  one compressed value. Each line is written against the last line of the
  same shape (its text with the numbers taken out, from the same side of the
  link): numbers as differences, text only where it changed. A wheel's
  heartbeats — the same sentence with a counter, a timestamp and a checksum
  moving on — come down to a few bytes each, and runs of identical lines to
  almost nothing: the folding a heartbeat needs, with no driver's help.
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, count, islice, repeat
from operator import add, attrgetter, eq, getitem, itemgetter, sub
from typing import Any, Literal, cast

#: The first byte of a payload stored compressed: raw deflate with ``_PAYLOAD_WORDS``.
PAYLOAD_FORMAT = b"\x01"
#: The first byte of a frame block's stored value: the line encoding below, deflated.
BLOCK_FORMAT = b"\x01"

# What every <base>/game payload says, so a single message compresses like a long text.
# Changing it would make older rows unreadable: a new dictionary needs a new format byte.
_PAYLOAD_WORDS = (
    b'"sectors":["voisins","tiers","orphelins","jeu_zero"],"parity":"even","parity":"odd",'
    b'"half":"low","half":"high","color":"green","color":"black","color":"red","dozen":null,'
    b'"column":null,"revolutions":null,"rotor_direction":"ccw","ball_direction":"cw",'
    b'"rotor_direction":"cw","ball_direction":"ccw","reasons":["controller_restart"],'
    b'"note":null,"reason":"wheel_link_lost","event":"no_spin","event":"no_more_bets",'
    b'"event":"spinning","schema_version":1,"seq":1,"prev":null,"kid":"","sig":"",'
    b'{"event":"result","game_id":1,"table":"T1","epoch":"","ts":"2026-01-01T00:00:00.000Z",'
    b'"number":"0",'
)


def pack_payload(text: str) -> bytes:
    """A game payload as the journal stores it."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _PAYLOAD_WORDS)
    return PAYLOAD_FORMAT + packer.compress(text.encode("utf-8")) + packer.flush()


def unpack_payload(stored: str | bytes) -> str:
    """A stored payload as published; ValueError when it cannot be read."""
    if isinstance(stored, str):
        return stored  # an older wheeld's row, kept as it was
    if stored[:1] != PAYLOAD_FORMAT:
        raise ValueError("payload stored in an unknown format")
    try:
        unpacker = zlib.decompressobj(-15, _PAYLOAD_WORDS)
        data = unpacker.decompress(stored[1:]) + unpacker.flush()
        return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"payload does not decompress: {exc}") from None


Direction = Literal["<", ">"]


@dataclass(frozen=True, slots=True)
class BlockLine:
    """A line of a block: host time in milliseconds, direction, the line as capture text."""

    t_ms: int
    dir: Direction
    line: str


# A number as the line has it: "0", or digits without a leading zero, at most 15
# (so it is exact as a float too). "007" is three numbers: 0, 0 and 7.
_NUMBER = re.compile(r"(0|[1-9][0-9]{0,14})")
_FIELD = "\x1f"  # never in capture text, which is printable ASCII


def encode_block(lines: Iterable[BlockLine]) -> bytes:
    """Lines as a block's stored value.

    One record a line: the time since the line before (ms), the direction,
    then ``=`` and the line (a shape not seen before in the block: it takes
    the next shape number), or ``~``, the shape's number and the changes
    against the last line of that shape: each number's difference, each text
    part empty where it is unchanged, else ``|`` and the text.

    Written a shape at a time, as ``decode_columns`` reads: the differences
    and changes of a shape's lines are worked out column by column in C (a
    daemon seals a block a game, the history benchmark a million).
    """
    lines = list(lines)
    times = list(map(_T_MS, lines))
    directions = list(map(_DIR, lines))
    texts = list(map(_TEXT, lines))
    parts_of = list(map(_NUMBER.split, texts))
    # Each shape's lines (by index), shapes numbered in the order first seen.
    numbers: dict[tuple[str, str, int], int] = {}
    members: list[list[int]] = []
    for index, direction, parts in zip(count(), directions, parts_of):
        shape = (direction, parts[0], len(parts))
        number = numbers.get(shape)
        if number is None:
            numbers[shape] = len(members)
            members.append([index])
        else:
            members[number].append(index)
    bodies = [""] * len(lines)
    for number, indexes in enumerate(members):
        first = indexes[0]
        bodies[first] = "=" + texts[first]
        if len(indexes) == 1:
            continue
        columns = list(zip(*map(parts_of.__getitem__, indexes), strict=True))
        changes: list[Iterable[str]] = [repeat(f"~{number}", len(indexes) - 1)]
        for index in range(1, len(columns)):
            column = columns[index]
            if index % 2:  # a number: its difference from the one before
                values = list(map(int, column))
                changes.append(map(str, map(sub, values[1:], values[:-1])))
                continue
            new, old = column[1:], column[:-1]
            if new == old:  # text that never changes (most of it)
                changes.append(repeat("", len(new)))
            else:  # text: "" where unchanged, else "|" and the text
                marked = zip(map(add, repeat("|"), new), repeat(""))
                changes.append(map(getitem, marked, map(eq, new, old)))
        for index, body in zip(
            islice(indexes, 1, None), map(_FIELD.join, zip(*changes, strict=True)), strict=True
        ):
            bodies[index] = body
    deltas = map(str, map(sub, times, [0, *times]))
    records = map("".join, zip(deltas, directions, bodies, strict=True))
    return BLOCK_FORMAT + zlib.compress("\n".join(records).encode("ascii"), 9)


_T_MS = attrgetter("t_ms")
_DIR = attrgetter("dir")
_TEXT = attrgetter("line")


def decode_block(stored: bytes, skip: int = 0) -> list[BlockLine]:
    """A block's lines, but the first ``skip``; ValueError when the value cannot be read.

    A skipped line is still read (the lines after it are written against it),
    but not built: a game's block leads with the traffic before the game,
    most of its lines, which recall and export leave out.
    """
    times, directions, texts = decode_columns(stored, skip)
    return list(map(BlockLine, times, directions, texts))


# A record as ``encode_block`` writes it: time since the line before, direction, kind, body.
_LINE = re.compile(r"^(-?[0-9]+)([<>])([=~])(.*)$", re.MULTILINE)
#: Times past this (ms, either way) are no clock's: a block that has one is malformed.
_TIME_LIMIT = 1 << 63
_AFTER_MARK = itemgetter(slice(1, None))


def _later(before: str, change: str) -> str:
    return change or before


def decode_columns(stored: bytes, skip: int = 0) -> tuple[list[int], list[Direction], list[str]]:
    """A block's lines but the first ``skip``, as columns: times (ms), directions, lines.

    What ``decode_block`` returns without a ``BlockLine`` a line, for readers
    that format a hundred million of them (export). It works a shape at a
    time rather than a line at a time: the records are cut by one regular
    expression, each distinct change record is split once (a heartbeat's
    repeat often), and a shape's numbers are running sums and its text the
    last change, both computed column by column by ``itertools`` in C; only
    the lines past ``skip`` are made, each by one %-formatting.
    """
    if not isinstance(stored, bytes) or stored[:1] != BLOCK_FORMAT:
        raise ValueError("frame block stored in an unknown format")
    try:
        text = zlib.decompress(stored[1:]).decode("ascii")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"frame block does not decompress: {exc}") from None
    if not text:
        return [], [], []
    records = _LINE.findall(text)
    if len(records) != text.count("\n") + 1:
        raise ValueError("a record without its time and direction")
    deltas, directions, kinds, bodies = zip(*records, strict=True)
    try:
        times = list(accumulate(map(int, deltas)))
        if max(times) >= _TIME_LIMIT or min(times) <= -_TIME_LIMIT:
            raise ValueError("a time past any clock's")
        lines = _lines(kinds, bodies, skip)
    except (KeyError, IndexError) as exc:
        raise ValueError(f"frame block is malformed ({exc!r})") from None
    return times[skip:], cast(list[Direction], list(directions[skip:])), lines[skip:]


def _lines(kinds: Sequence[str], bodies: Sequence[str], skip: int) -> list[str]:
    """Each record's line (but the first ``skip``, left empty), shape by shape."""
    # Each shape's records (by index) and the changes of all but its first, in order.
    members: list[list[int]] = []
    changes: list[list[list[str]]] = []
    split: dict[str, tuple[int, list[str]]] = {}
    for index, kind, body in zip(count(), kinds, bodies):
        if kind == "=":
            members.append([index])
            changes.append([])
            continue
        known = split.get(body)
        if known is None:
            fields = body.split(_FIELD)
            known = split[body] = (int(fields[0]), fields)
        members[known[0]].append(index)
        changes[known[0]].append(known[1])
    lines = [""] * len(bodies)
    for indexes, rows in zip(members, changes, strict=True):
        first = bodies[indexes[0]]
        if not rows:  # a shape seen once: its line as written
            lines[indexes[0]] = first
            continue
        kept = bisect_left(indexes, skip)
        if kept == len(indexes):
            continue  # all of it skipped (the lead's only)
        parts = _NUMBER.split(first)
        columns = list(zip(*rows, strict=True))
        if len(columns) != len(parts):
            raise ValueError("a change record that does not fit its shape")
        # The shape as a %-template, its moving parts column by column: each line is then
        # one formatting of its values, with no string made for a number on its way.
        template = [parts[0].replace("%", "%%")]
        moving: list[Iterable[Any]] = []
        for index in range(1, len(parts)):
            column, start = columns[index], parts[index]
            if index % 2:  # a number: its differences summed
                template.append("%d")
                moving.append(accumulate(map(int, column), initial=int(start)))
            elif any(column):  # text: "" unchanged, else "|" and the text
                template.append("%s")
                moving.append(map(_AFTER_MARK, accumulate(column, _later, initial="|" + start)))
            else:
                template.append(start.replace("%", "%%"))
        made: Iterable[str]
        if moving:
            values: Iterator[tuple[Any, ...]] = zip(*moving, strict=True)
            made = map("".join(template).__mod__, islice(values, kept, None))
        else:
            made = repeat(first, len(indexes) - kept)
        for index, line in zip(indexes[kept:], made, strict=True):
            lines[index] = line
    return lines
