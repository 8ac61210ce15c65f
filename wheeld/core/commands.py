"""Operator commands received on ``<base>/command/<name>``: what arrived, and what it asks.

Strict, because a command voids games and closes tables: a retained message
(the broker's memory, replayed at every reconnect) and an empty one (what
clears a retained message) are not commands; the payload is a JSON object with
exactly the fields below, of exactly their types (``7.0`` and ``true`` are not
game ids); anything else is refused with one line saying why.

- ``no_spin`` ``{"note": "...", "game_id": N, "operator": "..."}`` (each optional):
  voids the game in progress, reason ``declared``;
- ``close`` ``{"operator": "..."}`` or ``{}``: closes the table and announces
  the last three results;
- ``open`` ``{"operator": "..."}`` or ``{}``: opens the table again;
- ``recall`` ``{"last": N, "game_id": ID, "operator": "..."}`` (each optional):
  the last N games (default 10, at most 100), or those up to game ID, with
  their events and frames, in the reply;
- ``ack`` ``{"alert": "deviation", "operator": "..."}``: an operator (named
  here or by the user property) acknowledges a set alert or fault.

Every command also takes ``reply_to`` (the topic to answer on: MQTT 3.1.1 has
no response topic property) and ``correlation_id`` (a string, echoed in the
reply); ``reply_address`` reads them even from a command that is refused, so
the refusal can be answered.
"""

from __future__ import annotations

import contextlib
import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wheeld.core.signing import DuplicateMember, unique_members

MAX_NOTE = 500
MAX_OPERATOR = 64
MAX_CORRELATION_ID = 128
#: Longest reply topic, in UTF-8 bytes (where replies may go is the publisher's judgement).
MAX_REPLY_TO_BYTES = 512
#: Members every command takes besides its own.
COMMON_MEMBERS = ("operator", "reply_to", "correlation_id")
COMMANDS = ("no_spin", "open", "close", "recall", "ack")
#: The most games one recall reply carries.
MAX_RECALL = 100
DEFAULT_RECALL = 10
#: The highest game id a command may name: JSON's last exact integer (the engine and
#: the journal keep every id below it), so a larger one names no game, and SQLite
#: (whose integers end at 2**63 - 1) could not even look it up.
MAX_GAME_ID = 2**53 - 1


class CommandError(Exception):
    """The command is refused; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """A command as it arrived from the broker, before it is judged."""

    #: The last topic level: ``no_spin``, ``open``, ``close``.
    name: str
    payload: bytes
    #: A retained message is the broker's memory, not an operator's act: never obeyed.
    retained: bool = False
    #: Who sent it: the MQTT 5 user property ``operator`` (or ``user``), else None.
    sender: str | None = None


@dataclass(frozen=True, slots=True)
class DeclareNoSpin:
    """``no_spin``: void the game in progress (only game ``game_id``, when given)."""

    note: str
    game_id: int | None
    operator: str | None


@dataclass(frozen=True, slots=True)
class SetTable:
    """``open`` or ``close``."""

    open: bool
    operator: str | None


@dataclass(frozen=True, slots=True)
class Recall:
    """``recall``: the last ``last`` games, ending with ``game_id`` when given."""

    last: int
    game_id: int | None
    operator: str | None


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """``ack``: an operator acknowledges a set alert or fault, by its code."""

    alert: str
    operator: str


Command = DeclareNoSpin | SetTable | Recall | Acknowledge


@dataclass(frozen=True, slots=True)
class ReplyAddress:
    """Where a command's payload asks its reply to go: ``reply_to`` and ``correlation_id``."""

    reply_to: str | None = None
    correlation_id: str | None = None


def reply_address(payload: bytes) -> ReplyAddress:
    """The payload's ``reply_to`` and ``correlation_id``, each None when absent or not valid.

    Lenient where ``parse`` is strict: a refused command is answered too, so
    its sender learns why (an invalid member is refused by ``parse``).
    """
    try:
        body = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ReplyAddress()
    if not isinstance(body, dict):
        return ReplyAddress()
    # Each on its own: a valid reply_to still hears why a bad correlation_id was refused.
    return ReplyAddress(
        _or_none(_reply_to, body.get("reply_to")),
        _or_none(_correlation_id, body.get("correlation_id")),
    )


def claimed_operator(command: OperatorCommand) -> str:
    """Who a command says it is from, for its sender's rate: the MQTT 5 user property,
    else the payload's ``operator`` (MQTT 3.1.1 has no property), else "" (nobody)."""
    if command.sender:
        return command.sender
    return _payload_operator(command) or ""


def named_operator(command: OperatorCommand) -> str | None:
    """Who a command names, for the journal, refused or not: the payload's ``operator``
    (as an accepted command is journaled), else the MQTT 5 user property, else None."""
    return _payload_operator(command) or command.sender or None


def _payload_operator(command: OperatorCommand) -> str | None:
    """The payload's ``operator`` when it is a string (cut to its longest), read leniently:
    a command refused for another reason still names who sent it."""
    if len(command.payload) <= 4096:
        try:
            body = json.loads(command.payload)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        named = body.get("operator") if isinstance(body, dict) else None
        if isinstance(named, str) and named.strip():
            with contextlib.suppress(CommandError):
                _unicode("operator", named)  # a lone surrogate names nobody
                return named[:MAX_OPERATOR]
    return None


