"""A scripted wheel's timeline: lines stamped with host time that moves only when told."""

from __future__ import annotations

from typing import Any

from wheeld.core.capture import format_line

#: A Cammegh wheel's status period.
STATUS_EVERY_MS = 500


class Timeline:
    """``(host time, line)`` pairs; ``ms`` is how far the script has moved from ``start``."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ms = 0
        self.lines: list[tuple[float, bytes]] = []
        #: Lines the host sent, just before the wheel's line at each index.
        self.host_lines: dict[int, list[tuple[float, bytes]]] = {}

    def now(self) -> float:
        return round(self.start + self.ms / 1000, 3)

    def line(self, text: bytes) -> None:
        """Any line the wheel (or a noisy link) sends, now."""
        self.lines.append((self.now(), text))

    def host(self, text: bytes) -> None:
        """A command the host sends the wheel, now (a ``>`` line of the capture)."""
        self.host_lines.setdefault(len(self.lines), []).append((self.now(), text))

    def ask(self, command: bytes, reply: bytes) -> None:
        """The host asks, and the wheel answers 100 ms later."""
        self.host(command)
        self.ms += 100
        self.line(reply)

    def capture_line(self, index: int) -> str:
        """The wheel's line at ``index`` as the capture writes it, the host's before it."""
        at, text = self.lines[index]
        sent = "".join(format_line(t, ">", line) for t, line in self.host_lines.get(index, []))
        return sent + format_line(at, "<", text)

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
