"""A scripted wheel's timeline: lines stamped with host time that moves only when told."""

from __future__ import annotations

from typing import Any

#: A Cammegh wheel's status period.
STATUS_EVERY_MS = 500


class Timeline:
    """``(host time, line)`` pairs; ``ms`` is how far the script has moved from ``start``."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ms = 0
        self.lines: list[tuple[float, bytes]] = []

    def now(self) -> float:
        return round(self.start + self.ms / 1000, 3)

    def line(self, text: bytes) -> None:
        """Any line the wheel (or a noisy link) sends, now."""
        self.lines.append((self.now(), text))

    def wire(self) -> bytes:
        """Every line as the wheel sends it, CR LF after each."""
        return b"".join(line + b"\r\n" for _, line in self.lines)


class StatusTimeline(Timeline):
    """A wheel that sends its ``status`` every 500 ms (the Cammegh ``*X`` frame)."""

    status: Any

    def send_status(self) -> None:
        raise NotImplementedError

    def run(self, ms: int, **changes: object) -> None:
        """Apply ``changes`` to the status, then send it every 500 ms for ``ms``."""
        for key, value in changes.items():
            setattr(self.status, key, value)
        for _ in range(max(1, ms // STATUS_EVERY_MS)):
            self.ms += STATUS_EVERY_MS
            self.send_status()
