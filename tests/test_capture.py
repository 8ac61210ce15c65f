"""The capture format: escapes, comments, records; reading and recording captures."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheeld.core.capture import (
    CUT_MARK,
    FORMAT_LINE,
    Capture,
    CaptureError,
    CaptureLine,
    escape,
    format_line,
    parse,
    read,
    unescape,
)
from wheeld.core.framing import CUT_BYTES
from wheeld.shell.capture_writer import CaptureWriter


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


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "f.cap"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    return path


HEADER = f"{FORMAT_LINE}\n# driver: wrp\n"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ("253402300800.000 < x", "past the year 9999"),
        ("9" * 400 + " < x", "past the year 9999"),
        ("-1.000 < x", "not a capture line"),
        ("nan < x", "not a capture line"),
        ("inf < x", "not a capture line"),
    ],
)
def test_an_impossible_time_names_file_and_line(tmp_path: Path, record: str, reason: str) -> None:
    path = _write(tmp_path, HEADER + "1.000 < a\n" + record + "\n2.000 < b\n")
    with pytest.raises(CaptureError, match=rf"^{path}:4: .*{reason}"):
        read(path)


def test_the_last_moment_of_year_9999_is_a_time() -> None:
    (item,) = parse(["253402300799.999 < x\n"], "f.cap")
    assert item == CaptureLine(253402300799.999, "<", b"x")


_RECORDS = "".join(format_line(1758005089.5 + i, "<", b"$WRHBT,%d*00\r" % i) for i in range(3))


@given(st.integers(1, len(_RECORDS) - 1))
def test_a_last_line_cut_anywhere_is_skipped_with_a_warning(cut: int) -> None:
    # What `run --capture` leaves when it is killed mid-write.
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder), HEADER + _RECORDS[:cut])
        capture = read(path)
    whole = _RECORDS[:cut].count("\n")
    assert capture.lines == list(parse(_RECORDS.splitlines(keepends=True)[:whole], "x"))
    if _RECORDS[cut - 1] == "\n":
        assert capture.warnings == []
    else:
        (warning,) = capture.warnings
        assert warning == f"{path}:{3 + whole}: last line has no line end (cut short): skipped"


def test_a_bad_line_before_the_last_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "1.0 < a\n1.0 <a\n2.0 < b")
    with pytest.raises(CaptureError, match=rf"^{path}:4: not a capture line"):
        read(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file, not a wheeld capture"),
        ("1.000 < $WRHBT\n", "1: not a wheeld capture (the first line must be"),
        ("# driver: wrp\n", "1: not a wheeld capture"),
        ("# wheeld-capture 2\n", "1: capture format '2'; this wheeld reads format 1 only"),
        ("# wheeld-capt", "1: not a wheeld capture"),
    ],
)
def test_a_file_that_is_no_capture_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CaptureError) as caught:
        read(path)
    assert str(caught.value) == f"{path}: {message}" or str(caught.value).startswith(
        f"{path}:{message}"
    )


def test_a_header_alone_is_an_empty_capture(tmp_path: Path) -> None:
    assert read(_write(tmp_path, FORMAT_LINE)) == Capture(None, [], [])


def test_an_endless_line_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "1.0 < " + "x" * 10_000_000 + "\n")
    with pytest.raises(CaptureError, match=rf"^{path}:3: line over 65,536 characters"):
        read(path)


def test_a_capture_of_a_device_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"^/dev/zero:1: "):
        read(Path("/dev/zero"))
    with pytest.raises(CaptureError, match="cannot read capture"):
        read(tmp_path)


# -- recording: CaptureWriter -------------------------------------------------


def test_a_line_with_no_end_is_written_in_marked_pieces(tmp_path: Path) -> None:
    # Its cost, linear in the line's length, is measured by ``benchmarks.capture``.
    path = tmp_path / "r.cap"
    writer = CaptureWriter(path, "wrp")
    chunk = b"$WR\xff\x00\x13noise;" * 85  # line noise, a third of it escaped
    for _ in range(1024):
        writer.received(chunk, 1.0)
    writer.received(b"$WRHBT\r\n", 2.0)
    writer.close()
    capture = read(path)
    assert capture.warnings == []
    assert b"".join(line.data for line in capture.lines) == chunk * 1024 + b"$WRHBT"
    assert max(len(line.data) for line in capture.lines) == CUT_BYTES
    assert writer.cut_lines >= len(chunk) * 1024 // CUT_BYTES
    assert path.read_text().count(CUT_MARK) == writer.cut_lines


def test_a_long_line_with_its_end_is_cut_too(tmp_path: Path) -> None:
    path = tmp_path / "r.cap"
    writer = CaptureWriter(path, "wrp")
    writer.received(b"x" * (CUT_BYTES + 1) + b"\r\n$WR", 1.0)
    writer.sent(b"$WRQRY,0,0*5F\r\n", 1.5)
    writer.close()
    assert [(line.direction, line.data) for line in read(path).lines] == [
        ("<", b"x" * CUT_BYTES),
        ("<", b"x"),
        (">", b"$WRQRY,0,0*5F"),
        ("<", b"$WR"),
    ]
    assert writer.cut_lines == 2


def test_a_line_unfinished_at_close_keeps_the_time_its_bytes_came(tmp_path: Path) -> None:
    path = tmp_path / "r.cap"
    writer = CaptureWriter(path, "wrp")
    writer.received(b"$WRHBT\r\n$WR", 5.0)
    writer.received(b"BEAT", 7.25)
    writer.close()
    assert [(line.at, line.data) for line in read(path).lines] == [
        (5.0, b"$WRHBT"),
        (7.25, b"$WRBEAT"),
    ]


def test_appending_after_a_crash_drops_the_unfinished_line(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "1.000 < $WRHBT\n2.000 < $WRB")
    writer = CaptureWriter(path, "wrp")
    writer.received(b"$WRPOC\n", 3.0)
    writer.close()
    assert writer.dropped_bytes == len("2.000 < $WRB")
    capture = read(path)
    assert [line.data for line in capture.lines] == [b"$WRHBT", b"$WRPOC"]
    assert capture.warnings == []


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "not a capture", "no folder"])
def test_a_capture_target_that_cannot_be_one_is_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "r.cap"
    match kind:
        case "fifo":
            os.mkfifo(path)  # no reader: opening it for writing would wait forever
        case "directory":
            path.mkdir()
        case "device":
            path = Path("/dev/null")
        case "not a capture":
            path.write_text("precious notes\n")
        case "no folder":
            path = tmp_path / "nope" / "r.cap"
    with pytest.raises(OSError, match=rf"^--capture {path}: ") as caught:
        CaptureWriter(path, "wrp")
    assert "\n" not in str(caught.value)
    if kind == "not a capture":
        assert path.read_text() == "precious notes\n"


def test_a_capture_another_run_is_writing_is_refused_and_left_whole(tmp_path: Path) -> None:
    """Found on the first day: two runs given one --capture both wrote it, interleaving
    their wheels' lines into a capture that replays neither. The second is refused."""
    path = tmp_path / "r.cap"
    first = CaptureWriter(path, "wrp")
    first.received(b"$WRHBT,1", 1.0)  # a line in the making, its end not yet come
    with pytest.raises(OSError, match=rf"^--capture {path}: another wheeld is writing it"):
        CaptureWriter(path, "wrp")
    first.received(b",2*00\r\n", 1.1)
    first.close()
    assert [line.data for line in read(path).lines] == [b"$WRHBT,1,2*00"]
    second = CaptureWriter(path, "wrp")  # the first closed: the file is free again
    second.close()


