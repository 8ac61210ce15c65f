"""The Mercury's event log (``*E?``, ``*EG``, ``*EN``), read when the table closes and
held against the results wheeld published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld_cammegh.mercury import DRIVER, MercuryConfig, MercuryStatus, encode_mercury_status
from wheeld_cammegh.mercury_log import game_number

BASE = "w/T2"


def _table(history: list[str], **section: Any) -> TablePipeline:
    settings = MercuryConfig(**section)
    decoder = DRIVER.new_decoder(settings)
    assert DRIVER.session is not None
    session = DRIVER.session(decoder, settings)
    table = TableSettings(table="T2", base_topic=BASE, driver=DRIVER.name, port="x")
    pipeline = TablePipeline(table, decoder, session, history=history)
    pipeline.on_link_up(0.0)
    return pipeline


def _status(state: int) -> bytes:
    return encode_mercury_status(MercuryStatus(state, 3, None, 0, 0, "cw"))


def _read(pipeline: TablePipeline, entries: list[str], at: float) -> list[Effects]:
    """The table closes; the wheel answers each command: its count, then its game
    entries newest first, then ``E None``."""
    out = [pipeline.on_bytes(_status(6), at)]
    answers = iter([f"E {len(entries) + 4}", *(f"E {e}" for e in entries), "E None"])
    for _ in range(len(entries) + 3):
        if not out[-1].writes:
            break
        at += 0.2
        out.append(pipeline.on_bytes(next(answers).encode() + b"\r\n", at))
    return out


def _alarms(effects: list[Effects]) -> list[dict[str, Any]]:
    said = [json.loads(m.payload) for e in effects for m in e.messages if m.topic.endswith("alarm")]
    return [a for a in said if a["alarm"] == "wheel_log_mismatch"]


def test_closing_reads_the_event_log_entry_by_entry() -> None:
    pipeline = _table(["23", "8", "17"], read_log=True)
    effects = _read(pipeline, ["01/12/26 14:03:10 G 23", "01/12/26 14:02:01 G 08", "x 17"], 1.0)
    assert [w for e in effects for w in e.writes] == [
        b"*E?\r\n",
        b"*EG\r\n",
        b"*EN\r\n",
        b"*EN\r\n",
        b"*EN\r\n",
    ]
    assert _alarms(effects) == []  # 23, 8 (written 08) and 17: as published


def test_a_game_the_wheel_logged_otherwise_is_an_alarm_with_its_entry() -> None:
    pipeline = _table(["23", "8", "17"], read_log=True)
    (alarm,) = _alarms(_read(pipeline, ["G 23", "G 9", "G 17"], 1.0))
    assert alarm["kind"] == "published_differently"
    assert alarm["wheel_record"] == {"entry": 1, "data": "G 9", "number": "9"}
    assert alarm["wheeld_record"] == {"number": "8", "results_back": 1}


def test_the_log_is_read_only_when_asked_and_only_on_closing() -> None:
    assert _table([], ask_version=True).on_bytes(_status(6), 1.0).writes == []
    pipeline = _table([], read_log=True)
    assert pipeline.on_bytes(_status(6), 1.0).writes == [b"*E?\r\n"]
    assert pipeline.on_bytes(_status(6), 1.5).writes == []  # still closed


def test_an_unanswered_read_is_retried_then_said() -> None:
    pipeline = _table([], read_log=True)
    pipeline.on_bytes(_status(6), 1.0)
    assert pipeline.on_timer(2.0).writes == [b"*E?\r\n"]
    assert pipeline.on_timer(3.0).writes == [b"*E?\r\n"]
    said = [json.loads(m.payload) for m in pipeline.on_timer(4.0).messages]
    assert [a.get("command") for a in said if a.get("alarm") == "wheel_not_answering"] == ["*E?"]


def test_a_game_entry_ends_with_its_winning_number() -> None:
    assert game_number("01/12/26 14:03:10;G;07") == "7"
    assert game_number("G 00") == "00"
    assert game_number("G 0") == "0"
    assert game_number("power on") is None
    assert game_number("G 37") is None


CAPTURE = Path(__file__).parent / "captures" / "mercury" / "event-log-advanced.cap"


def test_the_event_log_capture_is_what_the_simulator_plays() -> None:
    from mercury_captures import event_log_capture

    assert CAPTURE.read_text() == event_log_capture()


def test_a_replayed_event_log_read_says_what_run_said(capsys: pytest.CaptureFixture[str]) -> None:
    from wheeld.cli import main as wheeld

    assert wheeld(["replay", "--topics", str(CAPTURE)]) == 0
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    results = [
        m["payload"]["number"]
        for m in said
        if m["topic"].endswith("/game") and m["payload"]["event"] == "result"
    ]
    assert results == ["17", "5", "23"]
    (alarm,) = [m["payload"] for m in said if m["topic"].endswith("/alarm")]
    assert alarm["wheel_record"]["number"] == "24"
    assert alarm["wheeld_record"] == {"number": "23", "results_back": 0}
