"""Operator commands, judged alone: ``reply_to`` and ``correlation_id`` (the
reply convention MQTT 3.1.1 needs) are taken by every command, strictly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wheeld.core.commands import (
    COMMANDS,
    MAX_CORRELATION_ID,
    MAX_GAME_ID,
    CommandError,
    DeclareNoSpin,
    OperatorCommand,
    Recall,
    ReplyAddress,
    parse,
    reply_address,
)

#: A valid payload of each command, before the reply members are added.
VALID: dict[str, dict[str, Any]] = {
    "no_spin": {"note": "chip"},
    "open": {},
    "close": {},
    "recall": {"last": 3},
    "ack": {"alert": "deviation", "operator": "maria"},
}


def test_every_command_has_a_valid_example() -> None:
    assert sorted(VALID) == sorted(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_reply_to_and_correlation_id(name: str) -> None:
    body = {**VALID[name], "reply_to": "wheeld-replies/pit/1", "correlation_id": "c-42"}
    asked = parse(OperatorCommand(name, json.dumps(body).encode()))
    assert asked == parse(OperatorCommand(name, json.dumps(VALID[name]).encode()))


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"reply_to": 5}, "reply_to must be a topic"),
        ({"reply_to": ""}, "reply_to must be a topic"),
        ({"reply_to": ["a"]}, "reply_to must be a topic"),
        ({"reply_to": "x" * 513}, "reply_to must be a topic"),
        ({"reply_to": "wheeld-replies/\ud800"}, "reply_to must be valid Unicode"),
        ({"correlation_id": 42}, "correlation_id must be a string"),
        ({"correlation_id": True}, "correlation_id must be a string"),
        ({"correlation_id": "c" * (MAX_CORRELATION_ID + 1)}, "at most 128 characters"),
    ],
)
@pytest.mark.parametrize("name", COMMANDS)
def test_reply_members_of_another_type_are_refused(
    name: str, members: dict[str, object], why: str
) -> None:
    payload = json.dumps({**VALID[name], **members}).encode()
    with pytest.raises(CommandError, match=why):
        parse(OperatorCommand(name, payload))


def test_a_correlation_id_of_128_characters_is_taken() -> None:
    body = {"correlation_id": "c" * MAX_CORRELATION_ID}
    parse(OperatorCommand("open", json.dumps(body).encode()))


def test_an_unknown_field_names_the_reply_members_among_those_known() -> None:
    with pytest.raises(CommandError, match="known: operator, reply_to, correlation_id"):
        parse(OperatorCommand("open", b'{"colour": "red"}'))


@pytest.mark.parametrize(
    ("payload", "address"),
    [
        (b'{"reply_to": "r/1", "correlation_id": "c"}', ReplyAddress("r/1", "c")),
        (b'{"reply_to": "r/1"}', ReplyAddress("r/1", None)),
        # A refused command is still answered where it asked, so its sender hears why.
        (b'{"reply_to": "r/1", "correlation_id": 7, "colour": 1}', ReplyAddress("r/1", None)),
        (b'{"reply_to": 7, "correlation_id": "c"}', ReplyAddress(None, "c")),
        (b"not json", ReplyAddress()),
        (b"[1]", ReplyAddress()),
        (b"", ReplyAddress()),
        (b"\xff", ReplyAddress()),
    ],
)
def test_the_reply_address_is_read_even_from_a_refused_command(
    payload: bytes, address: ReplyAddress
) -> None:
    assert reply_address(payload) == address


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("no_spin", "game_id"),  # would void whatever game is open
        ("no_spin", "note"),
        ("no_spin", "operator"),
        ("recall", "last"),
        ("ack", "operator"),
        ("open", "correlation_id"),
        ("close", "reply_to"),
    ],
)
def test_a_null_member_is_refused_not_taken_as_absent(name: str, field: str) -> None:
    payload = json.dumps({**VALID[name], field: None}).encode()
    with pytest.raises(CommandError, match=f"{field} must not be null"):
        parse(OperatorCommand(name, payload, sender="pit"))


@pytest.mark.parametrize(
    ("name", "body", "why"),
    [
        # Past JSON's exact integers: SQLite could not even look one up (found: 10**30
        # answered "internal error" and was not journaled).
        ("recall", {"game_id": 10**30}, "game_id must be an integer from 1 to 9007199254740991"),
        ("recall", {"game_id": 2**53}, "game_id must be an integer from 1 to 9007199254740991"),
        ("recall", {"game_id": 0}, "game_id must be an integer from 1"),
        ("recall", {"game_id": -(10**30)}, "game_id must be an integer from 1"),
        ("recall", {"last": 10**30}, "last must be an integer from 1 to 100"),
        ("recall", {"last": -1}, "last must be an integer from 1 to 100"),
        ("no_spin", {"game_id": 10**30}, "game_id must be an integer from 1 to 9007199254740991"),
        ("no_spin", {"game_id": 0}, "game_id must be an integer from 1"),
        ("no_spin", {"game_id": -5}, "game_id must be an integer from 1"),
    ],
)
def test_a_game_id_or_count_out_of_range_is_refused_with_its_reason(
    name: str, body: dict[str, Any], why: str
) -> None:
    with pytest.raises(CommandError, match=f"^{why}"):
        parse(OperatorCommand(name, json.dumps(body).encode(), sender="pit"))


@pytest.mark.parametrize("name", ["recall", "no_spin"])
def test_the_last_exact_game_id_is_taken(name: str) -> None:
    asked = parse(OperatorCommand(name, json.dumps({"game_id": MAX_GAME_ID}).encode()))
    assert isinstance(asked, Recall | DeclareNoSpin)
    assert asked.game_id == MAX_GAME_ID == 2**53 - 1


@pytest.mark.parametrize(
    "payload",
    [b'{"game_id": 5, "game_id": 6}', b'{"note": "a", "operator": "x", "note": "b"}'],
)
def test_a_member_named_twice_is_refused(payload: bytes) -> None:
    """The journal keeps the command's text: a reader must not take the other of the two."""
    with pytest.raises(CommandError, match="appears twice"):
        parse(OperatorCommand("no_spin", payload))


@pytest.mark.parametrize(
    ("body", "sender", "why"),
    [
        ({"note": "chip\nno_spin declared by maria"}, None, "note must not hold control"),
        ({"note": "\x1b[2Jall clear"}, None, r"note must not hold control characters \(U\+001B\)"),
        ({"note": "\u202edeclared"}, None, "note must not hold control"),
        ({"note": "ok", "operator": "maria\r"}, None, "operator must not hold control"),
        ({"note": "ok"}, "maria\x07", "the operator user property must not hold control"),
    ],
)
def test_a_note_or_operator_with_control_characters_is_refused(
    body: dict[str, Any], sender: str | None, why: str
) -> None:
    """They were taken, and recall printed them raw: a forged line, a cleared terminal."""
    with pytest.raises(CommandError, match=f"^{why}"):
        parse(OperatorCommand("no_spin", json.dumps(body).encode(), sender=sender))


def test_a_note_in_any_script_is_taken() -> None:
    asked = parse(
        OperatorCommand("no_spin", json.dumps({"note": "ficha en el cilindro: ñ, 球"}).encode())
    )
    assert isinstance(asked, DeclareNoSpin) and asked.note == "ficha en el cilindro: ñ, 球"
