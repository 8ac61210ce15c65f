"""A driver's session as the table drives it: connect, events, decisions, timers, deadline.

``TableSession`` hands the session each of the table's moments (the port up
or down, a wheel event, decisions made, a timer) and collects what comes back:
bytes for the wheel, and what the session says besides bytes, as alarms. A
table with no session has one that does nothing, so the pipeline never asks.

A session (``wheeld.drivers.DriverSession``) keeps the commands the wheel
never answered in ``unanswered``, and may keep alarms of its own in ``alarms``
(the Cammegh SS2's wheel clock). Those lists are the session's: they are read
here, each entry said once as an alarm, and never emptied from outside.
"""

from __future__ import annotations

from typing import Any, TypeVar

from wheeld.core.events import Direction, WheelEvent
from wheeld.core.game import Alarm, Decision
from wheeld.drivers import DriverSession, GreetingSession
from wheeld.table.decisions import Recorder
from wheeld.table.effects import Effects

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


class TableSession:
    """The driver's session (if it has one) told of the table's moments; its bytes
    and alarms into the ``Effects`` at hand, its alarms decided by ``record``."""

    def __init__(self, session: DriverSession | None, record: Recorder) -> None:
        self.session = session
        #: The session told of every line, decision and timer: none for one that only
        #: greets (``GreetingSession``, a WRP/1 head's ``QRY``), which answers them all with
        #: nothing and raises nothing, so asking it would cost every line for nothing.
        self._listening = None if type(session) is GreetingSession else session
        self._record = record
        self._alarms = None if self._listening is None else SessionAlarms(self._listening)

    def connect(self, now: float, last_rotor: Direction | None, out: Effects) -> None:
        """The port opened: what the session sends first (it may want the last result's
        rotor direction, as a Cammegh SS2 picking the next spin's does)."""
        if self.session is None:
            return
        on_last_result = getattr(self.session, "on_last_result", None)
        if on_last_result is not None:
            on_last_result(last_rotor)
        out.writes += self.session.on_connect(now)
        self._said(now, out)

    def disconnect(self, now: float) -> None:
        """The port went away: nothing the session sent is answered now."""
        if self.session is not None:
            self.session.on_disconnect(now)

    def event(self, event: WheelEvent, now: float, out: Effects) -> None:
        """A wheel event the engine judged."""
        if self._listening is not None:
            out.writes += self._listening.on_event(event, now)

    def decided(self, decisions: list[Decision], now: float, out: Effects) -> None:
        """What the table decided after a read; what the session gave up on said."""
        if self._listening is not None:
            out.writes += self._listening.after_decisions(decisions, now)
            self._said(now, out)

    def after_decisions(self, decisions: list[Decision], now: float, out: Effects) -> None:
        """An operator's decisions: the session told, nothing else said yet."""
        if self._listening is not None:
            out.writes += self._listening.after_decisions(decisions, now)

    def timer(self, now: float, out: Effects) -> None:
        """The session's deadline came."""
        if self._listening is not None:
            out.writes += self._listening.on_timer(now)
            self._said(now, out)

    def deadline(self) -> float | None:
        """When the session next wants ``timer``, if it does."""
        return None if self._listening is None else self._listening.next_deadline()

    def _said(self, now: float, out: Effects) -> None:
        """Commands the session gave up on, and alarms of its own: each raised once."""
        if self._alarms is not None and (alarms := self._alarms.take(now)):
            self._record.decide(alarms, out)
