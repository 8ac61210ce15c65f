"""The repository stands on its own: its files point at nothing outside it, and
the protocol page's test vectors are what the decoder reads and writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wheeld.drivers.wrp import WrpDecoder, checksum, encode_event, encode_query

ROOT = Path(__file__).parent.parent

# Built from pieces so that this file does not match its own patterns.
_OUTSIDE = "shared"
OUTSIDE_REFERENCES = (f"{_OUTSIDE}/spec", f"../{_OUTSIDE}", f"{_OUTSIDE}/captures")

#: Git's own test for a binary file: a NUL byte near the start.
_BINARY_SNIFF = 8000


def _repository_files() -> list[Path]:
    """Tracked files, and new ones not yet added (so a reference fails before commit)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(
        [git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    names = sorted({name for name in listing.decode().split("\0") if name})
    # A tracked file deleted in the working tree has nothing left to check.
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def test_no_file_points_outside_the_repository() -> None:
    offenders: list[str] = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data[:_BINARY_SNIFF]:
            continue
        text = data.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            found = [pattern for pattern in OUTSIDE_REFERENCES if pattern in line]
            if found:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {', '.join(found)}")
    assert not offenders, "files that point outside the repository:\n" + "\n".join(offenders)


def _documented_vectors() -> list[str]:
    """The frames in the first code block under "## Test vectors" of docs/wrp.md."""
    text = (ROOT / "docs" / "wrp.md").read_text(encoding="utf-8")
    section = text.split("## Test vectors", 1)[1]
    block = section.split("```", 2)[1]
    return [line for line in block.splitlines() if line.startswith("$")]


def test_wrp_page_lists_test_vectors() -> None:
    assert len(_documented_vectors()) >= 9


@pytest.mark.parametrize("frame", _documented_vectors())
def test_documented_vector_is_what_wheeld_reads_and_writes(frame: str) -> None:
    body, digits = frame[1:].split("*")
    assert checksum(body.encode("ascii")) == int(digits, 16)
    wire = f"{frame}\r\n".encode("ascii")
    if body.startswith("WRQRY,"):
        # The host's sentence: what wheeld sends, never what a wheel says.
        assert encode_query() == wire
        return
    decoder = WrpDecoder()
    events = decoder.feed(wire)
    assert len(events) == 1, events
    assert decoder.counters.frames == 1
    assert encode_event(events[0]) == wire
