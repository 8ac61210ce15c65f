"""The API contract (docs/api/): current, and true of what wheeld really publishes and accepts."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from tests.captures.regenerate import golden_pairs
from tests.captures.signed import TEST_KEY
from tests.test_pipeline import Table
from wheeld.cli import main as wheeld
from wheeld.config import Config
from wheeld.contract import asyncapi
from wheeld.contract.commands import COMMANDS, Recalled, Refused, Reply
from wheeld.contract.topics import TOPICS, SchemaVersion, undeclared
from wheeld.core.commands import CommandError, OperatorCommand, parse
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.core.signing import Signer, signature_problem
from wheeld.drivers.wrp import WrpDecoder
from wheeld.shell import identity
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings

API = Path(__file__).parents[1] / "docs" / "api"
#: Members a driver adds to its game events (the Cammegh SS2's own spin number).
DRIVER_MEMBERS = {"spin", "rotor_rpm", "message.spin", "message.rotor_rpm"}


def _valid(model: type[BaseModel], payload: str, *, driver_members: bool = False) -> BaseModel:
    """``payload`` validated by ``model``, with no member the model does not name."""
    try:
        value = model.model_validate_json(payload)
    except ValidationError as exc:
        pytest.fail(f"{model.__name__} refuses {payload[:200]}: {exc}")
    unknown = set(undeclared(value)) - (DRIVER_MEMBERS if driver_members else set())
    assert not unknown, f"{model.__name__}: members no model names: {sorted(unknown)} in {payload}"
    return value


def _topic(topic: str) -> str:
    return topic.rsplit("/", 1)[1]


def test_the_committed_contract_is_current() -> None:
    stale = asyncapi.stale(API)
    assert not stale, (
        f"docs/api is stale ({', '.join(stale)}): run `{asyncapi.REGENERATE}` and commit docs/api"
    )


def test_the_contract_is_the_same_bytes_every_time() -> None:
    assert asyncapi.build() == asyncapi.build()


def test_the_schema_version_is_one_constant() -> None:
    assert get_args(get_args(SchemaVersion)[0]) == (SCHEMA_VERSION,)
    document = json.loads(asyncapi.build()[asyncapi.ASYNCAPI_FILE])
    assert document["asyncapi"] == "3.0.0"
    assert document["info"]["version"] == str(SCHEMA_VERSION)


def test_every_topic_and_command_has_a_channel_a_message_and_a_schema() -> None:
    files = asyncapi.build()
    document = json.loads(files[asyncapi.ASYNCAPI_FILE])
    addresses = {channel["address"] for channel in document["channels"].values()}
    assert {f"{{base}}/{topic}" for topic in TOPICS} <= addresses
    assert {f"{{base}}/command/{name}" for name in COMMANDS} <= addresses
    for message in document["components"]["messages"].values():
        schema = message["payload"]["schema"]["$ref"].removeprefix("./")
        assert schema in files, f"{message['name']}: no {schema}"
        assert json.loads(files[schema])["$schema"].endswith("/2020-12/schema")
    retained = {
        operation["channel"]["$ref"].rsplit("/", 1)[1]: operation["bindings"]["mqtt"]["retain"]
        for operation in document["operations"].values()
        if operation["action"] == "send"
    }
    assert {topic for topic, retain in retained.items() if not retain} == {"game", "alarm"}


def _replay_topics(capture: Path, *options: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert wheeld(["replay", "--topics", *options, str(capture)]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(
    "capture", [capture for capture, _ in golden_pairs()], ids=lambda capture: capture.stem
)
def test_every_replayed_message_matches_its_topic_schema(capture: Path) -> None:
    seen: set[str] = set()
    for options in ((), ("--key", str(TEST_KEY))):
        for message in _replay_topics(capture, *options):
            topic = _topic(message["topic"])
            seen.add(topic)
            payload = json.dumps(message["payload"])
            _valid(TOPICS[topic], payload, driver_members=topic in {"game", "result", "sequence"})
            assert message["payload"]["schema_version"] == SCHEMA_VERSION
    assert {"status", "wheel"} <= seen


def test_schema_version_closes_a_game_payload_before_the_chain() -> None:
    capture = next(cap for cap, _ in golden_pairs() if cap.stem == "studio-games-2025")
    signed = _replay_topics(capture, "--key", str(TEST_KEY))
    events = [m["payload"] for m in signed if _topic(m["topic"]) == "game"]
    assert events
    for event in events:
        keys = list(event)
        assert keys[-5:] == ["schema_version", "seq", "prev", "kid", "sig"]
        assert "spin" in keys[: keys.index("schema_version")]  # the driver's member, before it


def test_the_table_status_alarms_and_replies_of_a_pipeline_match_the_contract() -> None:
    table = Table()
    replies: list[tuple[str, dict[str, Any]]] = []
    for name, body in [
        ("no_spin", b'{"note": "x"}'),  # refused: no game in progress
        ("close", b'{"operator": "boss"}'),
        ("open", b"{}"),
        ("ack", b'{"alert": "deviation", "operator": "boss"}'),  # refused: not set
    ]:
        replies.append((name, table.command(name, body)[0]))
    table.launch()
    replies.append(("no_spin", table.command("no_spin", b'{"note": "chip in the bowl"}')[0]))
    failed = table.pipeline.journal_write_failed(Effects(), "database or disk is full", 1.0)
    table.effects.extend(failed)
    table.effects.extend(table.pipeline.journal_recovered(2.0))
    # The shell (the daemon) adds the version to every reply as it sends it.
    for name, reply in replies:
        _, answers = COMMANDS[name]
        wire = json.dumps({**reply, "schema_version": SCHEMA_VERSION})
        model = next(a for a in answers if (a is Refused) == (reply["ok"] is False))
        _valid(model, wire)
    topics = {_topic(m.topic) for m in table.effects.messages}
    assert {"table", "status", "alarm", "game"} <= topics
    for message in table.effects.messages:
        _valid(TOPICS[_topic(message.topic)], message.payload)
    statuses = [json.loads(m.payload) for m in failed.messages if _topic(m.topic) == "status"]
    assert statuses == [
        {"state": "fault", "fault": "journal_unwritable", "schema_version": SCHEMA_VERSION}
    ]


def test_the_shells_own_alarm_is_built_signed_and_versioned_as_the_others() -> None:
    """``broker_refused`` (raised by the publisher, not journaled) once went out bare:
    no ``schema_version``, no signature, though the contract promised both."""
    signer = Signer.from_file(TEST_KEY)
    pipeline = TablePipeline(
        TableSettings(table="T9", base_topic="wheeld/T9", driver="wrp", epoch="e"),
        WrpDecoder(),
        signer=signer,
    )
    detail = {"topic": "wheeld/T9/game", "reason": "Not authorized"}
    message = pipeline.unjournaled_alarm(1.0, "broker_refused", detail)
    assert message.topic == "wheeld/T9/alarm"
    _valid(TOPICS["alarm"], message.payload)
    payload = json.loads(message.payload)
    assert payload["schema_version"] == SCHEMA_VERSION
    assert signature_problem(payload, signer.public_key) is None


@pytest.mark.parametrize("signed", [False, True])
def test_the_info_payload_matches_the_contract(signed: bool) -> None:
    signer = Signer.generate()
    payload = identity.info_payload(
        Config(),
        wheel={"model": "SS2", "pockets": 37},
        kid=signer.kid if signed else None,
        public_key_pem=signer.public_pem().decode("ascii") if signed else None,
        now=1.5,
        epoch="AAAAAAAAAAAAAAAA",
    )
    if signed:
        payload = signer.sign(payload)
    _valid(TOPICS["info"], json.dumps(payload))


def test_a_recall_reply_matches_the_contract(tmp_path: Path, capsys: Any) -> None:
    from tests.test_verify import games, write_journal

    write_journal(tmp_path, games(3)).close()
    assert wheeld(["recall", "--state-dir", str(tmp_path), "--json"]) == 0
    recalled = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    reply = {"ok": True, "games": recalled, "schema_version": SCHEMA_VERSION}
    _valid(Recalled, json.dumps(reply))


#: Payloads wheeld.core.commands judges, each command's models must judge the same way.
COMMAND_SAMPLES: dict[str, list[bytes]] = {
    "no_spin": [
        b"{}",
        b'{"note": "chip in the bowl", "game_id": 4, "operator": "maria"}',
        b'{"game_id": 7.0}',
        b'{"game_id": true}',
        b'{"game_id": "7"}',
        b'{"note": 5}',
        b'{"note": "' + b"x" * 501 + b'"}',
        b'{"operator": ""}',
        b'{"operator": "' + b"o" * 65 + b'"}',
        b'{"notes": "typo"}',
    ],
    "open": [b"{}", b'{"operator": "boss"}', b'{"game_id": 1}'],
    "close": [b"{}", b'{"operator": "boss"}', b'{"state": "closed"}'],
    "recall": [
        b"{}",
        b'{"last": 100, "game_id": 3}',
        b'{"last": 0}',
        b'{"last": 101}',
        b'{"last": 5.0}',
        b'{"game_id": 0}',
        b'{"frames": true}',
    ],
    "ack": [
        b'{"alert": "deviation", "operator": "boss"}',
        b'{"alert": ""}',
        b'{"alert": 3, "operator": "boss"}',
        b'{"operator": "boss"}',
    ],
}


@pytest.mark.parametrize("name", sorted(COMMAND_SAMPLES))
def test_the_command_models_accept_what_wheeld_accepts(name: str) -> None:
    model, _ = COMMANDS[name]
    for payload in COMMAND_SAMPLES[name]:
        try:
            parse(OperatorCommand(name, payload, sender="pit"))
            accepted = True
        except CommandError:
            accepted = False
        try:
            model.model_validate_json(payload)
            valid = True
        except ValidationError:
            valid = False
        assert valid == accepted, f"{name} {payload!r}: wheeld {accepted}, the model {valid}"


def test_commands_may_carry_reply_to_and_a_correlation_id_of_at_most_128() -> None:
    model, _ = COMMANDS["open"]
    model.model_validate_json('{"reply_to": "wheeld-replies/pit-3", "correlation_id": "42"}')
    with pytest.raises(ValidationError):
        model.model_validate_json(json.dumps({"correlation_id": "c" * 129}))
    reply = {"ok": False, "error": "x", "correlation_id": "42", "schema_version": 1}
    assert isinstance(Refused.model_validate_json(json.dumps(reply)), Reply)


def test_the_written_files_are_what_the_check_compares(tmp_path: Path) -> None:
    from wheeld.contract.__main__ import main

    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "gone.json").write_text("{}")
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert main(["--out", str(tmp_path)]) == 0
    assert not (tmp_path / "schemas" / "gone.json").exists()
    assert main(["--check", "--out", str(tmp_path)]) == 0
    assert asyncapi.stale(tmp_path) == []


def test_the_payload_schemas_hold_with_jsonschema_where_it_is_installed() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    files = asyncapi.build()
    capture = next(cap for cap, _ in golden_pairs() if cap.stem == "fault-frame-loss")
    for message in _replay_topics(capture, "--key", str(TEST_KEY)):
        schema = json.loads(files[f"schemas/{_topic(message['topic'])}.json"])
        jsonschema.Draft202012Validator(schema).validate(message["payload"])
