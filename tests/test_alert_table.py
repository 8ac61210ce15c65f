"""The one table of alerts: each a unit with its keys, and ``[alerts]`` assembled from them."""

from __future__ import annotations

from wheeld.config import AlertsConfig, Config
from wheeld.core.game import NoSpin, Result, Spinning
from wheeld.table.alerts import ALERTS, Alerts, AlertSettings
from wheeld.table.book import Book
from wheeld.table.faults import LineNoiseKeys
from wheeld.table.keys import AlertKeys


def test_alerts_settings_are_every_units_keys_and_nothing_else() -> None:
    bases: set[type[AlertKeys]] = set(AlertSettings.__bases__)
    assert bases == {unit.keys for unit in ALERTS} | {LineNoiseKeys}
    keys = [key for base in bases for key in base.model_fields]
    assert sorted(keys) == sorted(AlertSettings.model_fields)
    assert len(set(keys)) == len(keys), "two alerts share a key"


def test_every_alert_has_its_own_code_and_keys() -> None:
    assert len({unit.code for unit in ALERTS}) == len(ALERTS)
    assert all(issubclass(unit.keys, AlertKeys) for unit in ALERTS)
    assert Alerts.codes() == {unit.code for unit in ALERTS}


def test_the_configuration_reads_alerts_by_the_assembled_model() -> None:
    assert AlertsConfig is AlertSettings
    assert Config().alerts == AlertSettings()


def test_the_book_holds_what_is_set_and_says_each_change_once() -> None:
    book = Book()
    set_ = book.set("deviation", 10.0, p_value=0.0001)
    assert set_ is not None and set_.detail["state"] == "set"
    assert book.set("deviation", 11.0) is None  # set already: nothing new said
    assert "deviation" in book and book.kept()["deviation"]["detail"] == {"p_value": 0.0001}
    cleared = book.clear("deviation", 12.5)
    assert cleared is not None and cleared.detail["duration_s"] == 2.5
    assert book.clear("deviation", 13.0) is None and not book


def test_a_restored_alert_tells_its_unit_where_its_run_stood() -> None:
    alerts = Alerts(AlertSettings(), None)
    faults = Book()
    stored = {
        "repeated_no_spins": {"since": 1.0, "detail": {"reason": "ball_out_of_wheel", "count": 3}},
        "wheel_link_lost": {"since": 2.0, "detail": {"why": "gone"}},
    }
    alerts.restore(stored, faults)
    assert "wheel_link_lost" in faults and "repeated_no_spins" in alerts.book
    # One more no-spin of that cause goes on with the run: nothing new to say.
    again = NoSpin(7, 3.0, "ball_out_of_wheel", ("ball_out_of_wheel",))
    assert alerts.on_outcome(again) == []
    cleared = alerts.on_outcome(Result(8, 4.0, "17", 9, "cw", "ccw"))
    assert [(a.code, a.detail["state"]) for a in cleared] == [("repeated_no_spins", "clear")]
    assert alerts.on_launch(Spinning(9, 5.0, "cw", "ccw")) == []
