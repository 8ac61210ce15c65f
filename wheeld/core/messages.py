"""Outgoing payloads: the JSON that ``<base>/game`` and friends carry.

Built from the engine's decisions with pydantic, so ``replay`` and ``run``
print and publish the very same models.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from wheeld.core.events import Direction
from wheeld.core.game import GameEvent, NoMoreBets, NoSpin, ReasonCode, Result, Spinning
from wheeld.core.layout import Color, Sector, WheelLayout

#: The first line of a ``wheeld export`` file names its format (``verify`` checks it).
EXPORT_FORMAT = "wheeld-export 1"
#: The version of wheeld's payload schemas (docs/api/). Every JSON payload wheeld
#: publishes carries it as ``schema_version``; it changes only when a change would
#: break a consumer (a member removed, renamed or given another meaning).
SCHEMA_VERSION: Final = 1


def iso_utc(at: float) -> str:
    """ISO-8601 UTC with milliseconds, e.g. ``2025-09-16T06:44:46.085Z``."""
    moment = datetime.fromtimestamp(round(at, 3), UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Payload(BaseModel):
    # Drivers may add fields of their own (a wheel's own spin number, say). Built at
    # first use, not at import: ``wheeld run`` builds them just after READY.
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    event: str
    game_id: int
    table: str
    #: The journal's epoch: ``(table, epoch, game_id)`` never repeats.
    epoch: str
    ts: str
    schema_version: Literal[1] = SCHEMA_VERSION

    @model_serializer(mode="wrap")
    def _version_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # schema_version closes the payload, after every member a driver adds
        # (and before the chain's seq/prev/kid/sig, which signing appends).
        data: dict[str, Any] = handler(self)
        data["schema_version"] = data.pop("schema_version")
        return data

    def to_json(self) -> str:
        """Compact JSON, keys in model order: the bytes that go on the wire."""
        return self.model_dump_json()


class SpinningPayload(_Payload):
    event: Literal["spinning"] = "spinning"
    rotor_direction: Direction | None
    ball_direction: Direction | None


class NoMoreBetsPayload(_Payload):
    event: Literal["no_more_bets"] = "no_more_bets"


class ResultPayload(_Payload):
    event: Literal["result"] = "result"
    number: str
    color: Color
    revolutions: int | None
    rotor_direction: Direction | None
    ball_direction: Direction | None
    parity: Literal["even", "odd"] | None
    half: Literal["low", "high"] | None
    dozen: int | None
    column: int | None
    sectors: list[Sector]


class NoSpinPayload(_Payload):
    event: Literal["no_spin"] = "no_spin"
    reason: ReasonCode
    reasons: list[ReasonCode]
    note: str | None = None


GamePayload = SpinningPayload | NoMoreBetsPayload | ResultPayload | NoSpinPayload

#: A game event's name: its ``event`` on ``<base>/game``, in the journal and in replay
#: (mypy holds every spelling of one to these; a test holds them to the models' ``event``).
EventName = Literal["spinning", "no_more_bets", "result", "no_spin"]
#: Each game decision's payload model, whose ``event`` default spells the decision's name.
PAYLOADS: Final[dict[type[GameEvent], type[GamePayload]]] = {
    Spinning: SpinningPayload,
    NoMoreBets: NoMoreBetsPayload,
    Result: ResultPayload,
    NoSpin: NoSpinPayload,
}
#: The name each game decision is published and journaled as (never its class's name).
EVENT_NAMES: Final[dict[type[GameEvent], EventName]] = {
    decision: model.model_fields["event"].default for decision, model in PAYLOADS.items()
}
#: The events that open a game: a game whose last event is one of these is still open.
OPENING_EVENTS: Final[frozenset[EventName]] = frozenset({"spinning", "no_more_bets"})
#: The events that end a game, exactly one each.
ENDING_EVENTS: Final[frozenset[EventName]] = frozenset({"result", "no_spin"})


def event_name(decision: GameEvent) -> EventName:
    """The name ``decision`` is published and journaled as."""
    return EVENT_NAMES[type(decision)]


def game_payload(event: GameEvent, table: str, layout: WheelLayout, epoch: str) -> GamePayload:
    """The payload that announces ``event`` for ``table``, in the journal's ``epoch``."""
    common: dict[str, Any] = {
        "game_id": event.game_id,
        "table": table,
        "epoch": epoch,
        "ts": iso_utc(event.at),
    }
    common.update(event.extra)
    match event:
        case Spinning():
            return SpinningPayload(
                rotor_direction=event.rotor_direction,
                ball_direction=event.ball_direction,
                **common,
            )
        case NoMoreBets():
            return NoMoreBetsPayload(**common)
        case Result():
            facts = layout.facts(event.number)
            return ResultPayload(
                number=event.number,
                color=facts.color,
                revolutions=event.revolutions,
                rotor_direction=event.rotor_direction,
                ball_direction=event.ball_direction,
                parity=facts.parity,
                half=facts.half,
                dozen=facts.dozen,
                column=facts.column,
                sectors=list(facts.sectors),
                **common,
            )
        case NoSpin():
            return NoSpinPayload(
                reason=event.reason, reasons=list(event.reasons), note=event.note, **common
            )
    raise TypeError(f"not a game event: {event!r}")
