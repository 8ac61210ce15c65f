"""Operator commands on ``<base>/command/<name>`` and the replies to them, as models.

``wheeld.core.commands`` judges what arrives, strictly and by hand (its one-line
reasons are part of the interface); these models say the same thing for a
client and for the JSON Schemas: exact members, exact types, nothing else.
``wheeld.contract.registry.COMMANDS`` names, for each command, its model and its reply.
A reply goes to the requester's response topic (MQTT 5) or ``reply_to``,
under ``mqtt.reply_prefix``, with the request's ``correlation_id``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from wheeld.contract.topics import Pocket, SchemaVersion, TableId, Timestamp
from wheeld.core.commands import (
    DEFAULT_RECALL,
    MAX_CORRELATION_ID,
    MAX_GAME_ID,
    MAX_NOTE,
    MAX_OPERATOR,
    MAX_RECALL,
)

Operator = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_OPERATOR,
        description="who acts; wins over the MQTT 5 user property operator (or user)",
    ),
]
ReplyTo = Annotated[
    str,
    Field(
        min_length=1,
        description="where to reply, as the MQTT 5 response topic (under mqtt.reply_prefix"
        " when it is set)",
    ),
]
CorrelationId = Annotated[
    str,
    Field(max_length=MAX_CORRELATION_ID, description="echoed in the reply"),
]
GameId = Annotated[int, Field(ge=1)]
#: A game a command names: JSON's exact integers only, as ``wheeld.core.commands`` checks.
CommandGameId = Annotated[int, Field(ge=1, le=MAX_GAME_ID)]


class Command(BaseModel):
    """A command payload: a JSON object with exactly these members, of exactly these types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    operator: Operator | SkipJsonSchema[None] = None
    reply_to: ReplyTo | SkipJsonSchema[None] = None
    correlation_id: CorrelationId | SkipJsonSchema[None] = None


class NoSpinCommand(Command):
    """``no_spin``: void the game in progress (only game ``game_id``, when given)."""

    note: Annotated[str, Field(max_length=MAX_NOTE)] = Field(
        default="", description="why: published as the no_spin's note"
    )
    game_id: CommandGameId | SkipJsonSchema[None] = Field(
        default=None, description="void only this game: a queued command cannot void a later one"
    )


class OpenCommand(Command):
    """``open``: open the table again."""


class CloseCommand(Command):
    """``close``: close the table (the game in progress is voided) and announce the last three."""


class RecallCommand(Command):
    """``recall``: the last ``last`` games, ending with ``game_id`` when given."""

    last: Annotated[int, Field(ge=1, le=MAX_RECALL)] = DEFAULT_RECALL
    game_id: CommandGameId | SkipJsonSchema[None] = None


class AckCommand(Command):
    """``ack``: acknowledge a set alert or fault; needs the operator, here or by user property."""

    alert: Annotated[str, Field(min_length=1, max_length=MAX_OPERATOR)] = Field(
        description="the alert's code, e.g. deviation"
    )


# -- replies ---------------------------------------------------------------------------------


class Reply(BaseModel):
    """A reply: ``ok``, what came of it, the request's ``correlation_id``, and the version."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    correlation_id: CorrelationId | SkipJsonSchema[None] = None
    schema_version: SchemaVersion


class Refused(Reply):
    """Any command refused: the one-line reason."""

    ok: Literal[False]
    error: str


class NoSpinDone(Reply):
    ok: Literal[True]
    game_id: GameId = Field(description="the game voided")


class TableSet(Reply):
    """``open`` and ``close``: what ``<base>/table`` now says."""

    ok: Literal[True]
    state: Literal["open", "closed"]
    last_numbers: list[Pocket] = Field(max_length=3)
    table: TableId
    ts: Timestamp


class Acknowledged(Reply):
    ok: Literal[True]
    alert: str
    operator: str


class RecalledFrame(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    t: float = Field(description="host time, seconds since the epoch")
    dir: Literal["<", ">"] = Field(description="< from the wheel, > to it")
    line: str = Field(description="the line, escaped as in the capture format")


class RecalledGame(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    game_id: GameId
    events: list[dict[str, Any]] = Field(
        description="the game's <base>/game payloads as published (older ones may predate "
        'schema_version; one the journal cannot read is {"unreadable": text})'
    )
    messages: list[dict[str, Any]] = Field(
        description="the game's signed <base>/game payloads exactly as published (the same "
        "JSON objects, member for member), for a consumer to verify and keep: the events the "
        "journal can read"
    )
    frames: list[RecalledFrame]


class Recalled(Reply):
    """``recall``: the games, in play order, with their events and frames."""

    ok: Literal[True]
    games: list[RecalledGame]