def test_a_clock_step_comment_is_attached_to_the_next_line(tmp_path: Path) -> None:
    path = tmp_path / "step.cap"
    path.write_text(
        "# wheeld-capture 1\n# driver: wrp\n1.000 < A\n# clock-step: +20.000\n21.500 < B\n"
    )
    first, second = read(path).lines
    assert (first.clock_step, second.clock_step) == (0.0, 20.0)
    path.write_text("# wheeld-capture 1\n# clock-step: soon\n1.000 < A\n")
    with pytest.raises(CaptureError, match="2: clock-step 'soon'"):
        read(path)


def test_time_going_back_without_a_clock_step_comment_is_read_as_a_step_and_said(
    tmp_path: Path,
) -> None:
    """run writes a clock-step comment before a line whose time went back a second or
    more: a capture without one was edited or joined. Replayed as the step run would
    have seen (never as time running backwards through the rules), with a warning."""
    path = tmp_path / "back.cap"
    path.write_text(
        "# wheeld-capture 1\n# driver: wrp\n100.000 < A\n100.500 < B\n100.200 < C\n"
        "40.000 < D\n41.000 < E\n"
    )
    capture = read(path)
    assert [line.clock_step for line in capture.lines] == [0.0, 0.0, 0.0, -60.2, 0.0]
    (warning,) = capture.warnings
    assert warning == (
        f"{path}:6: time goes back 60.200 s with no clock-step comment before it:"
        " read as a step of the host's clock"
    )
    # A comment that says the step is the step: nothing to warn of.
    path.write_text("# wheeld-capture 1\n100.000 < A\n# clock-step: -60.000\n40.000 < B\n")
    capture = read(path)
    assert [line.clock_step for line in capture.lines] == [0.0, -60.0] and not capture.warnings


def test_time_going_back_past_what_a_clock_step_comment_said_is_read_as_the_rest_of_the_step(
    tmp_path: Path,
) -> None:
    path = tmp_path / "back.cap"
    path.write_text("# wheeld-capture 1\n100.000 < A\n# clock-step: +5.000\n50.000 < B\n")
    capture = read(path)
    assert [line.clock_step for line in capture.lines] == [0.0, -50.0]
    (warning,) = capture.warnings
    assert "time goes back 55.000 s with no clock-step comment" in warning
    path.write_text("# wheeld-capture 1\n200000000000.000 < A\n1.000 < B\n")
    with pytest.raises(CaptureError, match="3: time goes back 2e\\+11 s: not a clock's step"):
        read(path)
