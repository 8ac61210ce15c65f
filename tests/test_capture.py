"""The capture format: escapes, comments, records."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheeld.capture import CaptureError, CaptureLine, escape, format_line, parse, unescape


@given(st.binary(max_size=200))
def test_escape_roundtrips_any_bytes(data: bytes) -> None:
    text = escape(data)
    assert text.isascii() and text.isprintable()
    assert unescape(text) == data


def test_backslash_and_controls_are_escaped() -> None:
    assert escape(b"a\\b\r\x00\xff") == "a\\x5Cb\\x0D\\x00\\xFF"


def test_records_and_comments_parse() -> None:
    text = (
        "# wheeld-capture 1\n# driver: cammegh-ss2\n\n"
        "1758005089.517 > *u 1\n1758005089.541 < *u OK\n1758005090 <\n1758005091.5 < \\x00x\n"
    )
    items = list(parse(iter(io.StringIO(text)), "t.cap"))
    assert ("driver", "cammegh-ss2") in items
    lines = [i for i in items if isinstance(i, CaptureLine)]
    assert lines == [
        CaptureLine(1758005089.517, ">", b"*u 1"),
        CaptureLine(1758005089.541, "<", b"*u OK"),
        CaptureLine(1758005090.0, "<", b""),
        CaptureLine(1758005091.5, "<", b"\x00x"),
    ]


def test_format_line_is_what_parse_reads() -> None:
    line = format_line(1.5, "<", b"$WRHBT\r")
    assert line == "1.500 < $WRHBT\\x0D\n"
    (item,) = parse(iter([line]), "x")
    assert item == CaptureLine(1.5, "<", b"$WRHBT\r")


@pytest.mark.parametrize("bad", ["12:00 < x", "1.0 * x", "< x", "1.0<x"])
def test_a_bad_line_names_file_and_line(bad: str) -> None:
    with pytest.raises(CaptureError, match=r"^f\.cap:2: "):
        list(parse(iter(["# c\n", bad + "\n"]), "f.cap"))
