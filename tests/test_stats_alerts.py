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
from wheeld.core.messages import iso_utc
from wheeld.core.stats import RECENT_GAMES, Statistics
from wheeld.shell.daemon import build_pipeline
from wheeld.shell.journal import JOURNAL_FILE, Journal
from wheeld.table.alerts import AlertSettings
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
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
        sector_arcs=[3, 7],
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


# -- alarms journaled, alerts kept across a restart -------------------------------------------


def _no_spins(table: Table, count: int) -> Effects:
    """``count`` launches in a row without reversing the rotor: each a no-spin of one cause."""
    out = Effects()
    for _ in range(count):
        table.wheel.pocket(None)
        table.wheel.advance(table.wheel.rotor_period_ms * 3 + 100)
        table.wheel.game("5")
        out.extend(table.feed())
    return out


def test_every_raise_clear_and_acknowledgement_is_a_journal_record() -> None:
    table = Table()
    table.wheel.game("17")
    table.feed()
    raised = _no_spins(table, 3)
    (record,) = [a for a in raised.alarms if a.code == "repeated_no_spins"]
    (message,) = [m for m in raised.messages if m.topic == f"{BASE}/alarm"]
    assert (record.state, record.payload) == ("set", message.payload)
    assert raised.set_alerts is not None and "repeated_no_spins" in raised.set_alerts
    _, acked = table.command("ack", b'{"alert": "repeated_no_spins", "operator": "boss"}')
    assert [(a.code, a.state) for a in acked.alarms] == [("repeated_no_spins", "acknowledged")]
    assert acked.set_alerts is not None
    assert acked.set_alerts["repeated_no_spins"]["acknowledged_by"] == "boss"
    table.wheel.reverse_rotor()
    table.wheel.game("8")
    cleared = table.feed()
    assert [(a.code, a.state) for a in cleared.alarms] == [("repeated_no_spins", "clear")]
    assert cleared.set_alerts == {}


def test_a_second_acknowledgement_is_refused_naming_the_first() -> None:
    table = Table()
    table.wheel.game("17")
    table.feed()
    _no_spins(table, 3)
    first, _ = table.command("ack", b'{"alert": "repeated_no_spins", "operator": "boss"}')
    assert first["ok"]
    reply, effects = table.command("ack", b'{"alert": "repeated_no_spins", "operator": "ana"}')
    assert reply["ok"] is False and reply["error"].startswith(
        "repeated_no_spins already acknowledged by boss at "
    )
    assert not alarms(effects, "repeated_no_spins") and not effects.alarms


@pytest.mark.parametrize(
    ("payload", "sender"),
    [
        (b'{"alert": "repeated_no_spins", "operator": "  "}', None),
        (b'{"alert": "repeated_no_spins"}', " \t"),
    ],
    ids=["field", "user-property"],
)
def test_a_blank_operator_acknowledges_nothing(payload: bytes, sender: str | None) -> None:
    table = Table()
    table.wheel.game("17")
    table.feed()
    _no_spins(table, 3)
    reply, effects = table.command("ack", payload, sender=sender)
    assert reply["ok"] is False and "blank" in reply["error"]
    assert not effects.alarms and table.pipeline.alerts.book.acknowledged == {}


def any_alarms(effects: Effects, code: str) -> list[dict[str, Any]]:
    """``code``'s alarms on the configured table's ``<base>/alarm``."""
    return [
        payload
        for payload in (
            json.loads(m.payload) for m in effects.messages if m.topic.endswith("/alarm")
        )
        if payload["alarm"] == code
    ]


