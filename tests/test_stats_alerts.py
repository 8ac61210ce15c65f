"""The alerts the figures call for, judged by the pipeline: set, cleared, acknowledged.

Each test fails if its rule is removed: it asserts the alert is raised (and,
where the figures allow it, cleared) on ``<base>/alarm``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_pipeline import BASE, Table
from wheeld.config import AlertsConfig, ConfigError, load
from wheeld.daemon import build_pipeline
from wheeld.effects import Effects
from wheeld.journal import JOURNAL_FILE, Journal
from wheeld.messages import iso_utc
from wheeld.pipeline import AlertSettings, TablePipeline, TableSettings
from wheeld.stats import RECENT_GAMES, Statistics
from wheeld_cammegh.decoder import CammeghDecoder
from wheeld_simulators.ss2 import ScriptedSS2


def alarms(effects: Effects, code: str) -> list[dict[str, Any]]:
    return [
        payload
        for payload in (
            json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/alarm"
        )
        if payload["alarm"] == code
    ]


def wrp_table(**alerts: Any) -> Table:
    table = Table()
    pipeline = table.pipeline
    pipeline.settings = replace(pipeline.settings, alerts=AlertSettings(**alerts))
    pipeline.statistics = Statistics(37)
    return table


def _result(number: str, at: float, game_id: int = 0) -> dict[str, Any]:
    return {"event": "result", "game_id": game_id, "number": number, "ts": iso_utc(at)}


# -- the rate of play ------------------------------------------------------------------------


def test_too_many_games_an_hour_is_an_alert_cleared_when_play_slows() -> None:
    table = wrp_table(games_per_hour_max=40.0)
    statistics = table.pipeline.statistics
    assert statistics is not None
    now = table.wheel.host_time()
    for index in range(RECENT_GAMES - 1):  # a game a minute before this one: 60 an hour
        statistics.add(_result("7", now - 60 * (RECENT_GAMES - 1 - index)))
    table.wheel.game("17")
    (alert,) = alarms(table.feed(), "games_per_hour")
    assert alert["state"] == "set" and alert["max"] == 40.0 and alert["min"] is None
    assert 50 < alert["rate"] <= 60
    # Then a game every three minutes: 20 an hour.
    later = table.wheel.host_time()
    for index in range(RECENT_GAMES - 1):
        statistics.add(_result("7", later + 180 * (index + 1)))
    table.wheel.advance(180_000 * RECENT_GAMES)
    table.wheel.reverse_rotor()
    table.wheel.game("5")
    (clear,) = alarms(table.feed(), "games_per_hour")
    assert clear["state"] == "clear" and clear["since"] == alert["since"]


def test_too_few_games_an_hour_is_an_alert_and_no_rate_is_judged_before_its_sample() -> None:
    table = wrp_table(games_per_hour_min=50.0)
    statistics = table.pipeline.statistics
    assert statistics is not None
    now = table.wheel.host_time()
    table.wheel.game("17")
    assert alarms(table.feed(), "games_per_hour") == []  # one game: no rate yet
    for index in range(RECENT_GAMES):  # a game every two minutes: 30 an hour
        statistics.add(_result("7", now + 60 + 120 * index))
    table.wheel.advance(120_000 * (RECENT_GAMES + 1))
    table.wheel.reverse_rotor()
    table.wheel.game("5")
    (alert,) = alarms(table.feed(), "games_per_hour")
    assert alert["state"] == "set" and alert["min"] == 50.0 and alert["rate"] < 50


# -- the rotor's speed -----------------------------------------------------------------------


class SS2Table:
    """A pipeline fed a scripted Cammegh SS2, which reports the rotor's speed."""

    def __init__(self, **alerts: Any) -> None:
        self.wheel = ScriptedSS2(spin=10)
        self.wheel.run(2000)
        settings = TableSettings(
            table="T9", base_topic=BASE, driver="cammegh-ss2", alerts=AlertSettings(**alerts)
        )
        self.pipeline = TablePipeline(settings, CammeghDecoder(), statistics=Statistics(37))
        self.pipeline.start(self.wheel.now())
        self.pipeline.on_link_up(self.wheel.now())
        self.fed = 0

    def feed(self) -> Effects:
        out = Effects()
        for at, line in self.wheel.lines[self.fed :]:
            out.extend(self.pipeline.on_bytes(line + b"\r\n", at))
        self.fed = len(self.wheel.lines)
        return out


def test_a_rotor_too_slow_at_launch_is_an_alert_cleared_by_a_launch_in_range() -> None:
    table = SS2Table(rotor_rpm_min=20.0, rotor_rpm_max=30.0)
    table.wheel.game("17")  # the scripted wheel cruises at 17.0 rpm
    effects = table.feed()
    (alert,) = alarms(effects, "rotor_speed")
    assert (alert["state"], alert["rpm"], alert["min"], alert["max"]) == ("set", 17.0, 20.0, 30.0)
    assert effects.alarmed  # journaled durably, like every alarm
    acked = table.pipeline.acknowledge("rotor_speed", "maria", table.wheel.now())
    (ack,) = alarms(acked, "rotor_speed")
    assert (ack["state"], ack["operator"], ack["since"]) == (
        "acknowledged",
        "maria",
        alert["since"],
    )
    table.wheel.cruise = 250
    table.wheel.game("5")
    (clear,) = alarms(table.feed(), "rotor_speed")
    assert clear["state"] == "clear" and clear["since"] == alert["since"]
    table.wheel.cruise = 320
    table.wheel.game("8")
    (fast,) = alarms(table.feed(), "rotor_speed")
    assert (fast["state"], fast["rpm"]) == ("set", 32.0)


