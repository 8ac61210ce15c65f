"""The table pipeline in-process: commands, the closed table, an unwritable journal, alarms.

No port, no broker, no clock: the pipeline is fed bytes and times and its
effects are read directly, so each test takes milliseconds.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from tests.helpers import warmed_up
from wheeld.core.commands import OperatorCommand
from wheeld.core.framing import CUT_BYTES
from wheeld.drivers import GreetingSession
from wheeld.drivers.wrp import WrpDecoder, encode_query
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld_simulators.scripted import ScriptedWheel

BASE = "wheeld/T9"


class Table:
    """A pipeline and a scripted WRP/1 wheel, fed line by line as the wheel writes."""

    def __init__(self, wheel: ScriptedWheel | None = None, epoch: str = "unjournaled") -> None:
        self.wheel = wheel or warmed_up()
        self.pipeline = TablePipeline(
            TableSettings(table="T9", base_topic=BASE, driver="wrp", epoch=epoch), WrpDecoder()
        )
        self.fed = 0
        self.effects = Effects()
        self.effects.extend(self.pipeline.start(self.wheel.host_time()))
        self.effects.extend(self.pipeline.on_link_up(self.wheel.host_time()))

    def feed(self) -> Effects:
        """Everything the wheel sent since the last feed."""
        out = Effects()
        for at, frame in self.wheel.lines[self.fed :]:
            out.extend(self.pipeline.on_bytes(frame + b"\r\n", at))
        self.fed = len(self.wheel.lines)
        self.effects.extend(out)
        return out

    def command(
        self, name: str, payload: bytes, *, retained: bool = False, sender: str | None = None
    ) -> tuple[dict[str, Any], Effects]:
        command = OperatorCommand(name, payload, retained=retained, sender=sender)
        reply, effects = self.pipeline.on_command(command, self.wheel.host_time())
        self.effects.extend(effects)
        return reply, effects

    def launch(self) -> int:
        """Open a game; returns its id."""
        self.wheel.pocket(None)
        self.wheel.advance(700)
        self.wheel.launch()
        self.feed()
        game = self.pipeline.engine.game_in_progress
        assert game is not None
        return game


def game_events(effects: Effects) -> list[tuple[int, str]]:
    return [
        (json.loads(m.payload)["game_id"], json.loads(m.payload)["event"])
        for m in effects.messages
        if m.topic == f"{BASE}/game"
    ]


# -- commands are strict -------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "retained", "why"),
    [
        (b'{"note": "chip in the wheel"}', True, "retained"),
        (b"", False, "empty"),
        (b"   ", False, "empty"),
        (b"not json", False, "not JSON"),
        (b"[1]", False, "JSON object"),
        (b'{"note": "x", "colour": "red"}', False, "unknown field 'colour'"),
        (b'{"game_id": 1.0}', False, "game_id must be an integer"),
        (b'{"game_id": true}', False, "game_id must be an integer"),
        (b'{"game_id": "1"}', False, "game_id must be an integer"),
        (b'{"note": 5}', False, "note must be a string"),
        (b'{"game_id": 99}', False, "game 99 is not in progress"),
        (b'{"operator": ""}', False, "operator must be"),
        (b'{"note": "\\ud800"}', False, "note must be valid Unicode"),
        (b'{"note": "\xed\xa0\x80"}', False, "note must be valid Unicode"),
        (b'{"operator": "\\udfff"}', False, "operator must be valid Unicode"),
    ],
)
def test_a_sloppy_no_spin_is_refused_and_the_game_goes_on(
    payload: bytes, retained: bool, why: str
) -> None:
    table = Table()
    game = table.launch()
    reply, effects = table.command("no_spin", payload, retained=retained, sender="pit")
    assert reply["ok"] is False and why in reply["error"]
    assert not effects.games and table.pipeline.engine.game_in_progress == game
    (record,) = effects.commands
    assert not record.accepted and record.sender == "pit" and why in record.outcome


def test_a_valid_no_spin_voids_the_game_and_is_journaled_with_its_operator() -> None:
    table = Table()
    game = table.launch()
    body = json.dumps({"note": "chip in the wheel", "game_id": game, "operator": "boss-7"})
    reply, effects = table.command("no_spin", body.encode(), sender="mqtt-user")
    assert reply == {"ok": True, "game_id": game}
    assert game_events(effects) == [(game, "no_spin")]
    (record,) = effects.commands
    assert record.accepted and record.sender == "boss-7"


@pytest.mark.parametrize(
    ("payload", "sender", "journaled"),
    [
        (b'{"alert": "no_such_alert", "operator": "boss-7"}', None, "boss-7"),
        (b'{"alert": 5, "operator": "boss-7"}', None, "boss-7"),
        (b'{"alert": "deviation", "operator": "boss-7", "extra": 1}', "mqtt-user", "boss-7"),
        (b'{"alert": 5}', "mqtt-user", "mqtt-user"),
        (b"not json", None, None),
    ],
)
def test_a_refused_command_is_journaled_with_whom_it_names(
    payload: bytes, sender: str | None, journaled: str | None
) -> None:
    table = Table()
    reply, effects = table.command("ack", payload, sender=sender)
    assert reply["ok"] is False
    (record,) = effects.commands
    assert not record.accepted and record.sender == journaled


def test_open_and_close_refuse_fields_and_retained_messages() -> None:
    table = Table()
    assert table.command("close", b'{"why": "x"}')[0]["ok"] is False
    assert table.command("close", b"{}", retained=True)[0]["ok"] is False
    assert table.pipeline.table_state == "open"
    reply, effects = table.command("close", b"{}")
    assert reply["ok"] and reply["state"] == "closed" and effects.table_state == "closed"


# -- a closed table settles nothing ---------------------------------------------


def test_a_spin_on_a_closed_table_is_voided_at_once_and_never_a_result() -> None:
    table = Table()
    table.wheel.game("17")
    table.feed()
    table.command("close", b"{}")
    table.wheel.reverse_rotor()
    table.wheel.game("5")
    effects = table.feed()
    events = game_events(effects)
    assert events == [(2, "spinning"), (2, "no_spin")]
    (end,) = [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/game"][1:]
    assert end["reason"] == "declared" and end["note"] == "table closed"
    assert not [m for m in effects.messages if m.topic in (f"{BASE}/result", f"{BASE}/history")]
    table.command("open", b"{}")
    table.wheel.pocket(None)
    table.wheel.advance(table.wheel.rotor_period_ms * 3 + 100)
    table.wheel.game("8")
    assert game_events(table.feed())[-1] == (3, "result")


# -- an unwritable journal -----------------------------------------------------------


def test_games_the_journal_could_not_keep_are_voided_once_when_it_can_again() -> None:
    table = Table()
    game = table.launch()
    table.wheel.run_ball("ccw", [700, 800, 900, 1000, 1200, 1500])
    failed = table.feed()
    alarm = table.pipeline.journal_write_failed(failed, "database or disk is full", 1.0)
    topics = [m.topic for m in alarm.messages]
    assert topics == [f"{BASE}/alarm", f"{BASE}/status"]
    assert json.loads(alarm.messages[1].payload)["state"] == "fault"
    assert "JOURNAL" in table.pipeline.status_line()
    # Nothing new is decided while the journal cannot keep it, and no timer runs.
    assert table.pipeline.next_deadline() is None
    table.wheel.drop("17")
    table.wheel.advance(1500)
    table.wheel.game("3")
    assert table.feed().games == []
    again = table.pipeline.journal_recovered(2.0)
    assert game_events(again) == [(game, "no_spin")]
    told = [m for m in again.messages if m.topic == f"{BASE}/game"]
    assert json.loads(told[0].payload)["reason"] == "controller_restart"
    assert json.loads(again.messages[-1].payload) == {"state": "online", "schema_version": 1}
    assert table.pipeline.journal_recovered(3.0).games == []  # exactly once


def test_closing_the_table_voids_the_game_in_progress() -> None:
    table = Table()
    game = table.launch()
    reply, effects = table.command("close", b'{"operator": "boss"}')
    assert reply["ok"] and game_events(effects) == [(game, "no_spin")]
    table.wheel.run_ball("ccw", [700, 800, 900, 1000, 1200, 1500])
    table.wheel.drop("17")
    table.wheel.advance(1500)
    assert table.feed().games == []


# -- frames: every line that crosses the link, with its game -------------------------------


def test_every_line_from_the_wheel_is_a_frame_of_the_game_it_fell_in() -> None:
    table = Table()
    warm = table.feed()
    assert warm.frames and all(f.direction == "<" and f.game_id is None for f in warm.frames)
    game = table.launch()
    launched = table.effects.frames[len(warm.frames) :]
    # The line that opened the game is already the game's.
    assert launched[-1].game_id == game
    table.wheel.run_ball("ccw", [700, 800, 900, 1000, 1200, 1500])
    table.wheel.drop("17")
    table.wheel.advance(1500)
    at = table.wheel.host_time()
    wire = b"".join(frame + b"\r\n" for _, frame in table.wheel.lines[table.fed :])
    middle = len(wire) // 2 + 3  # in any chunking: a line cut across two reads
    out = table.pipeline.on_bytes(wire[:middle], at)
    out.extend(table.pipeline.on_bytes(wire[middle:], at))
    sent = [frame for _, frame in table.wheel.lines[table.fed :]]
    assert [f.line for f in out.frames] == sent  # whole lines, without CR LF
    # The game's lines up to the one that settled it (its own), then no game's.
    games = [f.game_id for f in out.frames]
    settled = games.count(game)
    assert settled > 1 and games == [game] * settled + [None] * (len(games) - settled)
    assert game_events(out)[-1] == (game, "result")


def test_a_line_without_end_is_journaled_in_pieces() -> None:
    table = Table()
    noise = b"x" * (CUT_BYTES * 2 + 10)
    out = table.pipeline.on_bytes(noise, 1.0)
    assert [len(f.line) for f in out.frames] == [CUT_BYTES, CUT_BYTES]
    rest = table.pipeline.on_bytes(b"\r\n", 2.0)
    assert [f.line for f in rest.frames] == [b"x" * 10]


def test_lines_written_to_the_wheel_are_frames_too() -> None:
    pipeline = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp"),
        WrpDecoder(),
        GreetingSession(encode_query()),
    )
    out = pipeline.on_link_up(5.0)
    assert out.writes == [encode_query()]
    assert [(f.at, f.direction, f.line, f.game_id) for f in out.frames] == [
        (5.0, ">", encode_query().rstrip(b"\r\n"), None)
    ]


def test_a_clock_step_moves_the_link_timeout_with_it_and_raises_an_alarm() -> None:
    table = Table()
    table.launch()
    deadline = table.pipeline.next_deadline()
    assert deadline is not None
    effects = table.pipeline.on_clock_step(20.0, deadline + 18.0)
    assert table.pipeline.next_deadline() == deadline + 20.0
    (alarm,) = [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/alarm"]
    assert (alarm["alarm"], alarm["step_s"]) == ("clock_step", 20.0)
    assert table.pipeline.on_timer(deadline + 18.0).games == []


def _alarms(effects: Effects) -> list[dict[str, Any]]:
    return [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/alarm"]


def test_a_lost_link_is_a_fault_set_then_cleared_with_both_ends() -> None:
    table = Table()
    down = table.pipeline.on_link_down("port closed", 100.0)
    (set_,) = _alarms(down)
    assert (set_["alarm"], set_["state"], set_["why"]) == ("wheel_link_lost", "set", "port closed")
    assert _alarms(table.pipeline.on_link_down("again", 101.0)) == []  # set once
    assert _alarms(table.pipeline.on_link_up(103.0)) == []  # an open port is not a wheel heard
    table.wheel.heartbeat()
    (clear,) = _alarms(table.pipeline.on_bytes(table.wheel.lines[-1][1] + b"\r\n", 104.5))
    assert (clear["state"], clear["since"], clear["duration_s"]) == ("clear", set_["since"], 4.5)
    assert clear["until"] > clear["since"]


def test_journal_trouble_is_cleared_in_the_journal_with_when_it_began() -> None:
    table = Table()
    failed = table.pipeline.journal_write_failed(Effects(), "disk full", 10.0)
    assert _alarms(failed)[0]["state"] == "set"
    (clear,) = _alarms(table.pipeline.journal_recovered(70.0))
    assert (clear["alarm"], clear["state"], clear["duration_s"]) == (
        "journal_unwritable",
        "clear",
        60.0,
    )


def test_an_open_cover_is_one_fault_with_both_ends() -> None:
    table = Table()
    table.wheel.incident("cover_open")
    table.wheel.advance(5000)
    table.wheel.incident("cover_closed")
    alarms = _alarms(table.feed())
    assert [(a["alarm"], a["state"]) for a in alarms] == [
        ("cover_open", "set"),
        ("cover_open", "clear"),
    ]


def test_a_broker_that_saw_higher_game_ids_moves_ours_past_them() -> None:
    table = Table()
    assert table.pipeline.on_broker_result(b"not json", 1.0).messages == []
    assert table.pipeline.on_broker_result(b'{"game_id": true}', 1.0).messages == []
    effects = table.pipeline.on_broker_result(
        b'{"event": "result", "game_id": 107, "table": "T9"}', 1.0
    )
    (alarm,) = _alarms(effects)
    assert (alarm["alarm"], alarm["next_game_id"]) == ("game_ids_behind_broker", 108)
    assert effects.state is not None and effects.state.next_game_id == 108
    assert table.launch() == 108
    # Mid-game: the open game keeps its id, the next one goes past the broker's.
    (alarm,) = _alarms(table.pipeline.on_broker_result(b'{"game_id": 200, "table": "T9"}', 2.0))
    assert alarm["next_game_id"] == 201 and table.pipeline.engine.game_in_progress == 108
    older = b'{"game_id": 5, "table": "T9"}'  # ours, older
    assert table.pipeline.on_broker_result(older, 2.0).messages == []


def test_a_table_taken_over_with_another_journal_goes_on_past_the_broker_sequence() -> None:
    """A game only launched (or voided: no result retained) is in <base>/sequence: a
    daemon with a lost or another journal never reuses its id nor its seq."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    first = Table()
    first.pipeline.signer = signer
    launched = first.launch()  # the first daemon dies here: only `spinning` went out
    said = [m for m in first.effects.messages if m.topic == f"{BASE}/sequence"]
    assert all(m.retain for m in said)
    last = json.loads(said[-1].payload)
    games = [json.loads(m.payload) for m in first.effects.messages if m.topic == f"{BASE}/game"]
    assert (last["game_id"], last["event"], last["seq"]) == (launched, "spinning", len(games))
    assert last["digest"] == first.pipeline.chain.prev

    standby = Table(epoch="standby-journal")  # a fresh journal: ids and seqs would start at 1
    standby.pipeline.signer = signer
    effects = standby.pipeline.on_broker_sequence(said[-1].payload.encode(), 1.0)
    assert {a["alarm"] for a in _alarms(effects)} == {"game_ids_behind_broker", "seq_behind_broker"}
    # What the marker names may not have gone out: it is said again, word for word, then
    # the game the first daemon left open is void, in the chain after it.
    told = [m.payload for m in effects.messages if m.topic == f"{BASE}/game"]
    assert told[0] == json.dumps(last["message"], separators=(",", ":"))
    voided = [json.loads(payload) for payload in told[1:]]
    assert [(v["game_id"], v["event"], v["reason"]) for v in voided] == [
        (launched, "no_spin", "controller_restart")
    ]
    assert (voided[0]["seq"], voided[0]["prev"]) == (last["seq"] + 1, last["digest"])
    # At the time it was judged, for ``verify`` (the journal reads no clock for it).
    assert effects.chain_floor == (last["seq"], last["digest"], 1.0)
    assert standby.launch() == launched + 1
    spinning = [
        json.loads(m.payload) for m in standby.effects.messages if m.topic == f"{BASE}/game"
    ][-1]
    assert spinning["seq"] == last["seq"] + 2
    for junk in (
        b"",
        b"[]",
        b'{"game_id": "7", "seq": true}',
        b"{" * 5000,
        b'{"game_id": 9007199254740991, "seq": 9007199254740991, "digest": "' + b"A" * 43 + b'"}',
        b'{"game_id": 9999, "seq": 9999, "digest": null, "table": "T9"}',  # no digest: id only
        b'{"game_id": 99999, "table": "OTHER"}',  # another table's
        b'{"game_id": 99999}',  # no table: no evidence about this one
        b'{"game_id": 4503599627370497, "seq": 4503599627370497, "table": "T9", "digest": "'
        + b"A" * 43
        + b'"}',  # past 2**52: too near the end of JSON's integers to go on from
    ):
        moved = standby.pipeline.on_broker_sequence(junk, 2.0)
        assert {a["alarm"] for a in _alarms(moved)} <= {"game_ids_behind_broker"}, junk
        assert standby.pipeline.chain.seq < 9999
        assert standby.pipeline.engine.state.next_game_id < 2**53
    assert standby.pipeline.engine.state.next_game_id == 10000  # only from the one with an id