class JournaledTable:
    """A table whose pipeline is the daemon's (``build_pipeline``), over a real journal,
    its effects journaled as the daemon's ``EffectsApplier.apply`` does; ``restart`` is a
    stop and start."""

    def __init__(self, tmp_path: Path, alerts: str = "") -> None:
        self.config_file = tmp_path / "wheeld.toml"
        self.state_dir = tmp_path / "state"
        self.write_config(alerts)
        self.table = Table()
        self.journal: Journal | None = None
        self.started = self.start()

    def write_config(self, alerts: str) -> None:
        self.config_file.write_text(f"[signing]\nrequired = false\n[alerts]\n{alerts}\n")

    def start(self) -> Effects:
        self.journal = Journal(self.state_dir / JOURNAL_FILE)
        self.table.pipeline = build_pipeline(load(self.config_file), self.journal)
        now = self.table.wheel.host_time()
        out = self.apply(self.table.pipeline.start(now))
        out.extend(self.apply(self.table.pipeline.on_link_up(now)))
        return out

    def restart(self) -> Effects:
        assert self.journal is not None
        self.journal.close()
        return self.start()

    def apply(self, effects: Effects) -> Effects:
        journal = self.journal
        assert journal is not None
        if effects.alarms or effects.set_alerts is not None:
            journal.record_alarms(effects.alarms, effects.set_alerts)
        if effects.decided:
            state = effects.state or self.table.pipeline.engine.state
            journal.record(effects.games, effects.messages, state)
            if effects.games:  # kept: what follows from them, as the daemon's does
                effects.extend(self.apply(self.table.pipeline.committed()))
        return effects

    def feed(self) -> Effects:
        return self.apply(self.table.feed())

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def test_a_set_alert_survives_a_restart_with_its_since_and_acknowledgement(
    tmp_path: Path,
) -> None:
    table = JournaledTable(tmp_path)
    try:
        table.table.wheel.game("17")
        table.feed()
        (alert,) = any_alarms(table.apply(_no_spins(table.table, 3)), "repeated_no_spins")
        reply, acked = table.table.command(
            "ack", b'{"alert": "repeated_no_spins", "operator": "boss"}'
        )
        table.apply(acked)
        assert reply["ok"]
        started = table.restart()
        assert not any_alarms(started, "repeated_no_spins")  # no second raise
        pipeline = table.table.pipeline
        assert iso_utc(pipeline.alerts.book.since["repeated_no_spins"]) == alert["since"]
        assert pipeline.alerts.book.acknowledged["repeated_no_spins"][0] == "boss"
        again, _ = table.table.command("ack", b'{"alert": "repeated_no_spins", "operator": "ana"}')
        assert "already acknowledged by boss" in again["error"]
        # One more no-spin of that cause is the same episode, not a new one.
        assert not any_alarms(table.apply(_no_spins(table.table, 1)), "repeated_no_spins")
        table.table.wheel.reverse_rotor()
        table.table.wheel.game("8")
        (clear,) = any_alarms(table.feed(), "repeated_no_spins")
        assert clear["state"] == "clear" and clear["since"] == alert["since"]
        assert table.journal is not None
        kept = [(code, state) for _, code, state, _ in table.journal.alarms()]
        assert kept == [
            ("repeated_no_spins", "set"),
            ("repeated_no_spins", "acknowledged"),
            ("repeated_no_spins", "clear"),
        ]
        assert table.journal.set_alerts() == {}
        assert not any_alarms(table.restart(), "repeated_no_spins")  # cleared: nothing to restore
    finally:
        table.close()


def test_an_alert_whose_condition_is_gone_after_a_restart_is_cleared_once(
    tmp_path: Path,
) -> None:
    table = JournaledTable(tmp_path, "direction_unchanged = 2")
    try:
        table.table.wheel.game("17")
        table.feed()
        assert table.journal is not None
        # Left set by the last run; the figures (one result) show no deviation now, and
        # direction_unchanged is no longer configured.
        since = table.table.wheel.host_time() - 60
        table.journal.record_alarms(
            [],
            {
                "deviation": {"since": since, "detail": {}},
                "direction_unchanged": {"since": since, "detail": {}},
            },
        )
        table.write_config("")
        started = table.restart()
        for code in ("deviation", "direction_unchanged"):
            (clear,) = any_alarms(started, code)
            assert clear["state"] == "clear" and clear["since"] == iso_utc(since)
        assert table.journal.set_alerts() == {}
        restarted = table.restart()
        assert not any_alarms(restarted, "deviation") and not any_alarms(
            restarted, "direction_unchanged"
        )
    finally:
        table.close()


# -- wheeld stats: the journal's own wheel ---------------------------------------------------


def _journal_of_a_wheel(state_dir: Path, numbers: list[str], pockets: int | None) -> None:
    from tests.test_stats import _journal, results
    from wheeld.table.effects import Outgoing

    _journal(state_dir, [json.dumps(event) for event in results(numbers)])
    if pockets is not None:  # the retained <base>/wheel the daemon published
        journal = Journal(state_dir / JOURNAL_FILE)
        try:
            body = json.dumps({"link": "up", "pockets": pockets})
            journal.enqueue([Outgoing("wheel/T1/wheel", body, retain=True)])
            for entry in journal.pending():
                journal.acknowledge(entry)
        finally:
            journal.close()


