"""The book of what is set: a fault or an alert, from the moment it is set until it clears.

A fault (the table's own health: the wheel's link, the journal, the cover, line
noise) and an alert (a statistical judgement: ``wheeld.table.alerts``) are both
set and later cleared, and an operator may acknowledge either while it is set.
The book keeps when each began, what it was set with and who acknowledged it,
and says each change as an :class:`Alarm` (the message): one when it is set,
one when it clears (with both ends), one when it is acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from wheeld.core.commands import CommandError
from wheeld.core.game import Alarm
from wheeld.core.messages import iso_utc


class Book:
    """Codes set now: since when, with what, acknowledged by whom."""

    def __init__(self) -> None:
        #: Code -> host time it was set.
        self.since: dict[str, float] = {}
        #: What each was set with (its detail), for a restart to keep.
        self.detail: dict[str, dict[str, Any]] = {}
        #: Code -> (operator, host time) for those an operator acknowledged.
        self.acknowledged: dict[str, tuple[str, float]] = {}

    def __contains__(self, code: object) -> bool:
        return code in self.since

    def __iter__(self) -> Iterator[str]:
        return iter(self.since)

    def __len__(self) -> int:
        return len(self.since)

    def set(self, code: str, now: float, **detail: Any) -> Alarm | None:
        """``code`` holds: the alarm that sets it, or None when it is set already."""
        if code in self.since:
            return None
        self.since[code] = now
        self.detail[code] = detail
        return Alarm(now, code, {"state": "set", "since": iso_utc(now), **detail})

    def clear(self, code: str, now: float, **detail: Any) -> Alarm | None:
        """``code`` no longer holds: the alarm that clears it, or None when it is not set."""
        since = self.since.pop(code, None)
        if since is None:
            return None
        self.detail.pop(code, None)
        self.acknowledged.pop(code, None)
        return Alarm(
            now,
            code,
            {
                "state": "clear",
                "since": iso_utc(since),
                "until": iso_utc(now),
                "duration_s": round(now - since, 3),
                **detail,
            },
        )

    def acknowledge(self, code: str, operator: str, now: float, *, known: str) -> Alarm:
        """An operator acknowledges ``code``; CommandError unless it is set and unacknowledged.

        ``known`` names what is set (in every book), for the refusal.
        """
        if code not in self.since:
            raise CommandError(f"no alert {code!r} is set (set: {known})")
        if code in self.acknowledged:
            by, at = self.acknowledged[code]
            raise CommandError(f"{code} already acknowledged by {by} at {iso_utc(at)}")
        self.acknowledged[code] = (operator, now)
        since = iso_utc(self.since[code])
        return Alarm(now, code, {"state": "acknowledged", "since": since, "operator": operator})

    def kept(self) -> dict[str, dict[str, Any]]:
        """What is set, as the journal keeps it for a restart (``set_alerts``)."""
        kept: dict[str, dict[str, Any]] = {}
        for code, since in sorted(self.since.items()):
            by, at = self.acknowledged.get(code, (None, None))
            kept[code] = {
                "since": since,
                "detail": self.detail.get(code, {}),
                "acknowledged_by": by,
                "acknowledged_at": at,
            }
        return kept

    def restore(self, code: str, stored: Mapping[str, Any]) -> bool:
        """Set ``code`` again as the last run left it (same since, same acknowledgement);
        False when its entry is unreadable (it is judged afresh)."""
        since = stored.get("since")
        if isinstance(since, bool) or not isinstance(since, int | float):
            return False
        self.since[code] = float(since)
        detail = stored.get("detail")
        self.detail[code] = dict(detail) if isinstance(detail, Mapping) else {}
        by, at = stored.get("acknowledged_by"), stored.get("acknowledged_at")
        if isinstance(by, str) and isinstance(at, int | float):
            self.acknowledged[code] = (by, float(at))
        return True
