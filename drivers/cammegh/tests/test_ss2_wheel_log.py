"""The SS2's own records, read when it closes, held against the results wheeld published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wheeld.core.stats import Statistics
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld_cammegh.control import ControlSettings
from wheeld_cammegh.decoder import CammeghDecoder, Status, encode_status
from wheeld_cammegh.session import CammeghSession
from wheeld_cammegh.wheel_log import PAGE_SIZE, encode_page, page_checksum

BASE = "w/T1"


def _table(history: list[str]) -> TablePipeline:
    """A pipeline over an SS2 under live control that reads the wheel's log, its
    history (newest first) as the journal would have given it."""
    decoder = CammeghDecoder()
    settings = ControlSettings(sensor_events=False, read_log=True)
    session = CammeghSession(decoder, settings)
    table = TableSettings(table="T1", base_topic=BASE, driver="cammegh-ss2", port="x")
    pipeline = TablePipeline(table, decoder, session, history=history, statistics=Statistics(37))
    pipeline.on_link_up(0.0)
    pipeline.on_bytes(b"*o 1159\r\n", 0.1)
    pipeline.on_bytes(b"*P OK\r\n", 0.2)
    return pipeline


def _closed(pipeline: TablePipeline, at: float) -> Effects:
    return pipeline.on_bytes(encode_status(Status(6, 1, None, 0, 0, "cw")), at)


def _value(number: str) -> int:
    return 37 if number == "00" else int(number)


def _pages(games: list[str | None]) -> list[list[int | None]]:
    """The log the wheel keeps, in pages: a number, or ``x17`` a misfire of 17."""
    values: list[int | None] = [
        38 + _value(g[1:]) if g and g.startswith("x") else _value(g or "0") for g in games
    ]
    return [values[i : i + PAGE_SIZE] for i in range(0, len(values), PAGE_SIZE)] or [[]]


def _read(pipeline: TablePipeline, games: list[str | None], at: float) -> list[Effects]:
    """The wheel closes and answers every command the driver sends, in order."""
    pages = _pages(games)
    replies = {
        b"*w\r\n": b"*w 31.45 74%\r\n",
        b"*W\r\n": b"*W " + b";".join(b"1" for _ in range(37)) + b"\r\n",
        b"*s t\r\n": b"*s t %d\r\n" % len(pages),
    }
    out = [_closed(pipeline, at)]
    for _ in range(20):
        writes = out[-1].writes
        if not writes:
            break
        (command,) = writes
        at += 0.2
        if command.startswith(b"*s r "):
            page = int(command[5:])
            reply = encode_page(page, pages[page]) + b"\r\n"
        else:
            reply = replies[command]
        out.append(pipeline.on_bytes(reply, at))
    return out


def _alarms(effects: list[Effects]) -> list[dict[str, Any]]:
    return [
        json.loads(m.payload)
        for e in effects
        for m in e.messages
        if m.topic == f"{BASE}/alarm" and json.loads(m.payload)["alarm"] == "wheel_log_mismatch"
    ]


def test_closing_reads_the_log_the_chi_squared_and_the_newest_pages() -> None:
    pipeline = _table(["4", "3", "2", "1"])
    logged: list[str | None] = [*(["9"] * 300), "1", "2", "3", "4"]
    effects = _read(pipeline, logged, 10.0)
    sent = [w for e in effects for w in e.writes]
    assert sent == [b"*w\r\n", b"*W\r\n", b"*s t\r\n", b"*s r 0\r\n", b"*s r 1\r\n"]
    assert _alarms(effects) == []  # every game the wheel logged since wheeld's first agrees
    stats = [json.loads(m.payload) for m in effects[-1].messages if m.topic == f"{BASE}/stats"]
    assert stats[-1]["wheel"]["chi_squared"] == {"value": 31.45, "percent": 74.0}
    assert stats[-1]["wheel"]["read_at"].startswith("1970-01-01T00:00:1")
    counters = pipeline.decoder.counters.as_dict()
    assert (counters["log_reads"], counters["log_pages"], counters["log_pages_bad"]) == (1, 2, 0)


def test_a_result_the_wheel_logged_and_wheeld_did_not_publish_is_an_alarm() -> None:
    pipeline = _table(["4", "3", "2", "1"])
    effects = _read(pipeline, ["1", "2", "3", "17", "4", "x5", "22"], 10.0)
    alarms = _alarms(effects)
    found = [(a["kind"], a["wheel_record"], a["wheeld_record"]) for a in alarms]
    assert found == [
        ("not_published", {"page": 0, "slot": 3, "number": "17"}, None),
        ("not_published", {"page": 0, "slot": 6, "number": "22"}, None),
    ]  # the misfire (x5) is a no-number on both sides: nothing to say


def test_a_result_published_differently_names_both_records() -> None:
    pipeline = _table(["4", "8", "2", "1"])
    (alarm,) = _alarms(_read(pipeline, ["1", "2", "3", "4"], 10.0))
    assert alarm["kind"] == "published_differently"
    assert alarm["wheel_record"] == {"page": 0, "slot": 2, "number": "3"}
    assert alarm["wheeld_record"] == {"number": "8", "results_back": 1}


def test_a_result_wheeld_published_over_a_logged_misfire_is_an_alarm() -> None:
    pipeline = _table(["4", "8", "2", "1"])
    (alarm,) = _alarms(_read(pipeline, ["1", "2", "x8", "4"], 10.0))
    assert alarm["wheel_record"] == {"page": 0, "slot": 2, "misfire": "8", "number": None}
    assert alarm["wheeld_record"] == {"number": "8", "results_back": 1}


def test_the_next_read_judges_only_what_the_wheel_logged_since() -> None:
    pipeline = _table(["4", "3", "2", "1"])
    first = _read(pipeline, ["1", "2", "3", "17", "4"], 10.0)
    assert len(_alarms(first)) == 1
    pipeline.on_bytes(encode_status(Status(2, 1, None, 0, 170, "cw")), 20.0)
    again = _read(pipeline, ["1", "2", "3", "17", "4", "23"], 30.0)
    assert [a["wheel_record"]["number"] for a in _alarms(again)] == ["23"]


def test_a_page_whose_checksum_fails_is_asked_again_then_left_out() -> None:
    pipeline = _table(["2", "1"])
    _closed(pipeline, 10.0)
    for at, reply in ((10.2, b"*w 1.0 2%"), (10.4, b"*W 1;2"), (10.6, b"*s t 1")):
        sent = pipeline.on_bytes(reply + b"\r\n", at).writes
    assert sent == [b"*s r 0\r\n"]
    good = encode_page(0, [1, 2])
    bad = good[:-2] + b"%02X" % ((page_checksum(good[-258:-2]) + 1) % 256)
    assert pipeline.on_bytes(bad + b"\r\n", 10.8).writes == [b"*s r 0\r\n"]
    last = pipeline.on_bytes(bad + b"\r\n", 11.0)
    assert last.writes == [] and _alarms([last]) == []
    counters = pipeline.decoder.counters.as_dict()
    assert (counters["log_reads"], counters["log_pages_bad"]) == (1, 2)


def test_the_log_is_read_only_on_closing_and_only_when_asked() -> None:
    pipeline = _table([])
    assert _closed(pipeline, 10.0).writes == [b"*w\r\n"]
    assert _closed(pipeline, 10.5).writes == []  # still closed: not again
    quiet = CammeghDecoder()
    session = CammeghSession(quiet, ControlSettings(sensor_events=False))
    table = TableSettings(table="T1", base_topic=BASE, driver="cammegh-ss2", port="x")
    listening = TablePipeline(table, quiet, session)
    listening.on_link_up(0.0)
    listening.on_bytes(b"*o 1159\r\n", 0.1)
    listening.on_bytes(b"*P OK\r\n", 0.2)
    assert _closed(listening, 10.0).writes == []


def test_garbled_log_replies_are_counted_never_raised() -> None:
    pipeline = _table(["1"])
    _closed(pipeline, 10.0)
    for at, reply in enumerate((b"*w lots", b"*W ??", b"*s t 1", b"*s r 0 short"), 1):
        pipeline.on_bytes(reply + b"\r\n", 10.0 + at)
    assert pipeline.decoder.counters.as_dict()["log_replies_malformed"] == 3
    long_garbage = b"*s r 0 " + b"\x7f" * 400 + b"\r\n"
    pipeline.on_bytes(long_garbage, 20.0)
    assert pipeline.decoder.counters.as_dict()["overlong_lines"] == 1


# -- the golden capture: firmware 2.52 under control, then its records read -------------------

CAPTURE = Path(__file__).parent / "captures" / "ss2-2.52" / "controlled-2.52.cap"


def test_the_2_52_capture_and_its_fuzz_seed_are_what_the_simulator_plays() -> None:
    from ss2_captures import CORPUS, controlled_session, fuzz_seed

    assert CAPTURE.read_text() == controlled_session()
    assert (CORPUS / "ss2-2.52-controlled.ss2").read_bytes() == fuzz_seed()


def test_a_replayed_session_reconciles_the_log_as_the_daemon_did(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Replay has no session to ask: the wheel's replies are followed all the same, so
    ``replay --topics`` says what ``run`` said (state 7 held, each game's direction as
    wheeld chose it, the misslogged game)."""
    from wheeld.cli import main as wheeld

    assert wheeld(["replay", "--topics", str(CAPTURE)]) == 0
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ends = [m["payload"] for m in said if m["topic"].endswith("/game")]
    results = [(p["number"], p["rotor_direction"]) for p in ends if p["event"] == "result"]
    assert results == [("17", "ccw"), ("0", "cw"), ("23", "ccw")]
    (alarm,) = [m["payload"] for m in said if m["topic"].endswith("/alarm")]
    assert alarm["alarm"] == "wheel_log_mismatch"
    assert alarm["wheel_record"] == {"page": 0, "slot": 5, "number": "24"}
    assert alarm["wheeld_record"] == {"number": "23", "results_back": 0}
    stats = [m["payload"] for m in said if m["topic"].endswith("/stats")]
    assert stats[-1]["wheel"]["chi_squared"] == {"value": 39.5, "percent": 77.0}
    assert "wheel" not in stats[0]  # said once read, not before
