"""The SS2's own records, read while it is closed: its winning-number log and statistics.

Sans-I/O. Live control asks (``*w``, ``*W``, ``*s t``, then ``*s r <page>`` for the
newest pages) when the wheel enters state 6; the decoder hands each reply here,
and once the last page asked for is in, one :class:`WheelRecords` goes to the
pipeline: the logged games (held against the results wheeld published:
``wheel_log_mismatch``) and the wheel's chi-squared (published beside wheeld's on
``<base>/stats``). Formats the guide leaves open are assumptions, each written
in this distribution's README ("The wheel's own records").
"""

from __future__ import annotations

import re
from typing import Protocol

from wheeld.core.events import LoggedGame, WheelRecords

#: A log page: 256 values, each offset by 0x21 (0-37 winning numbers, 38-75 misfires).
PAGE_SIZE = 256
LOG_OFFSET = 0x21
MISFIRE_BASE = 38
LAST_VALUE = 75
#: The newest pages read at once: 512 games, more than the history wheeld keeps.
PAGES_READ = 2
#: The longest ``*s r`` reply line: the page, its number and the checksum.
MAX_PAGE_LINE = 300

_PAGE = re.compile(r"r ?(\d{1,5}) (.{256})([0-9A-Fa-f]{2})", re.DOTALL)
_PAGE_BARE = re.compile(r"r ?(.{256})([0-9A-Fa-f]{2})", re.DOTALL)
_PAGES = re.compile(r"t ?(\d{1,5})")
_NUMBER = r"\d+(?:\.\d+)?"
_CHI_SQUARED = re.compile(rf"({_NUMBER})(?:[ ;,]+({_NUMBER})%?)?")
_COUNTS = re.compile(r"\d+(?:[ ;,]+\d+)*")


def pocket_name(value: int) -> str:
    """A log value's pocket (0-37) as the status frames write it: 37 is ``00``."""
    return "00" if value == 37 else str(value)


def page_checksum(data: bytes) -> int:
    """The page's modulo-256 checksum: the sum of its 256 bytes as sent."""
    return sum(data) % 256


def encode_page(page: int, values: list[int | None]) -> bytes:
    """A ``*s r`` reply line (no terminator): ``None`` an empty slot (a space)."""
    data = bytes(0x20 if v is None else v + LOG_OFFSET for v in values)
    data = data.ljust(PAGE_SIZE, b" ")[:PAGE_SIZE]
    return b"*s r %d %s%02X" % (page, data, page_checksum(data))


class WheelLogCounters(Protocol):
    """The decoder's counters this reader adds to (published on ``<base>/wheel``)."""

    log_reads: int
    log_pages: int
    #: Pages whose checksum did not hold (asked once more, then read without).
    log_pages_bad: int
    #: Replies to a log command that could not be read.
    log_replies_malformed: int


