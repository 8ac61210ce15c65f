"""The alerts: statistical judgements of the table's figures, one module each.

``ALERTS`` is the one table of them, in the order they are judged;
``AlertSettings``, the ``[alerts]`` section, is assembled from their keys (and
the ``line_noise`` fault's threshold, which lives there too), in the order the
configuration lists them. Adding an alert is one module (its keys, its
judgement, its clearing: ``base.Alert``), its line in each of the two below,
and its test. :class:`Alerts` runs them for a table, in one book.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wheeld.core.game import Alarm, NoSpin, Result, Spinning
from wheeld.core.stats import Statistics
from wheeld.table.alerts.base import Alert, Verdict
from wheeld.table.alerts.deviation import Deviation, DeviationKeys
from wheeld.table.alerts.direction_unchanged import DirectionUnchanged, DirectionUnchangedKeys
from wheeld.table.alerts.games_per_hour import GamesPerHour, GamesPerHourKeys
from wheeld.table.alerts.repeated_no_spins import RepeatedNoSpins, RepeatedNoSpinsKeys
from wheeld.table.alerts.rotor_speed import RotorSpeed, RotorSpeedKeys
from wheeld.table.alerts.sector_concentration import (
    SectorConcentration,
    SectorConcentrationKeys,
)
from wheeld.table.book import Book
from wheeld.table.faults import LineNoiseKeys

#: Every alert, in the order each launch or outcome is judged (the order their alarms
#: come in when one outcome moves several).
ALERTS: tuple[type[Alert], ...] = (
    RepeatedNoSpins,
    Deviation,
    RotorSpeed,
    GamesPerHour,
    SectorConcentration,
    DirectionUnchanged,
)


# The bases, last first: pydantic lists the fields of the last base first.
class AlertSettings(
    LineNoiseKeys,
    DirectionUnchangedKeys,
    SectorConcentrationKeys,
    RotorSpeedKeys,
    GamesPerHourKeys,
    RepeatedNoSpinsKeys,
    DeviationKeys,
):
    """``[alerts]``: when the table's figures call for an engineer (docs/statistics.md)."""


class Alerts:
    """A table's alerts: each judged in turn, what is set kept in one book."""

    def __init__(self, settings: AlertSettings, statistics: Statistics | None) -> None:
        self.book = Book()
        self.units: list[Alert] = []
        self.configure(settings, statistics)

    def configure(self, settings: AlertSettings, statistics: Statistics | None) -> None:
        """Judge by ``settings`` and ``statistics`` from now on (what is set stays set)."""
        self.units = [unit(settings, statistics) for unit in ALERTS]
        for unit in self.units:
            if unit.code in self.book:
                unit.restore(self.book.detail[unit.code])

    @staticmethod
    def codes() -> frozenset[str]:
        """Every alert's code."""
        return frozenset(unit.code for unit in ALERTS)

    def restore(self, stored: Mapping[str, Mapping[str, Any]], faults: Book) -> None:
        """What the last run left set (the journal's ``set_alerts``): each alert here, its
        unit told what it was set with; each fault in ``faults``."""
        for code, entry in stored.items():
            if code not in self.codes():
                faults.restore(code, entry)
            elif self.book.restore(code, entry):
                for unit in self.units:
                    if unit.code == code:
                        unit.restore(self.book.detail[code])

    def on_launch(self, launch: Spinning) -> list[Alarm]:
        """The alarms a launch the journal keeps calls for."""
        return self._said(launch.at, [(unit, unit.on_launch(launch)) for unit in self.units])

    def on_outcome(self, outcome: Result | NoSpin) -> list[Alarm]:
        """The alarms an outcome the journal keeps calls for."""
        return self._said(outcome.at, [(unit, unit.on_outcome(outcome)) for unit in self.units])

    def gone(self) -> list[str]:
        """At start: the codes set whose condition is gone now (each to be cleared)."""
        return [unit.code for unit in self.units if unit.code in self.book and unit.gone()]

    def _said(self, at: float, verdicts: list[tuple[Alert, Verdict | None]]) -> list[Alarm]:
        alarms: list[Alarm] = []
        for unit, verdict in verdicts:
            if verdict is None:
                continue
            if verdict.holds:
                alarm = self.book.set(unit.code, at, **verdict.detail)
            else:
                alarm = self.book.clear(unit.code, at, **verdict.detail)
            if alarm is not None:
                alarms.append(alarm)
        return alarms
