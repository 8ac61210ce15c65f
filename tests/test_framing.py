"""The one line splitter: the same lines however the bytes were split, long ones cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheeld.core.framing import (
    CUT_BYTES,
    Line,
    LineSplitter,
    cut_after_line_ends,
    lines_of,
)

#: Streams rich in the bytes that matter (ends, CR, the start byte) and long runs.
_STREAMS = st.lists(
    st.one_of(
        st.sampled_from([b"\n", b"\r", b"\r\n", b"$", b"x"]),
        st.binary(max_size=12),
        st.integers(min_value=1, max_value=30).map(lambda n: b"y" * n),
    ),
    max_size=60,
).map(b"".join)
#: How a splitter is built: WRP/1's ($ to LF), the Cammegh's (CR or LF), the journal's.
_SHAPES = st.sampled_from(
    [
        {"ends": b"\n", "limit": 8},
        {"ends": b"\r\n", "limit": 5},
        {"ends": b"\n", "limit": 6, "start": b"$"},
        {"ends": b"\n"},
    ]
)


def _split(splitter: LineSplitter, data: bytes, cuts: list[int]) -> tuple[list[Line], int]:
    lines: list[Line] = []
    junk = 0
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        lines += splitter.feed(data[start:cut])
        junk += splitter.take_junk()
        start = max(start, cut)
    return lines, junk


@given(_STREAMS, st.lists(st.integers(min_value=0, max_value=400), max_size=12), _SHAPES)
def test_any_stream_split_anywhere_gives_the_same_lines(
    data: bytes, cuts: list[int], shape: dict[str, object]
) -> None:
    whole = LineSplitter(**shape)  # type: ignore[arg-type]
    split = LineSplitter(**shape)  # type: ignore[arg-type]
    assert _split(split, data, cuts) == _split(whole, data, [])
    assert split.partial == whole.partial


@given(_STREAMS, _SHAPES)
def test_every_byte_is_in_a_line_the_junk_or_the_partial_line(
    data: bytes, shape: dict[str, object]
) -> None:
    splitter = LineSplitter(**shape)  # type: ignore[arg-type]
    lines, junk = _split(splitter, data, [])
    assert sum(line.size for line in lines) + junk + len(splitter.partial) == len(data)


@given(_STREAMS, st.integers(min_value=1, max_value=9))
def test_no_piece_is_longer_than_the_limit_and_a_long_line_comes_whole_again(
    data: bytes, limit: int
) -> None:
    splitter = LineSplitter(ends=b"\n", limit=limit)
    lines = splitter.feed(data)
    assert all(len(line.data) <= limit for line in lines)
    joined: list[bytes] = []
    running = b""
    for line in lines:
        running += line.data
        if line.end:
            joined.append(running)
            running = b""
    expected = [piece.removesuffix(b"\r") for piece in data.split(b"\n")[:-1]]
    assert joined == expected


def test_an_overlong_line_is_cut_at_cut_bytes() -> None:
    splitter = LineSplitter()
    pieces = splitter.feed(b"x" * (CUT_BYTES * 2 + 10))
    assert [(len(p.data), p.end, p.over) for p in pieces] == [
        (CUT_BYTES, b"", True),
        (CUT_BYTES, b"", True),
    ]
    assert splitter.feed(b"\r\n") == [Line(b"x" * 10, 12, b"\n", True)]
    assert splitter.feed(b"ok\n") == [Line(b"ok", 3, b"\n", False)]


def test_a_start_byte_begins_a_candidate_and_cuts_the_last_one_short() -> None:
    splitter = LineSplitter(ends=b"\n", limit=81, start=b"$")
    assert splitter.feed(b"noise$AB$CD\r\n") == [
        Line(b"$AB", 3, b"$", False),
        Line(b"$CD", 5, b"\n", False),
    ]
    assert splitter.take_junk() == 5


def test_cr_or_lf_each_end_a_line_and_a_cr_before_lf_goes_with_it() -> None:
    assert [line.data for line in LineSplitter(ends=b"\r\n").feed(b"a\rb\r\n")] == [
        b"a",
        b"b",
        b"",
    ]
    assert [line.data for line in LineSplitter().feed(b"a\rb\r\n")] == [b"a\rb"]


def test_a_block_written_whole_is_its_lines() -> None:
    assert lines_of(b"$WRQRY,0,0*5F\r\n") == [b"$WRQRY,0,0*5F"]
    assert lines_of(b"*V\r\n*T\r\n") == [b"*V", b"*T"]


@given(st.binary(max_size=80))
def test_cut_after_line_ends_keeps_every_byte(data: bytes) -> None:
    segments = cut_after_line_ends(data)
    assert b"".join(segments) == data
    assert all(b"\n" not in segment[:-1] for segment in segments)


@given(_STREAMS, _STREAMS, _SHAPES)
def test_a_whole_line_read_alone_is_the_line_feed_gives(
    before: bytes, read: bytes, shape: dict[str, object]
) -> None:
    """``whole_line``, the short way, says what ``feed`` would, from any state, or nothing."""
    short = LineSplitter(**shape)  # type: ignore[arg-type]
    fed = LineSplitter(**shape)  # type: ignore[arg-type]
    short.feed(before)
    fed.feed(before)
    line = short.whole_line(read)
    lines = fed.feed(read)
    if line is not None:
        assert [(it.data, it.over) for it in lines] == [(line, False)]
        assert short.partial == fed.partial == b""
        assert short.between_lines == fed.between_lines


def test_the_usual_read_takes_the_short_way() -> None:
    assert LineSplitter().whole_line(b"$WRHBT,1,250*3A\r\n") == b"$WRHBT,1,250*3A"
    assert LineSplitter().whole_line(b"\n") == b""
    assert LineSplitter().whole_line(b"two\nlines\n") is None
    assert LineSplitter(limit=4).whole_line(b"12345\n") is None  # over the limit: pieces


@given(st.binary(max_size=80))
def test_cut_after_line_ends_agrees_with_splitting_at_each_lf(data: bytes) -> None:
    pieces = data.split(b"\n")
    expected = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1] or not expected:
        expected.append(pieces[-1])
    assert cut_after_line_ends(data) == expected


@pytest.mark.parametrize(
    "shape",
    [{"ends": b""}, {"limit": 0}, {"start": b"$$"}, {"ends": b"\n", "start": b"\n"}],
)
def test_a_splitter_that_cannot_split_is_refused(shape: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="line splitter"):
        LineSplitter(**shape)  # type: ignore[arg-type]


def test_between_lines_says_whether_a_line_is_open() -> None:
    frames = LineSplitter(ends=b"\n", start=b"$", limit=8)
    assert frames.between_lines
    frames.feed(b"junk$WR")
    assert not frames.between_lines
    frames.feed(b"X\n")
    assert frames.between_lines
    frames.feed(b"$123456789")  # past the limit: a piece handed over, the line runs on
    assert not frames.between_lines
    lines = LineSplitter()
    assert lines.between_lines
    lines.feed(b"a")
    assert not lines.between_lines
    lines.feed(b"\n")
    assert lines.between_lines
