"""Any byte stream, split at any points: what both Cammegh decoders are held to.

``streams(lines)`` draws a stream of known lines (with every terminator) and raw
bytes, and cut points; ``split`` cuts it. A decoder fed the pieces must give the
same events and counters as fed the whole.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from wheeld.core.events import WheelEvent

TERMINATORS = [b"\r\n", b"\n\r", b"\r", b"\n", b""]


def streams(lines: list[bytes]) -> st.SearchStrategy[tuple[bytes, list[int]]]:
    """A stream made of ``lines`` and noise, and up to twelve cut points."""
    stream = st.lists(
        st.one_of(
            st.binary(max_size=30),
            st.tuples(st.sampled_from(lines), st.sampled_from(TERMINATORS)).map(b"".join),
        ),
        max_size=40,
    ).map(b"".join)
    return st.tuples(stream, st.lists(st.integers(0, 5000), max_size=12))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (taken modulo its length)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


class Feeder:
    """Feeds pieces to a fresh decoder; the events and the counters it ends with."""

    def __init__(self, decoder: Callable[[], object]) -> None:
        self._decoder = decoder

    def __call__(self, pieces: list[bytes]) -> tuple[list[WheelEvent], dict[str, int]]:
        decoder = self._decoder()
        out: list[WheelEvent] = []
        for piece in pieces:
            out += decoder.feed(piece, 5.0)  # type: ignore[attr-defined]
        return out, decoder.counters.as_dict()  # type: ignore[attr-defined]