def parse(command: OperatorCommand) -> Command:
    """What ``command`` asks for; raises CommandError when it is not a valid command."""
    if command.name not in COMMANDS:
        raise CommandError(f"unknown command {command.name!r} (known: {', '.join(COMMANDS)})")
    if command.retained:
        raise CommandError("a retained message is not a command")
    if not command.payload.strip():
        raise CommandError("an empty message is not a command")
    try:
        # A member named twice is refused: the journal keeps the text, and a reader
        # of it must not take another of the two than the one carried out.
        body = json.loads(command.payload, object_pairs_hook=unique_members)
    except DuplicateMember as exc:
        raise CommandError(str(exc)) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CommandError("payload is not JSON") from None
    if not isinstance(body, dict):
        raise CommandError("payload must be a JSON object")
    for name, value in body.items():
        # null is no value: {"game_id": null} would void whatever game is open.
        if value is None:
            raise CommandError(f"{name} must not be null (leave it out instead)")
    operator = _operator(body.pop("operator", None)) or _sender(command.sender)
    _reply_to(body.pop("reply_to", None))
    _correlation_id(body.pop("correlation_id", None))
    if command.name == "no_spin":
        _only(command.name, body, ("note", "game_id"))
        note = body.get("note", "")
        if type(note) is not str or len(note) > MAX_NOTE:
            raise CommandError(f"note must be a string of at most {MAX_NOTE} characters")
        _unicode("note", note)
        _plain("note", note)
        return DeclareNoSpin(note, _game_id(body.get("game_id")), operator)
    if command.name == "ack":
        _only(command.name, body, ("alert",))
        alert = body.get("alert")
        if type(alert) is not str or not 0 < len(alert) <= MAX_OPERATOR:
            raise CommandError("alert must name the alert (its code)")
        _unicode("alert", alert)
        if operator is None:
            raise CommandError("ack must name the operator (field operator, or user property)")
        return Acknowledge(alert, operator)
    if command.name == "recall":
        _only(command.name, body, ("last", "game_id"))
        last = body.get("last", DEFAULT_RECALL)
        if type(last) is not int or not 1 <= last <= MAX_RECALL:
            raise CommandError(f"last must be an integer from 1 to {MAX_RECALL}")
        return Recall(last, _game_id(body.get("game_id")), operator)
    _only(command.name, body, ())
    return SetTable(command.name == "open", operator)


def _only(name: str, body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        allowed = ", ".join((*known, *COMMON_MEMBERS))
        raise CommandError(f"{name}: unknown field {unknown[0]!r} (known: {allowed})")


def _game_id(value: object) -> int | None:
    """A game id as ``no_spin`` and ``recall`` take it: 1 to MAX_GAME_ID, or absent."""
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_GAME_ID:
        raise CommandError(f"game_id must be an integer from 1 to {MAX_GAME_ID}")
    return value


def _operator(value: object) -> str | None:
    if value is None:
        return None
    if type(value) is not str or not 0 < len(value) <= MAX_OPERATOR:
        raise CommandError(f"operator must be a string of 1 to {MAX_OPERATOR} characters")
    if not value.strip():
        # Blanks name nobody: an acknowledgement must say who.
        raise CommandError("operator must not be blank")
    _unicode("operator", value)
    _plain("operator", value)
    return value


def _sender(value: str | None) -> str | None:
    """The MQTT user property naming the operator: blanks name nobody either."""
    if value is not None and not value.strip():
        raise CommandError("the operator user property must not be blank")
    if value is not None:
        _plain("the operator user property", value)
    return value


def _reply_to(value: object) -> str | None:
    if value is None:
        return None
    size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0
    if not isinstance(value, str) or not 0 < size <= MAX_REPLY_TO_BYTES:
        raise CommandError(
            f"reply_to must be a topic (a string of 1 to {MAX_REPLY_TO_BYTES} bytes)"
        )
    _unicode("reply_to", value)
    return value


def _correlation_id(value: object) -> str | None:
    if value is None:
        return None
    if type(value) is not str or len(value) > MAX_CORRELATION_ID:
        raise CommandError(
            f"correlation_id must be a string of at most {MAX_CORRELATION_ID} characters"
        )
    _unicode("correlation_id", value)
    return value


def _or_none(check: Callable[[object], str | None], value: object) -> str | None:
    try:
        return check(value)
    except CommandError:
        return None


def _unicode(name: str, value: str) -> None:
    """Refuse what JSON can spell but UTF-8 cannot carry: a lone surrogate (``\\ud800``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandError(f"{name} must be valid Unicode (a lone surrogate is not)") from None


#: Unicode's explicit bidirectional embeddings, overrides and isolates: a note holding
#: U+202E shows its words reversed, so "declared" can read as another reason.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _plain(name: str, value: str) -> None:
    """Refuse control characters: a note or a name is shown one line a game by
    ``wheeld recall`` and on consoles, where a newline forges a line and ESC drives
    the terminal of whoever reads it."""
    for char in value:
        if char in _BIDI_CONTROLS or unicodedata.category(char) == "Cc":
            raise CommandError(f"{name} must not hold control characters (U+{ord(char):04X})")
