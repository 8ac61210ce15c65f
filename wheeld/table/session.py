"""What a driver's session says besides bytes: commands it gave up on, alarms of its own.

A session (``wheeld.drivers.DriverSession``) keeps the commands the wheel
never answered in ``unanswered``, and may keep alarms of its own in ``alarms``
(the Cammegh SS2's wheel clock). Those lists are the session's: they are read
here, each entry said once as an alarm, and never emptied from outside.
"""

from __future__ import annotations

from typing import Any, TypeVar

from wheeld.core.game import Alarm, Decision
from wheeld.drivers import DriverSession

_Said = TypeVar("_Said")


class SessionAlarms:
    """Reads a session's lists, remembering how much of each was said already."""

    def __init__(self, session: DriverSession) -> None:
        self.session = session
        self._said = (0, 0)

    def take(self, now: float) -> list[Decision]:
        """The alarms for what the session added since last asked, in order."""
        unanswered = self.session.unanswered
        raised: list[tuple[str, dict[str, Any]]] = getattr(self.session, "alarms", [])
        said_unanswered, said_raised = self._said
        if len(unanswered) == said_unanswered and len(raised) == said_raised:
            return []  # nothing new (asked after every line from the wheel)
        self._said = (len(unanswered), len(raised))
        alarms: list[Decision] = [
            Alarm(now, "wheel_not_answering", {"command": silent})
            for silent in _fresh(unanswered, said_unanswered)
        ]
        alarms += [Alarm(now, code, detail) for code, detail in _fresh(raised, said_raised)]
        return alarms


def _fresh(items: list[_Said], said: int) -> list[_Said]:
    """What was added to ``items`` since ``said`` of them were read (a list started
    afresh is read from its start)."""
    return items[said:] if said <= len(items) else items
