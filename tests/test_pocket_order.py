"""A custom pocket order (``wheel.pocket_order``, a Cammegh wheel set up with ``*Z``):
the layout, the racetrack sectors and the statistics follow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheeld.config import ConfigError, load
from wheeld.core.layout import (
    SECTORS,
    SINGLE_ZERO_ORDER,
    custom_layout,
    layout_for,
    pocket_order_problem,
    sectors_of,
)
from wheeld.core.stats import Statistics
from wheeld.drivers.wrp import DRIVER as WRP
from wheeld.table.pipeline import TablePipeline, TableSettings

#: The standard single-zero pockets, anticlockwise: every neighbour changes side.
MIRRORED = (SINGLE_ZERO_ORDER[0], *reversed(SINGLE_ZERO_ORDER[1:]))


def test_the_standard_order_from_any_pocket_has_the_standard_sectors() -> None:
    assert sectors_of(SINGLE_ZERO_ORDER) == SECTORS
    assert sectors_of(SINGLE_ZERO_ORDER[9:] + SINGLE_ZERO_ORDER[:9]) == SECTORS


def test_the_sectors_move_with_the_pockets() -> None:
    layout = custom_layout(MIRRORED)
    # 32 stands where 26 stood (beside 0, in voisins and jeu zero); 26 where 32 stood.
    assert layout.facts("32").sectors == layout_for(37).facts("26").sectors
    assert layout.facts("26").sectors == layout_for(37).facts("32").sectors
    assert layout.facts("32").color == "red"  # the colour is the number's, not its place


def test_an_order_that_is_no_wheel_is_refused_in_one_line() -> None:
    assert (
        pocket_order_problem(list(SINGLE_ZERO_ORDER[:-1])) == "a wheel has 37 to 40 pockets, not 36"
    )
    assert pocket_order_problem([*SINGLE_ZERO_ORDER[:-1], "5"]) == "pockets named twice: 5"
    assert pocket_order_problem([*SINGLE_ZERO_ORDER[:-1], "00"]) == (
        "not pockets of a 37-pocket wheel: 00"
    )
    with pytest.raises(ValueError, match="pocket order has 37 pockets, not 38"):
        layout_for(38, SINGLE_ZERO_ORDER)


def _config(tmp_path: Path, wheel: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'[table]\nid = "T1"\n[wheel]\nport = "/dev/null"\n{wheel}\n')
    return path


def test_the_configuration_takes_a_pocket_order_and_names_a_bad_one(tmp_path: Path) -> None:
    order = ", ".join(f'"{p}"' for p in MIRRORED)
    config = load(_config(tmp_path, f"pocket_order = [{order}]"), {}, signing_key=False)
    assert config.wheel.order == MIRRORED
    with pytest.raises(ConfigError) as caught:
        load(_config(tmp_path, f"pockets = 38\npocket_order = [{order}]"), {}, signing_key=False)
    assert any("pocket_order has 37 pockets" in p for p in caught.value.problems)
    with pytest.raises(ConfigError) as caught:
        load(_config(tmp_path, 'pocket_order = ["0", "0"]'), {}, signing_key=False)
    assert any("wheel.pocket_order" in p and "37 to 40" in p for p in caught.value.problems)


def test_the_engine_and_the_statistics_follow_the_order() -> None:
    settings = TableSettings(table="T1", base_topic="w/T1", driver="wrp", pocket_order=MIRRORED)
    pipeline = TablePipeline(settings, WRP.new_decoder())
    assert pipeline.engine.layout.order == MIRRORED
    custom = Statistics(order=MIRRORED, arcs=[3])
    standard = Statistics(arcs=[3])
    for statistics in (custom, standard):
        for number in ("32", "15"):
            statistics.add({"event": "result", "game_id": 1, "number": number})
    # Neighbours on the standard wheel (0 32 15), apart on the mirrored one.
    assert custom.layout.order == MIRRORED
    assert custom.to_json()["arcs"] != standard.to_json()["arcs"]
    with pytest.raises(ValueError, match="custom pocket order"):
        Statistics.restore(standard.snapshot(), order=MIRRORED)


def test_wheeld_stats_counts_by_the_configured_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from wheeld.cli import main as wheeld

    capture = Path(__file__).parent / "captures" / "wrp" / "normal-games.cap"
    order = ", ".join(f'"{p}"' for p in MIRRORED)
    custom = _config(tmp_path, f"pocket_order = [{order}]")
    figures = []
    standard = tmp_path / "standard"
    standard.mkdir()
    for config in (custom, _config(standard, "")):
        assert wheeld(["stats", "--config", str(config), "--json", str(capture)]) == 0
        figures.append(json.loads(capsys.readouterr().out))
    assert figures[0]["counts"] == figures[1]["counts"]
    assert figures[0]["arcs"] != figures[1]["arcs"]  # neighbours by the order configured


def test_the_wheel_topic_says_the_custom_order_and_the_contract_takes_it() -> None:
    """Issue 19's leftover: `<base>/wheel` did not say which order the statistics' arcs
    and sectors were taken by; it does when one is configured, and only then."""
    import json

    from wheeld.contract.topics import Wheel

    payloads = []
    for order in (MIRRORED, None):
        settings = TableSettings(table="T1", base_topic="w/T1", driver="wrp", pocket_order=order)
        message = TablePipeline(settings, WRP.new_decoder()).wheel_message(1_700_000_000.0)
        assert message.topic == "w/T1/wheel"
        payloads.append(json.loads(message.payload))
    custom, standard = payloads
    assert custom["pocket_order"] == list(MIRRORED)
    assert "pocket_order" not in standard
    for payload in payloads:
        Wheel.model_validate(payload)
