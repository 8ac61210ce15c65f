"""The archive's own alarms as the ledger raises them: one of a code and table at most
once a minute (those held back counted in the next), a gap's events (found, filled,
given up) every time. Pure: the time is the message's."""

from __future__ import annotations

from typing import Any

from wheeld.archive.records import ALARM_EVERY_S, ArchiveAlarm, Outcome


class Alarms:
    """When the same alarm of the same table was last raised, and how many since held back."""

    def __init__(self) -> None:
        self._last_alarm: dict[tuple[str, str | None], tuple[float, int]] = {}

    def alarm(self, out: Outcome, code: str, table: str | None, at: float, **details: Any) -> None:
        """An alarm, at most one of a code and table a minute; those held back are counted
        in the next."""
        last, held = self._last_alarm.get((code, table), (float("-inf"), 0))
        # A clock set back is no reason to hold alarms back until it catches up.
        if 0 <= at - last < ALARM_EVERY_S:
            self._last_alarm[(code, table)] = (last, held + 1)
            return
        if held:
            details["held_back"] = held
        self._last_alarm[(code, table)] = (at, 0)
        out.alarms.append(ArchiveAlarm(code, table, at, tuple(details.items())))

    def event(self, out: Outcome, code: str, table: str, at: float, **details: Any) -> None:
        """An alarm that is never held back (each gap's: found, filled, given up)."""
        out.alarms.append(ArchiveAlarm(code, table, at, tuple(details.items())))
