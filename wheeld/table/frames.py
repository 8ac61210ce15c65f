"""The lines that crossed the link, as the journal keeps them (``FrameRecord``).

Every line from the wheel is journaled with the game it fell in; one that made
no frame of the wheel's protocol is noise, kept as a sample and measured for
the ``line_noise`` fault. Every line written to the wheel is journaled too.
Lines are cut by ``wheeld.core.framing``, as everywhere else.
"""

from __future__ import annotations

from wheeld.core.framing import LineSplitter, lines_of
from wheeld.core.game import Alarm
from wheeld.table.book import Book
from wheeld.table.effects import Effects, FrameRecord
from wheeld.table.faults import LINE_NOISE, LineNoise, LineNoiseKeys


class LinkLines:
    """One link's lines, both ways, into journal records."""

    def __init__(self, keys: LineNoiseKeys) -> None:
        self._from_wheel = LineSplitter()
        self.noise = LineNoise(keys)
        #: Noise bytes heard since the noise was last judged.
        self._noisy = 0

    def heard(self, data: bytes, now: float, game: int | None, noise: bool, out: Effects) -> None:
        """Bytes from the wheel: the lines they complete, in the game ``game``; ``noise``:
        they made no frame."""
        splitter = self._from_wheel
        whole = splitter.whole_line(data)
        lines = (whole,) if whole is not None else [line.data for line in splitter.feed(data)]
        for line in lines:
            out.frames.append(FrameRecord(now, "<", line, game, noise))
            if noise:
                self._noisy += len(line) + 1

    def judge_noise(self, now: float, faults: Book) -> Alarm | None:
        """``line_noise`` set or cleared, once bytes were heard (noise, or while it is set)."""
        noisy, self._noisy = self._noisy, 0
        if noisy:
            self.noise.heard(now, noisy)
        if noisy or LINE_NOISE in faults.since:  # asked after every read: the dict itself
            return self.noise.judge(now, faults)
        return None

    @staticmethod
    def written(out: Effects, now: float, game: int | None) -> Effects:
        """Every line ``out`` writes to the wheel goes to the journal too, with its game."""
        for data in out.writes:
            for line in lines_of(data):
                out.frames.append(FrameRecord(now, ">", line, game))
        return out