def test_each_outcome_refreshes_the_retained_stats() -> None:
    from wheeld.core.stats import Statistics

    table = Table()
    table.pipeline.statistics = Statistics(37)
    table.wheel.game("17")
    effects = table.feed()
    (stats,) = [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/stats"]
    assert [m.retain for m in effects.messages if m.topic == f"{BASE}/stats"] == [True]
    assert stats["chi_squared"]["games"] == 1 and stats["chi_squared"]["p_value"] is None


def test_repeated_no_spins_of_one_cause_raise_an_alert_cleared_by_a_result() -> None:
    table = Table()
    table.wheel.game("17")  # a result: rotor cw
    table.feed()
    alarms: list[dict[str, Any]] = []
    for _ in range(3):  # the rotor does not reverse: direction_not_alternated, each time
        table.wheel.pocket(None)
        table.wheel.advance(table.wheel.rotor_period_ms * 3 + 100)
        table.wheel.game("5")
        alarms += _alarms(table.feed())
    (alert,) = [a for a in alarms if a["alarm"] == "repeated_no_spins"]
    assert (alert["state"], alert["reason"], alert["count"]) == (
        "set",
        "direction_not_alternated",
        3,
    )
    reply, effects = table.command("ack", b'{"alert": "repeated_no_spins", "operator": "boss"}')
    assert reply["ok"] and _alarms(effects)[0]["state"] == "acknowledged"
    assert table.command("ack", b'{"alert": "repeated_no_spins"}')[0]["error"].startswith(
        "ack must name the operator"
    )
    table.wheel.reverse_rotor()
    table.wheel.game("8")
    (clear,) = [a for a in _alarms(table.feed()) if a["alarm"] == "repeated_no_spins"]
    assert clear["state"] == "clear" and clear["since"] == alert["since"]
    assert table.command("ack", b'{"alert": "deviation", "operator": "boss"}')[0]["ok"] is False


def test_a_deviation_over_the_whole_series_is_an_alert() -> None:
    from wheeld.core.stats import Statistics

    table = Table()
    statistics = Statistics(37)
    for _ in range(200):
        statistics.add({"event": "result", "number": "17", "ts": "2025-01-01T00:00:00Z"})
    table.pipeline.statistics = statistics
    table.wheel.game("17")
    (alert,) = [a for a in _alarms(table.feed()) if a["alarm"] == "deviation"]
    assert alert["state"] == "set" and alert["p_value"] < 0.001 and alert["games"] == 201


def test_a_signed_retained_result_moves_the_chain_past_its_seq_when_no_sequence_is_kept() -> None:
    """A broker from before <base>/sequence, or one whose sequence was cleared: the
    signed result still says the seq consumers saw, and the chain goes on after it."""
    from wheeld.core.signing import Signer, digest

    signer = Signer.generate()
    first = Table()
    first.pipeline.signer = signer
    first.wheel.game("17")
    first.feed()
    (result,) = [m for m in first.effects.messages if m.topic == f"{BASE}/result"]
    body = json.loads(result.payload)
    standby = Table()
    standby.pipeline.signer = signer
    effects = standby.pipeline.on_broker_result(result.payload.encode(), 1.0)
    assert {a["alarm"] for a in _alarms(effects)} == {"game_ids_behind_broker", "seq_behind_broker"}
    assert standby.pipeline.chain.seq == body["seq"] + 1
    assert standby.pipeline.chain.prev == digest(body)
    other = json.dumps({**body, "table": "T8"}).encode()  # another table's: no evidence
    assert Table().pipeline.on_broker_result(other, 1.0).messages == []


def test_a_retained_result_that_cannot_be_canonicalised_is_no_evidence() -> None:
    """A 'signed' result RFC 8785 cannot encode (NaN, an integer past 2**53, a lone
    surrogate) is dropped with one log line: it crashed the start, then jammed publishing."""
    from wheeld.core.signing import Signer

    table = Table()
    table.pipeline.signer = Signer.generate()
    for junk in ("NaN", "9007199254740993", '"\\ud800"'):
        payload = (
            '{"event": "result", "game_id": 40, "table": "T9", "seq": 100, "sig": "x",'
            f' "n": {junk}}}'
        ).encode()
        effects = table.pipeline.on_broker_result(payload, 1.0)
        assert effects.messages == [] and table.pipeline.chain.seq == 1
        assert [record.event for record in effects.logs] == ["broker's retained result ignored"]


# -- intent first: a successor and the marker -------------------------------------------


def _signed_table(epoch: str, signer: Any) -> Table:
    table = Table(epoch=epoch)
    table.pipeline.signer = signer
    return table


def _markers(effects: Effects) -> list[dict[str, Any]]:
    return [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/sequence"]


def _ends_with_a_result(table: Table) -> dict[str, Any]:
    """The ball of the game launched runs and rests on 17: the result's marker."""
    _result_of(table, "ccw", "17")
    return _markers(table.effects)[-1]


def test_the_marker_names_each_game_message_before_it_goes_out() -> None:
    from wheeld.core.signing import Signer

    table = _signed_table("journal-aaaa", Signer.generate())
    table.launch()
    topics = [m.topic for m in table.effects.messages if m.topic != f"{BASE}/stats"]
    game = topics.index(f"{BASE}/game")
    assert topics[game - 1] == f"{BASE}/sequence"  # intent first
    (marker,) = _markers(table.effects)
    sent = next(m.payload for m in table.effects.messages if m.topic == f"{BASE}/game")
    assert json.dumps(marker["message"], separators=(",", ":")) == sent
    assert marker["epoch"] == "journal-aaaa" == marker["message"]["epoch"]


def test_a_marker_of_our_own_journal_changes_nothing() -> None:
    from wheeld.core.signing import Signer

    table = _signed_table("journal-aaaa", Signer.generate())
    table.launch()
    (marker,) = _markers(table.effects)
    effects = table.pipeline.on_broker_sequence(json.dumps(marker).encode(), 5.0)
    assert effects.messages == [] and effects.games == []


def test_a_result_another_journal_announced_is_said_again_never_contradicted() -> None:
    """Killed between the marker and the result: a successor says the result, voids nothing."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    first = _signed_table("journal-aaaa", signer)
    game = first.launch()
    result = _ends_with_a_result(first)
    assert (result["game_id"], result["event"]) == (game, "result")
    standby = _signed_table("journal-bbbb", signer)
    effects = standby.pipeline.on_broker_sequence(json.dumps(result).encode(), 9.0)
    told = [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/game"]
    assert told == [result["message"]]  # said again, and no no_spin for it
    assert any(m.topic == f"{BASE}/result" and m.retain for m in effects.messages)
    # Alternation goes on from the table's last result, not the standby's own.
    assert standby.pipeline.engine.state.last_result_rotor == result["message"]["rotor_direction"]
    standby.wheel.reverse_rotor()
    assert standby.launch() == game + 1


@pytest.mark.parametrize(
    "forge",
    [
        lambda marker: marker.pop("message"),
        lambda marker: marker["message"].update(game_id=marker["game_id"] + 1),
        lambda marker: marker.update(seq=marker["seq"] + 100),
        lambda marker: marker.update(game_id=900, event="spinning"),
        lambda marker: marker["message"].update(sig="A" * 86),
    ],
    ids=["no-message", "another-message", "another-seq", "another-game", "bad-signature"],
)
def test_a_marker_this_table_cannot_vouch_for_moves_nothing(forge: Any) -> None:
    """Retained state anyone allowed to publish there could forge: nothing is said, voided,
    dropped or moved on for it; one log line says why."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    first = _signed_table("journal-aaaa", signer)
    first.launch()
    marker = _markers(first.effects)[-1]
    forge(marker)
    standby = _signed_table("journal-bbbb", signer)
    before = (standby.pipeline.chain, standby.pipeline.engine.state.next_game_id)
    effects = standby.pipeline.on_broker_sequence(json.dumps(marker).encode(), 9.0)
    assert effects.messages == [] and effects.games == [] and not effects.superseded
    assert (standby.pipeline.chain, standby.pipeline.engine.state.next_game_id) == before
    assert [r.fields["why"] for r in effects.logs if "ignored" in r.event]


def test_a_marker_with_nan_is_not_said_again_at_an_unsigned_table() -> None:
    """Found: at an unsigned table a marker whose message held NaN (Python's, not JSON's)
    was said again as it stood: ``NaN`` on <base>/game, not JSON."""
    first = Table(epoch="journal-aaaa")
    first.launch()
    text = json.dumps(_markers(first.effects)[-1])
    text = text.replace('"schema_version": 1}, "table"', '"schema_version": 1, "x": NaN}, "table"')
    assert "NaN" in text
    effects = Table(epoch="journal-bbbb").pipeline.on_broker_sequence(text.encode(), 9.0)
    assert effects.messages == [] and not effects.superseded
    assert [r.fields["why"] for r in effects.logs if "ignored" in r.event] == ["not JSON"]


def test_another_key_cannot_vouch_for_a_marker() -> None:
    from wheeld.core.signing import Signer

    first = _signed_table("journal-aaaa", Signer.generate())
    first.launch()
    standby = _signed_table("journal-bbbb", Signer.generate())  # a standby needs the table's key
    effects = standby.pipeline.on_broker_sequence(
        json.dumps(_markers(first.effects)[-1]).encode(), 9.0
    )
    assert effects.messages == [] and not effects.superseded


def test_a_marker_taken_over_from_is_not_taken_over_from_twice() -> None:
    """Read again at the reconnect after the start (or the next start): nothing happens twice."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    first = _signed_table("journal-aaaa", signer)
    first.launch()
    marker = json.dumps(_markers(first.effects)[-1]).encode()
    standby = _signed_table("journal-bbbb", signer)
    taken = standby.pipeline.on_broker_sequence(marker, 9.0)
    assert taken.superseded and taken.taken_from is not None
    assert standby.pipeline.on_broker_sequence(marker, 10.0).messages == []
    restarted = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp", epoch="journal-bbbb"),
        WrpDecoder(),
        signer=signer,
        taken_from=taken.taken_from,
    )
    assert restarted.on_broker_sequence(marker, 11.0).messages == []


def test_an_older_marker_of_the_journal_taken_over_from_moves_nothing() -> None:
    """Found: a broker that came back with an older database (mosquitto saves it every
    so often) held an earlier marker of the controller a standby had taken over from;
    the standby took over again: it voided a game that controller had ended (a second
    end for it) and let go of its own unsent results."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    first = _signed_table("journal-aaaa", signer)
    game = first.launch()
    launched = json.dumps(_markers(first.effects)[-1]).encode()
    result = _ends_with_a_result(first)
    assert (result["game_id"], result["event"]) == (game, "result")
    standby = _signed_table("journal-bbbb", signer)
    assert standby.pipeline.on_broker_sequence(json.dumps(result).encode(), 9.0).superseded
    # The broker forgets the last markers: the launch's is what it holds now.
    effects = standby.pipeline.on_broker_sequence(launched, 10.0)
    assert effects.messages == [] and effects.games == [] and not effects.superseded


def _result_of(table: Table, ball: Literal["cw", "ccw"], number: str) -> None:
    table.wheel.run_ball(ball, [700, 800, 900, 1000, 1200, 1500])
    table.wheel.drop(number)
    table.wheel.advance(1500)
    table.feed()


def test_a_standby_that_took_over_shows_the_tables_numbers_not_its_own_old_ones() -> None:
    """Found: a standby's history after a takeover is its own journal's (its last stint's
    numbers, on the marquee as the latest), without the result it said again itself."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    standby = _signed_table("journal-bbbb", signer)
    standby.launch()
    _result_of(standby, "ccw", "8")  # its own stint, long ago
    standby.wheel.reverse_rotor()
    first = _signed_table("journal-aaaa", signer)
    first.launch()
    result = _ends_with_a_result(first)  # 17, the table's latest
    standby.pipeline.on_broker_sequence(json.dumps(result).encode(), 99.0)
    standby.effects = Effects()
    standby.launch()
    _result_of(standby, "cw", "5")
    (history,) = [m.payload for m in standby.effects.messages if m.topic == f"{BASE}/history"]
    assert json.loads(history)["numbers"][:2] == ["5", "17"]


def _a_standby_with_a_number_of_its_own() -> tuple[Table, Table]:
    """A standby whose journal ended a game on 8, and the table's other controller, a
    game launched."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    standby = _signed_table("journal-bbbb", signer)
    standby.launch()
    _result_of(standby, "ccw", "8")
    first = _signed_table("journal-aaaa", signer)
    first.launch()
    return standby, first


def _took_over(retained_history: bytes | None) -> tuple[Table, Effects]:
    """A standby with a number of its own (8) takes over a table whose latest are 17, 3."""
    standby, first = _a_standby_with_a_number_of_its_own()
    _result_of(first, "ccw", "3")
    first.wheel.reverse_rotor()
    first.launch()
    _result_of(first, "cw", "17")
    result = _markers(first.effects)[-1]
    assert (result["event"], result["message"]["number"]) == ("result", "17")
    marker = json.dumps(result).encode()
    return standby, standby.pipeline.on_broker_sequence(marker, 99.0, retained_history)


def _histories(effects: Effects) -> list[list[str]]:
    return [json.loads(m.payload)["numbers"] for m in effects.messages if m.topic.endswith("y")]


def test_a_takeover_adopts_the_tables_retained_history_whole_and_says_it() -> None:
    retained = json.dumps({"numbers": ["17", "3"], "schema_version": 1}).encode()
    standby, taken = _took_over(retained)
    assert _histories(taken) == [["17", "3"]] and taken.taken_history == ["17", "3"]
    assert not [line for line in taken.logs if "history" in line.event]
    standby.effects = Effects()
    standby.launch()
    _result_of(standby, "ccw", "5")  # its rotor turns against the table's last result's
    assert _histories(standby.effects) == [["5", "17", "3"]]


def test_without_a_retained_history_a_takeover_shows_the_result_it_said_again() -> None:
    _, taken = _took_over(None)
    assert _histories(taken) == [["17"]] and taken.taken_history == ["17"]


@pytest.mark.parametrize(
    ("retained", "why"),
    [
        (b"not json", "not JSON"),
        (b"[" * 50_000, "not JSON"),
        (b'{"numbers": NaN}', "not JSON"),
        (b"null", "no list of numbers"),
        (b'["17"]', "no list of numbers"),
        (b'{"numbers": "17"}', "no list of numbers"),
        (b'{"numbers": []}', "0 numbers"),
        (json.dumps({"numbers": ["17"] * 1001}).encode(), "1001 numbers"),
        (b'{"numbers": ["17", "99"]}', "not every number a pocket of this wheel"),
        (b'{"numbers": ["17", 3]}', "not every number a pocket of this wheel"),
        (b'{"numbers": ["8", "17"]}', "its latest is not the result taken over from"),
    ],
)
def test_a_garbage_retained_history_is_ignored_with_one_line(retained: bytes, why: str) -> None:
    _, taken = _took_over(retained)
    assert _histories(taken) == [["17"]] and taken.taken_history == ["17"]
    (ignored,) = [line for line in taken.logs if "history" in line.event]
    assert ignored.event == "broker's retained history ignored" and ignored.level == "warning"
    assert ignored.fields["why"] == why


def test_a_takeover_at_a_launch_shows_none_of_the_standbys_own_numbers() -> None:
    """The table's latest result is unknown there: no number rather than old ones."""
    standby, first = _a_standby_with_a_number_of_its_own()
    launched = json.dumps(_markers(first.effects)[-1]).encode()
    taken = standby.pipeline.on_broker_sequence(launched, 99.0, b'{"numbers": ["8"]}')
    assert _histories(taken) == [[]] and taken.taken_history == []


def test_a_game_our_last_run_left_open_is_forgotten_when_a_successor_went_past_it() -> None:
    """Ours was killed mid-game; a standby voided it and played on: we must not end it again."""
    from wheeld.core.engine import EngineState
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    back = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp", epoch="journal-aaaa"),
        WrpDecoder(),
        state=EngineState(next_game_id=4, open_game=3),
        signer=signer,
    )
    standby = _signed_table("journal-bbbb", signer)
    standby.pipeline.engine.state.next_game_id = 3
    assert standby.launch() == 3
    reply, _ = standby.command("no_spin", b'{"operator": "boss"}')
    assert reply["ok"]
    marker = _markers(standby.effects)[-1]
    assert (marker["game_id"], marker["event"]) == (3, "no_spin")
    effects = back.on_broker_sequence(json.dumps(marker).encode(), 2.0)
    effects.extend(back.start(3.0))
    ended = [json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/game"]
    assert [(e["game_id"], e["event"], e["epoch"]) for e in ended] == [
        (3, "no_spin", "journal-bbbb")  # the standby's, said again: no second end of ours
    ]
    assert back.engine.state.open_game is None and effects.state is not None


def test_line_noise_is_set_past_its_threshold_and_cleared_under_half() -> None:
    table = Table()
    at = table.wheel.host_time()
    garbage = b"\xff" * 100 + b"\n"
    effects = Effects()
    for step in range(30):  # 3 kB in 15 s: past 2 kB a minute
        effects.extend(table.pipeline.on_bytes(garbage, at + step / 2))
    (raised,) = [a for a in _alarms(effects) if a["alarm"] == "line_noise"]
    assert raised["state"] == "set" and raised["bytes_per_minute"] > 2048
    assert "line_noise" in table.pipeline.faults
    assert all(f.noise for f in effects.frames)
    later = at + 200  # a quiet minute: good frames only
    table.wheel.advance(1000)
    frames = table.pipeline.on_bytes(b"$WRHBT,1,1000*5F\n", later)
    (cleared,) = [a for a in _alarms(frames) if a["alarm"] == "line_noise"]
    assert cleared["state"] == "clear"


def test_a_result_the_journal_could_not_keep_leaves_no_trace_in_what_follows() -> None:
    """Not in the history, not in the statistics, not in alternation: it is voided once the
    journal writes again, as if it had never been (found: a board showing a number no
    consumer got, and the next game voided as not alternated against it)."""
    from wheeld.core.stats import Statistics

    table = Table()
    table.pipeline = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp", after_commit=True),
        WrpDecoder(),
        statistics=Statistics(37),
    )
    table.pipeline.start(table.wheel.host_time())
    table.pipeline.on_link_up(table.wheel.host_time())
    rotor_before = table.pipeline.engine.state.last_result_rotor
    table.launch()
    table.pipeline.committed()  # the launch was kept
    table.wheel.run_ball("ccw", [700, 800, 900, 1000, 1200, 1500])
    table.wheel.drop("24")
    table.wheel.advance(1500)
    failed = table.feed()
    assert [g.number for g in failed.games if g.number] == ["24"]
    table.pipeline.journal_write_failed(failed, "database or disk is full", 1.0)
    assert list(table.pipeline.history) == []
    assert table.pipeline.statistics is not None and table.pipeline.statistics.results == 0
    assert table.pipeline.engine.state.last_result_rotor == rotor_before
    again = table.pipeline.journal_recovered(2.0)
    assert [
        (json.loads(m.payload)["event"]) for m in again.messages if m.topic == f"{BASE}/game"
    ] == ["no_spin"]
    assert all(m.topic != f"{BASE}/history" for m in again.messages)


def test_a_flood_of_one_off_alarms_is_counted_not_said_each() -> None:
    """Frame-like garbage raised thousands of frame_loss alarms a minute, each journaled,
    signed and published: past ten, one every six seconds, the next saying how many."""
    table = Table()
    said = Effects()
    for n in range(100):
        said.extend(table.pipeline.alarm(1000.0 + n / 100, "frame_loss", lost=1))
    assert len(_alarms(said)) == 10 and len(said.alarms) == 10
    later = table.pipeline.alarm(1007.0, "frame_loss", lost=1)
    (alarm,) = _alarms(later)
    assert alarm["repeated"] == 90
    # Faults that are set and cleared are never held back: both ends are needed.
    faults = Effects()
    for n in range(30):
        faults.extend(table.pipeline.on_link_down("gone", 2000.0 + n))
        faults.extend(table.pipeline.on_link_up(2000.5 + n))
        faults.extend(table.pipeline.on_bytes(b"$WRHBT,1,1000*5F\n", 2000.6 + n))
    states = [a["state"] for a in _alarms(faults) if a["alarm"] == "wheel_link_lost"]
    assert states.count("set") == 30 and states.count("clear") == 30


# -- a hello's pockets, by the driver's protocol -----------------------------------------


@pytest.mark.parametrize("pockets", [39, 40, 36])
def test_a_wrp_hello_of_a_count_wrp_has_not_is_pockets_unsupported(pockets: int) -> None:
    """WRP/1's HEL announces 37 or 38 pockets. Found by fuzzing: a HEL of 40 (an SS2's
    count, which the engine takes from a Cammegh) set the layout, and a POC 0000 then
    published the result "0000". Any other count raises the alarm and changes nothing."""
    wheel = ScriptedWheel(pockets=pockets)
    wheel.hello()
    wheel.advance(3000)
    table = Table(wheel)
    effects = table.feed()
    said = [json.loads(a.payload) for a in effects.alarms if a.code == "pockets_unsupported"]
    assert said and said[0]["pockets"] == pockets, effects.alarms
    assert table.pipeline.engine.layout.pockets == 37


def test_a_wrp_hello_of_38_sets_a_double_zero_wheel() -> None:
    wheel = ScriptedWheel(pockets=38)
    wheel.hello()
    wheel.advance(3000)
    table = Table(wheel)
    table.feed()
    assert table.pipeline.engine.layout.pockets == 38
