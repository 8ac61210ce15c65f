"""The API contract (docs/api/): current, and true of what wheeld really publishes and accepts."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from tests.captures.regenerate import golden_pairs
from tests.captures.signed import TEST_KEY
from tests.helpers import clean_game_after_fault
from tests.test_pipeline import BASE, Table
from wheeld.cli import main as wheeld
from wheeld.config import Config
from wheeld.contract import asyncapi, topics
from wheeld.contract.commands import Recalled, Refused, Reply
from wheeld.contract.registry import COMMANDS, TOPICS, topic_at, topic_named
from wheeld.contract.topics import SchemaVersion, undeclared
from wheeld.core import commands as judged_commands
from wheeld.core.commands import CommandError, OperatorCommand, parse
from wheeld.core.game import GameEvent
from wheeld.core.messages import (
    ENDING_EVENTS,
    EVENT_NAMES,
    OPENING_EVENTS,
    PAYLOADS,
    SCHEMA_VERSION,
    EventName,
)
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


def _model(topic: str) -> type[BaseModel]:
    """The registry's model for the message on ``topic`` (``<base>/<name>``)."""
    said = topic_named(_topic(topic))
    assert said is not None, f"{topic}: no topic of the contract"
    return said.model()


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
    assert {topic.address("{base}") for topic in TOPICS.values()} <= addresses
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
    assert {topic for topic, retain in retained.items() if not retain} == {
        "game",
        "alarm",
        "preflight",
    }


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
            driver_members = topic in {"game", "result", "sequence"}
            _valid(_model(message["topic"]), payload, driver_members=driver_members)
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


def test_the_registry_names_a_model_for_every_topic_and_command() -> None:
    for level, topic in TOPICS.items():
        assert topic.name == level and topic_named(topic.level or level) is topic
        assert issubclass(topic.model(), BaseModel)
        assert topic.qos == 1
        assert topic.doc.strip()
    assert topic_at("wheeld/T9", "wheeld/T9/game") is TOPICS["game"]
    assert topic_at("wheeld/T9", "wheeld/T8/game") is None
    assert topic_at("wheeld/T9", "wheeld/T9/command/open") is None
    assert tuple(COMMANDS) == judged_commands.COMMANDS
    for name, command in COMMANDS.items():
        assert issubclass(command.model(), BaseModel)
        done, refused = command.replies()
        assert refused is Refused and issubclass(done, Reply)
        assert command.address("wheeld/T9") == f"wheeld/T9/command/{name}"


def test_the_contract_package_stays_light_for_the_daemon() -> None:
    """The daemon imports the registry on its way to READY: no pydantic, no models."""
    code = (
        "import sys; import wheeld.table.effects, wheeld.shell.publisher;"
        " print(sorted(m for m in sys.modules if m.startswith('wheeld.contract')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['wheeld.contract', 'wheeld.contract.registry']"


def test_every_message_a_pipeline_builds_is_retained_as_the_registry_says() -> None:
    table = Table()
    table.launch()
    table.command("no_spin", b'{"note": "chip in the bowl"}')
    clean_game_after_fault(table.wheel)
    table.feed()
    table.command("close", b'{"operator": "boss"}')
    failed = table.pipeline.journal_write_failed(Effects(), "database or disk is full", 1.0)
    table.effects.extend(failed)
    seen = set()
    for message in table.effects.messages:
        said = topic_at(BASE, message.topic)
        assert said is not None, message.topic
        assert (message.retain, message.qos) == (said.retain, said.qos), message.topic
        seen.add(said.name)
    assert {"game", "result", "history", "sequence", "table", "status", "alarm"} <= seen


def test_the_event_names_are_the_payload_models_own() -> None:
    """One name per game event, on the wire and in the journal: never a class's name."""
    assert set(get_args(EventName)) == {
        model.model_fields["event"].default for model in PAYLOADS.values()
    }
    assert set(EVENT_NAMES) == set(get_args(GameEvent)) == set(PAYLOADS)
    assert set(get_args(EventName)) == OPENING_EVENTS | ENDING_EVENTS
    assert not OPENING_EVENTS & ENDING_EVENTS
    channel: list[type[BaseModel]] = [
        topics.Spinning,
        topics.NoMoreBets,
        topics.Result,
        topics.NoSpin,
    ]
    assert {get_args(model.model_fields["event"].annotation) for model in channel} == {
        (name,) for name in get_args(EventName)
    }
    assert get_args(topics.Sequence.model_fields["event"].annotation) == get_args(EventName)


def test_each_game_event_has_one_class_name_everywhere() -> None:
    """The decision, its payload model, its contract model and a follower's view of it
    are named alike (``Result``, ``ResultPayload``, ``topics.Result``, ``ResultMessage``):
    one name per event in the code, as ``EVENT_NAMES`` gives it one on the wire."""
    from wheeld.followers import consumer

    for decision, payload in PAYLOADS.items():
        name = decision.__name__
        assert payload.__name__ == f"{name}Payload"
        model = getattr(topics, name)
        assert get_args(model.model_fields["event"].annotation) == (EVENT_NAMES[decision],)
        assert issubclass(getattr(consumer, f"{name}Message"), model)


def test_docs_mqtt_says_what_the_registry_says_of_each_topic() -> None:
    """docs/mqtt.md's table of topics: the same retain flag and QoS for each."""
    text = (API.parent / "mqtt.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `<base>/([\w/]+)` \| (yes|no) \| (\d) \|", text, re.MULTILINE)
    said = {level: (retained == "yes", int(qos)) for level, retained, qos in rows}
    assert said == {
        topic.level or name: (topic.retain, topic.qos) for name, topic in TOPICS.items()
    }


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
        done, refused = COMMANDS[name].replies()
        wire = json.dumps({**reply, "schema_version": SCHEMA_VERSION})
        _valid(refused if reply["ok"] is False else done, wire)
    topics = {_topic(m.topic) for m in table.effects.messages}
    assert {"table", "status", "alarm", "game"} <= topics
    for message in table.effects.messages:
        _valid(_model(message.topic), message.payload)
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
    _valid(TOPICS["alarm"].model(), message.payload)
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
    _valid(TOPICS["info"].model(), json.dumps(payload))


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
    model = COMMANDS[name].model()
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
    model = COMMANDS["open"].model()
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
