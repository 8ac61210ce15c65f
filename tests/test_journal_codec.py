"""How the journal stores payloads and blocks of serial lines: lossless, whatever they hold."""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from wheeld.shell.journal.codec import (
    BLOCK_FORMAT,
    BlockLine,
    decode_block,
    encode_block,
    pack_payload,
    unpack_payload,
)

CAPTURES = Path(__file__).parent / "captures"
# Capture text: printable ASCII (anything else is written \xNN before it is journaled).
capture_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60)
lines = st.lists(
    st.builds(
        BlockLine,
        st.integers(min_value=0, max_value=10**13),
        st.sampled_from(["<", ">"]),
        st.one_of(
            capture_text,
            st.from_regex(r"\$WR[A-Z]{3},[0-9]{1,6},[0-9]{1,9}\*[0-9A-F]{2}", fullmatch=True),
        ),
    ),
    max_size=80,
)


@given(lines)
@settings(max_examples=300)
def test_any_lines_come_back_as_they_went_in(block: list[BlockLine]) -> None:
    assert decode_block(encode_block(block)) == block


def _encoded_a_line_at_a_time(block: list[BlockLine]) -> bytes:
    """The format as first written: a record a line against the last line of its shape.
    Every block a journal holds was encoded so: ``encode_block`` must write the same bytes
    (the hash chain covers them)."""
    number = re.compile(r"(0|[1-9][0-9]{0,14})")
    shapes: dict[tuple[str, str, int], tuple[int, list[str]]] = {}
    records, before = [], 0
    for line in block:
        parts = number.split(line.line)
        key = (line.dir, parts[0], len(parts))
        if key not in shapes:
            shapes[key] = (len(shapes), parts)
            body = "=" + line.line
        else:
            shape, last = shapes[key]
            shapes[key] = (shape, parts)
            fields = [f"~{shape}"]
            for index in range(1, len(parts)):
                new, old = parts[index], last[index]
                if index % 2:
                    fields.append(str(int(new) - int(old)))
                else:
                    fields.append("" if new == old else "|" + new)
            body = "\x1f".join(fields)
        records.append(f"{line.t_ms - before}{line.dir}{body}")
        before = line.t_ms
    return BLOCK_FORMAT + zlib.compress("\n".join(records).encode("ascii"), 9)


@given(lines)
@settings(max_examples=300)
def test_a_block_is_encoded_byte_for_byte_as_it_always_was(block: list[BlockLine]) -> None:
    assert encode_block(block) == _encoded_a_line_at_a_time(block)


@given(lines, st.integers(min_value=0, max_value=40))
@settings(max_examples=200)
def test_skipped_lines_are_read_but_not_returned(block: list[BlockLine], skip: int) -> None:
    """Recall and export skip a game block's lead: what follows is the same lines."""
    assert decode_block(encode_block(block), skip) == block[skip:]


@given(st.binary(max_size=200))
def test_anything_else_is_refused_in_one_line(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        decode_block(data)


@given(st.text(max_size=300).map(lambda text: text.encode("utf-8", "replace").decode()))
def test_payloads_come_back_as_they_went_in(text: str) -> None:
    assert unpack_payload(pack_payload(text)) == text
    assert unpack_payload(text) == text  # an older wheeld's row, stored as text


def test_a_block_that_does_not_decode_is_a_value_error() -> None:
    bad = BLOCK_FORMAT + zlib.compress(b"12<~9\x1f3")  # a change against a shape never seen
    try:
        decode_block(bad)
    except ValueError as exc:
        assert "malformed" in str(exc) or "shape" in str(exc)
    else:
        raise AssertionError("decoded a block that names a shape it never had")


def test_heartbeats_cost_a_few_bytes_a_line() -> None:
    """The reason for the encoding: a wheel's traffic at a few bytes a line, not forty."""
    capture = CAPTURES / "wrp" / "normal-games.cap"
    block = []
    for raw in capture.read_text().splitlines():
        if raw.startswith("#"):
            continue
        at, direction, line = raw.split(" ", 2)
        block.append(BlockLine(round(float(at) * 1000), direction, line))  # type: ignore[arg-type]
    stored = encode_block(block)
    assert decode_block(stored) == block
    assert len(stored) / len(block) < 6  # about 4 bytes a line; a row a line took ~130


def test_game_messages_are_stored_in_about_half_their_size() -> None:
    signed = CAPTURES / "signed" / "normal-games.expected.jsonl"
    texts = signed.read_text().splitlines()
    for text in texts:
        assert json.loads(unpack_payload(pack_payload(text))) == json.loads(text)
    stored = sum(len(pack_payload(text)) for text in texts)
    assert stored < 0.6 * sum(len(text) for text in texts)  # the signature is half of it