def test_a_wheel_that_does_not_report_its_speed_is_not_judged() -> None:
    table = wrp_table(rotor_rpm_min=20.0)
    table.wheel.game("17")
    assert alarms(table.feed(), "rotor_speed") == []


# -- sector concentration --------------------------------------------------------------------


def _concentrated(statistics: Statistics, results: int) -> None:
    """Half the results on 32, the rest even: one arc far above its share."""
    order = statistics.layout.order
    for index in range(results):
        statistics.add(_result("32" if index % 2 else order[index // 2 % 37], 0.0))


def test_a_concentrated_arc_is_an_alert_naming_its_pockets() -> None:
    table = wrp_table(sector_p_value=0.001, sector_min_games=370)
    assert table.pipeline.statistics is not None
    _concentrated(table.pipeline.statistics, 400)
    table.wheel.game("17")
    (alert,) = alarms(table.feed(), "sector_concentration")
    assert alert["state"] == "set" and "32" in alert["pockets"] and alert["p_value"] < 0.001
    assert alert["games"] >= 370 and alert["rotor_direction"] in ("all", "cw", "ccw")
    assert "defective" not in json.dumps(alert)


@pytest.mark.parametrize(
    ("alerts", "results"),
    [
        ({"sector_min_games": 370}, 400),  # no sector_p_value: not judged
        ({"sector_p_value": 0.001, "sector_min_games": 500}, 400),  # too few results
    ],
)
def test_sector_concentration_is_off_unless_set_and_waits_for_its_sample(
    alerts: dict[str, Any], results: int
) -> None:
    table = wrp_table(**alerts)
    assert table.pipeline.statistics is not None
    _concentrated(table.pipeline.statistics, results)
    table.wheel.game("17")
    assert alarms(table.feed(), "sector_concentration") == []


# -- the rotor's direction -------------------------------------------------------------------


def _launch_without_reversing(table: Table) -> Effects:
    table.wheel.pocket(None)
    table.wheel.advance(table.wheel.rotor_period_ms * 3 + 100)
    table.wheel.game("5")
    return table.feed()


def test_launches_without_reversing_the_rotor_are_an_alert_cleared_by_a_reversal() -> None:
    table = wrp_table(direction_unchanged=2)
    table.wheel.game("17")  # a result, rotor cw
    assert alarms(table.feed(), "direction_unchanged") == []
    assert alarms(_launch_without_reversing(table), "direction_unchanged") == []  # one
    (alert,) = alarms(_launch_without_reversing(table), "direction_unchanged")
    assert (alert["state"], alert["rotor_direction"], alert["count"]) == ("set", "cw", 2)
    table.wheel.reverse_rotor()
    table.wheel.game("8")
    (clear,) = alarms(table.feed(), "direction_unchanged")
    assert clear["state"] == "clear" and clear["since"] == alert["since"]


def test_no_new_alert_is_judged_unless_configured() -> None:
    table = Table()  # the defaults: only deviation and repeated_no_spins
    table.pipeline.statistics = Statistics(37)
    _concentrated(table.pipeline.statistics, 400)
    table.wheel.game("17")
    table.feed()
    for _ in range(3):
        _launch_without_reversing(table)
    codes = {json.loads(m.payload)["alarm"] for m in table.effects.messages if "alarm" in m.topic}
    assert codes.isdisjoint(
        {"games_per_hour", "rotor_speed", "sector_concentration", "direction_unchanged"}
    )


# -- the configuration -----------------------------------------------------------------------


def test_the_alerts_configuration_reaches_the_pipeline(tmp_path: Path) -> None:
    config_file = tmp_path / "wheeld.toml"
    config_file.write_text(
        "[signing]\nrequired = false\n"
        "[alerts]\ngames_per_hour_min = 20\ngames_per_hour_max = 60.5\n"
        "rotor_rpm_min = 18\nrotor_rpm_max = 30\nsector_p_value = 0.0001\n"
        "sector_min_games = 1000\nsector_arcs = [3, 7]\ndirection_unchanged = 2\n"
    )
    config = load(config_file)
    journal = Journal(tmp_path / JOURNAL_FILE)
    try:
        pipeline = build_pipeline(config, journal)
    finally:
        journal.close()
    assert pipeline.settings.alerts == AlertSettings(
        games_per_hour_min=20.0,
        games_per_hour_max=60.5,
        rotor_rpm_min=18.0,
        rotor_rpm_max=30.0,
        sector_p_value=0.0001,
        sector_min_games=1000,
        direction_unchanged=2,
    )
    assert pipeline.statistics is not None and pipeline.statistics.arcs == (3, 7)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("games_per_hour_min = 60\ngames_per_hour_max = 30", "alerts.games_per_hour_max"),
        ("rotor_rpm_max = 0", "alerts.rotor_rpm_max"),
        ("sector_arcs = [3, 37]", "alerts.sector_arcs"),
        ("sector_p_value = 0.5", "alerts.sector_p_value"),
        ("direction_unchanged = true", "alerts.direction_unchanged"),
    ],
)
def test_bad_alert_settings_are_one_line_naming_the_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    config_file = tmp_path / "wheeld.toml"
    config_file.write_text(f"[signing]\nrequired = false\n[alerts]\n{text}\n")
    with pytest.raises(ConfigError) as error:
        load(config_file)
    (line,) = error.value.problems
    assert line.startswith(problem)


def test_every_new_alert_is_off_by_default() -> None:
    alerts = AlertsConfig()
    assert (
        alerts.games_per_hour_min,
        alerts.games_per_hour_max,
        alerts.rotor_rpm_min,
        alerts.rotor_rpm_max,
        alerts.sector_p_value,
        alerts.direction_unchanged,
    ) == (None,) * 6