@pytest.mark.parametrize(
    ("numbers", "retained", "shown"),
    [(["7", "17", "0"] * 40, 37, 37), (["7", "00", "0"] * 40, None, 38)],
    ids=["retained-wheel", "double-zero"],
)
def test_stats_use_the_journals_wheel_and_say_so_when_the_configuration_disagrees(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    numbers: list[str],
    retained: int | None,
    shown: int,
) -> None:
    from tests.test_stats import stats

    state_dir = tmp_path / "state"
    _journal_of_a_wheel(state_dir, numbers, retained)
    other = 75 - shown  # 38 for a 37-pocket wheel and the reverse
    config_file = tmp_path / "wheeld.toml"
    config_file.write_text(f"[signing]\nrequired = false\n[wheel]\npockets = {other}\n")
    status, out, err = stats(capsys, "--json", "--config", config_file, "--state-dir", state_dir)
    assert status == 0 and json.loads(out)["pockets"] == shown
    assert err == (
        f"wheeld stats: wheel.pockets = {other} but the journal shows a {shown}-pocket wheel:"
        f" using {shown}\n"
    )
    status, out, err = stats(capsys, "--json", "--pockets", str(shown), "--state-dir", state_dir)
    assert (status, err) == (0, "") and json.loads(out)["pockets"] == shown


def test_stats_of_a_capture_showing_a_00_are_of_a_38_pocket_wheel_whatever_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.test_stats import CAPTURES, stats

    capture = CAPTURES / "double-zero.cap"
    status, out, err = stats(capsys, "--json", "--pockets", "37", capture)
    data = json.loads(out)
    assert status == 0 and data["pockets"] == 38 and data["results"] == 3
    assert err == "wheeld stats: --pockets = 37 but the capture shows a 38-pocket wheel: using 38\n"
    _, unflagged, _ = stats(capsys, "--json", capture)
    assert json.loads(unflagged) == data


def test_stats_json_has_a_schema_version_and_the_text_rounds_hours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_stats import stats

    _journal_of_a_wheel(tmp_path, ["7", "17"] * 50 + ["5"], 37)  # 101 a minute apart: 100 min
    status, out, _ = stats(capsys, "--json", "--state-dir", tmp_path)
    assert status == 0 and json.loads(out)["schema_version"] == 1
    status, text, _ = stats(capsys, "--state-dir", tmp_path)
    assert "(101 games in 1.7 h)" in text


def test_the_daemon_journals_alarms_and_keeps_a_set_alert_over_a_sigterm(tmp_path: Path) -> None:
    from tests.test_daemon import BASE as TABLE_BASE
    from tests.test_daemon import Table as DaemonTable
    from wheeld.shell.journal import JournalView
    from wheeld.testing.rig import Broker, running

    def repeated(state: str) -> Any:
        return lambda p: p["alarm"] == "repeated_no_spins" and p["state"] == state

    broker = Broker(tmp_path, persistent=True)
    broker.start()
    table = DaemonTable(tmp_path, broker)
    try:
        with running(table.daemon):
            table.ready()
            table.wheel.hello()
            table.wheel.advance(3000)
            table.wheel.game("17")
            for _ in range(3):  # the rotor never reverses: three no-spins of one cause
                table.wheel.pocket(None)
                table.wheel.advance(table.wheel.rotor_period_ms * 3 + 100)
                table.wheel.game("5")
            table.flush()
            alert = table.sub.wait(f"{TABLE_BASE}/alarm", repeated("set"), 20)
            assert table.daemon.terminate() == 0
        table.notify.received.clear()
        with running(table.daemon):
            table.ready()
            table.wheel.reverse_rotor()
            table.wheel.advance(10_000)
            table.wheel.game("8")
            table.flush()
            clear = table.sub.wait(f"{TABLE_BASE}/alarm", repeated("clear"), 20)
            assert clear["since"] == alert["since"]
        raised = [p for p in table.sub.on(f"{TABLE_BASE}/alarm") if repeated("set")(p)]
        assert len(raised) == 1  # the restart raised it no second time
        with JournalView(tmp_path / "state" / JOURNAL_FILE) as view:
            kept = [row[3] for row in view.alarms() if row[2] == "repeated_no_spins"]
        assert kept == ["set", "clear"]
    finally:
        table.close()
        broker.stop()