class WheelLogReader:
    """Follows one read of the wheel's records, reply by reply."""

    def __init__(self, counters: WheelLogCounters) -> None:
        self.counters = counters
        #: The pages the read in progress still waits for (newest last).
        self.pages_wanted: list[int] = []
        self._pages: dict[int, bytes] = {}
        self._retried: set[int] = set()
        self._figures: dict[str, object] = {}
        self._requests: list[str] = []
        self._reading = False
        #: The games the wheel had logged at the last read, so the next judges only new ones.
        self._logged_at_last_read: int | None = None

    def begin(self) -> list[str]:
        """A read starts: the commands that open it."""
        self._start()
        return ["*w", "*W", "*s t"]

    def _start(self) -> None:
        self._reading = True
        self.pages_wanted = []
        self._pages = {}
        self._retried = set()
        self._figures = {}
        self._requests = []

    def take_requests(self) -> list[str]:
        """Commands the replies so far call for (the pages to read, a bad page again)."""
        requests, self._requests = self._requests, []
        return requests

    def on_reply(self, letter: str, text: str, tick: int) -> WheelRecords | None:
        """A reply to ``*w``, ``*W`` or ``*s``: the records, once the last page is in."""
        if text.startswith(("BUSY", "NO", "OK")):
            return None
        if not self._reading:
            if letter == "w" or (letter == "s" and _PAGES.fullmatch(text.strip())):
                # Another host asked, or a capture is replayed (no session sends there):
                # a reply is the wheel's word whoever asked, so the read is followed.
                self._start()
            else:
                return None
        if letter == "w":
            self._chi_squared(text)
        elif letter == "W":
            self._counts(text)
        elif letter == "s":
            return self._log_reply(text, tick)
        return None

    def _chi_squared(self, text: str) -> None:
        match = _CHI_SQUARED.fullmatch(text.strip())
        if match is None:
            self.counters.log_replies_malformed += 1
            return
        value, percent = match.groups()
        self._figures["chi_squared"] = {
            "value": float(value),
            "percent": None if percent is None else float(percent),
        }

    def _counts(self, text: str) -> None:
        # The table of winning numbers: read for its shape only (not published: the
        # guide gives no layout to name its columns by).
        if _COUNTS.fullmatch(text.strip()) is None:
            self.counters.log_replies_malformed += 1

    def _log_reply(self, text: str, tick: int) -> WheelRecords | None:
        if match := _PAGES.fullmatch(text.strip()):
            total = int(match.group(1))
            self._pages, self._retried = {}, set()
            self.pages_wanted = list(range(max(0, total - PAGES_READ), total))
            self._requests += [f"*s r {page}" for page in self.pages_wanted]
            return self._done(tick) if not self.pages_wanted else None
        page, data, checksum = self._page(text)
        if data is None or checksum is None:
            self.counters.log_replies_malformed += 1
            return None
        if page is None:
            # No page number echoed: the oldest still wanted (one is asked at a time).
            missing = [p for p in self.pages_wanted if p not in self._pages]
            page = missing[0] if missing else None
        if page is None or page not in self.pages_wanted:
            self.counters.log_replies_malformed += 1
            return None
        raw = data.encode("latin-1")
        if page_checksum(raw) != int(checksum, 16):
            self.counters.log_pages_bad += 1
            if page in self._retried:
                self.pages_wanted.remove(page)  # twice bad: read without it
            else:
                self._retried.add(page)
                self._requests.append(f"*s r {page}")
                return None
        else:
            self.counters.log_pages += 1
            self._pages[page] = raw
        if all(p in self._pages for p in self.pages_wanted):
            return self._done(tick)
        return None

    @staticmethod
    def _page(text: str) -> tuple[int | None, str | None, str | None]:
        text = text.rstrip("\r\n")
        if match := _PAGE.fullmatch(text):
            return int(match.group(1)), match.group(2), match.group(3)
        if match := _PAGE_BARE.fullmatch(text):
            return None, match.group(1), match.group(2)
        return None, None, None

    def _done(self, tick: int) -> WheelRecords:
        self._reading = False
        self.counters.log_reads += 1
        games: list[LoggedGame] = []
        for page in sorted(self._pages):
            for slot, byte in enumerate(self._pages[page]):
                value = byte - LOG_OFFSET
                if not 0 <= value <= LAST_VALUE:
                    continue  # an empty slot
                record: dict[str, object] = {"page": page, "slot": slot}
                if value >= MISFIRE_BASE:
                    record["misfire"] = pocket_name(value - MISFIRE_BASE)
                    games.append(LoggedGame(None, record))
                else:
                    games.append(LoggedGame(pocket_name(value), record))
        logged = self._logged(games)
        before, self._logged_at_last_read = self._logged_at_last_read, logged
        judged_from = 0
        if before is not None and logged >= before:
            judged_from = max(0, len(games) - (logged - before))
        return WheelRecords(tick, tuple(games), judged_from, dict(self._figures))

    def _logged(self, games: list[LoggedGame]) -> int:
        """Every game the wheel has logged: the full pages before those read, and these."""
        first = min(self._pages, default=0)
        return first * PAGE_SIZE + len(games)
