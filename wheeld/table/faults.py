"""The table's own faults: its health, set and later cleared (the book keeps them).

A fault is the table's own health, not a judgement of the figures (those are
alerts, ``wheeld.table.alerts``): the wheel's link lost, the journal
unwritable, the wheel's cover open, line noise on the link. Line noise is
judged here, over the last minute, against ``[alerts]``'s
``line_noise_bytes_per_minute``.
"""

from __future__ import annotations

from pydantic import Field

from wheeld.core.game import Alarm
from wheeld.core.noise import NoiseMeter
from wheeld.table.book import Book
from wheeld.table.keys import AlertKeys

WHEEL_LINK_LOST = "wheel_link_lost"
JOURNAL_UNWRITABLE = "journal_unwritable"
COVER_OPEN = "cover_open"
LINE_NOISE = "line_noise"


class LineNoiseKeys(AlertKeys):
    line_noise_bytes_per_minute: int = Field(
        default=2048,
        ge=64,
        le=10_000_000,
        description="Bytes of line noise in a minute past which the `line_noise` fault is "
        "set. Lines that are no frame of the wheel's protocol; cleared under half of it. A "
        "minute of garbage at 9600 baud is 57,600 bytes; a healthy wheel sends a stray byte "
        "a day.",
    )


class LineNoise:
    """``line_noise``: set past the threshold over the last minute, cleared under half."""

    def __init__(self, keys: LineNoiseKeys) -> None:
        self.threshold = keys.line_noise_bytes_per_minute
        self._meter = NoiseMeter()

    def heard(self, now: float, size: int) -> None:
        """``size`` bytes of lines that made no frame, heard at host time ``now``."""
        self._meter.add(now, size)

    def judge(self, now: float, faults: Book) -> Alarm | None:
        """The fault set or cleared by the noise heard over the minute that ends ``now``."""
        heard = self._meter.in_window(now)
        if heard > self.threshold:
            return faults.set(LINE_NOISE, now, bytes_per_minute=heard)
        if heard <= self.threshold // 2:
            return faults.clear(LINE_NOISE, now)
        return None
