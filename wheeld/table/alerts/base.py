"""What an alert is: a statistical judgement with its own ``[alerts]`` keys.

Each alert is one module of ``wheeld.table.alerts``: a settings model (its
keys under ``[alerts]``, with their descriptions), a unit that judges it at
each launch or outcome once the journal keeps it, and its clearing when a
restart finds its condition gone. The unit only judges: the book
(``wheeld.table.book``) sets and clears, and says so in alarms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from wheeld.core.game import NoSpin, Result, Spinning
from wheeld.core.stats import Statistics
from wheeld.table.keys import AlertKeys


class Verdict(NamedTuple):
    """An alert judged: whether its condition holds, and the detail to set it with."""

    holds: bool
    detail: dict[str, Any]


#: The condition no longer holds: cleared, if it was set.
GONE = Verdict(False, {})


class Alert:
    """One alert: judged at launches and outcomes; None where it has nothing to say."""

    #: Its code: the ``alarm`` of its messages, the key it is kept under.
    code: ClassVar[str]
    #: Its keys under ``[alerts]``.
    keys: ClassVar[type[AlertKeys]]

    def __init__(self, keys: Any, statistics: Statistics | None = None) -> None:
        """``keys``: the ``[alerts]`` settings (of its own ``keys`` model); ``statistics``:
        the table's, fed each outcome before it is judged (None: no figures kept)."""

    def on_launch(self, launch: Spinning) -> Verdict | None:
        """A launch the journal keeps."""
        return None

    def on_outcome(self, outcome: Result | NoSpin) -> Verdict | None:
        """A result or a no-spin the journal keeps (the statistics already count it)."""
        return None

    def gone(self) -> bool:
        """At start: whether the condition the last run left set is gone now."""
        return False

    def restore(self, detail: Mapping[str, Any]) -> None:
        """The detail the last run set it with: a unit with a run to go on picks it up."""


def outside(value: float, low: float | None, high: float | None) -> bool:
    """``value`` under ``low`` or over ``high`` (a bound that is None is no bound)."""
    return (low is not None and value < low) or (high is not None and value > high)


def above_minimum(value: float | None, low: object) -> float | None:
    """A maximum key's value, refused unless above its minimum key's (when both are set)."""
    if value is not None and isinstance(low, int | float) and value <= low:
        raise ValueError(f"must be above the minimum, {low}")
    return value
