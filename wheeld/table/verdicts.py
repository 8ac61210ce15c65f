"""The wheel's word held against wheeld's: ``wheel_verdict_mismatch``, ``display_mismatch``
and ``result_contradicted``.

The wheel's display showing another number than the one wheeld published
(``DisplayMismatch``), or a number the wheel went back on (``ResultContradicted``:
settlement may need the pit boss) are each said in an alarm. So is each game the
wheel's own log (``WheelRecords``) and the results published disagree on
(``wheel_log_mismatch``, ``wheeld.core.reconcile``).

A wheel with sensor output (a Cammegh on Extended Advanced) says itself whether
a game was valid (``WheelVerdict``). wheeld judges some of the same rules from
those sensors: a no-spin for one of them where the wheel completed a number,
or a number wheeld published for a game the wheel voided, is a mismatch. Other
no-spins (the link, frames, an operator) are wheeld's alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from wheeld.core.events import (
    BallLaunched,
    DisplayMismatch,
    ResultContradicted,
    WheelRecords,
    WheelVerdict,
)
from wheeld.core.game import Alarm, Decision, NoSpin, ReasonCode, Result, Spinning
from wheeld.core.reconcile import reconcile

#: The rules a wheel with sensor output lets wheeld judge itself.
JUDGED_FROM_SENSORS: frozenset[ReasonCode] = frozenset(
    {"insufficient_revolutions", "ball_same_direction", "rotor_stopped"}
)


class VerdictCheck:
    """The game the wheel's last launch opened, and how wheeld ended it."""

    def __init__(self) -> None:
        self._game: int | None = None
        self._outcome: Result | NoSpin | None = None

    def follow(self, event: object, made: list[Decision]) -> None:
        """The decisions a wheel event made: a launch opens the wheel's game, an outcome ends it."""
        for decision in made:
            if isinstance(decision, Spinning) and isinstance(event, BallLaunched):
                self._game, self._outcome = decision.game_id, None
            elif isinstance(decision, Result | NoSpin) and decision.game_id == self._game:
                self._outcome = decision

    def judge(self, verdict: WheelVerdict, now: float) -> list[Decision]:
        """The alarm, if the wheel's verdict contradicts wheeld's on a rule both judge."""
        outcome, self._outcome = self._outcome, None
        if outcome is None:
            return []  # wheeld has not ended that game (or never saw it start)
        wheel_valid = verdict.void is None and verdict.number is not None
        if isinstance(outcome, Result):
            if wheel_valid:
                return []
            ours = outcome.number
        elif not wheel_valid or not JUDGED_FROM_SENSORS.intersection(outcome.reasons):
            return []  # both void, or wheeld voided for what the wheel cannot see
        else:
            ours = outcome.reason
        theirs = verdict.number if wheel_valid else verdict.void or "no number"
        detail = {"game_id": outcome.game_id, "wheel_verdict": theirs, "wheeld_verdict": ours}
        return [Alarm(now, "wheel_verdict_mismatch", detail)]


def contradiction(
    event: object, now: float, in_progress: int | None, last_game: int | None
) -> Alarm | None:
    """The alarm for a wheel event that contradicts what wheeld said, if it is one."""
    if isinstance(event, DisplayMismatch):
        game = in_progress or last_game
        detail = {"game_id": game, "number": event.number, "display": event.display}
        return Alarm(now, "display_mismatch", detail)
    if isinstance(event, ResultContradicted):
        # Said loudly: settlement may need the pit boss (docs/mqtt.md).
        detail = {"severity": "critical", "game_id": last_game}
        detail.update(number=event.number, later=event.later)
        return Alarm(now, "result_contradicted", detail)
    return None


def log_mismatches(records: WheelRecords, now: float, history: Iterable[str]) -> list[Decision]:
    """The wheel's own log against the results published, newest first (the history the
    table keeps, never a journal scan): one ``wheel_log_mismatch`` alarm a game."""
    found = reconcile(records.games, records.judged_from, list(history))
    return [Alarm(now, "wheel_log_mismatch", mismatch.detail()) for mismatch in found]
