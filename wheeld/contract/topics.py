"""What each topic under ``<base>/`` carries: one pydantic model per payload.

``wheeld.contract.registry.TOPICS`` says which model each topic carries.

The game payloads are ``wheeld.core.messages``' own models, which build them, with
the members signing appends; the others are built as dicts where they are
made (the pipeline, the identity) and described here member for member. A
test replays the golden captures and validates every message against these
models, and fails on any member a model does not name, so the two cannot
drift apart.

Every model admits members it does not name (``additionalProperties``): a
consumer ignores what it does not know, and a new optional member does not
change ``schema_version`` (docs/api.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from wheeld.core.events import Direction, ReasonCode
from wheeld.core.health import HealthPayload
from wheeld.core.layout import QUADRUPLE_ZERO, Color, Sector
from wheeld.core.messages import (
    EventName,
    NoMoreBetsPayload,
    NoSpinPayload,
    ResultPayload,
    SpinningPayload,
)

Timestamp = Annotated[
    str,
    Field(
        pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
        description="ISO-8601 UTC with milliseconds, e.g. 2025-09-16T06:44:46.085Z",
    ),
]
SchemaVersion = Annotated[
    Literal[1],
    Field(description="the version of this schema; changes only on a breaking change"),
]
TableId = Annotated[str, Field(description="the table's id (table.id)")]
#: Every pocket of every wheel wheeld knows, as the JSON Schema says it.
POCKET_PATTERN = r"^(0|00|000|0000|[1-9]|[12][0-9]|3[0-6])$"


def _pocket(number: str) -> str:
    # The layout's own judgement, so a refusal says why in plain words (a follower logs it).
    if not QUADRUPLE_ZERO.has_pocket(number):
        raise ValueError(f"{number[:8]!r} is not a pocket")
    return number


Pocket = Annotated[
    str,
    AfterValidator(_pocket),
    WithJsonSchema({"pattern": POCKET_PATTERN, "type": "string"}),
]
Base64Url = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]
KeyId = Annotated[Base64Url, Field(description="the signing key's id, as wheeld keygen prints it")]
Signature = Annotated[
    Base64Url, Field(description="Ed25519 signature of the RFC 8785 form without sig, base64url")
]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]


class Published(BaseModel):
    """A payload wheeld publishes; members it does not name are allowed (and ignored)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class Signed(Published):
    """``kid`` and ``sig``, when the daemon signs (docs/mqtt.md, "Signed messages")."""

    kid: KeyId | SkipJsonSchema[None] = None
    sig: Signature | SkipJsonSchema[None] = None


class Chained(Signed):
    """``seq`` and ``prev`` as well: the chain of ``<base>/game`` messages."""

    seq: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = None
    prev: Annotated[Base64Url, Field(min_length=43, max_length=43)] | None = Field(
        default=None,
        description="SHA-256 of the previous message's RFC 8785 form; null for the first ever",
    )


# -- <base>/game and <base>/result -------------------------------------------------------


Epoch = Annotated[
    Base64Url,
    Field(
        min_length=11,
        description="the journal's epoch: a random id made with it; (table, epoch, game_id)"
        " and (table, epoch, seq) never repeat",
    ),
]


class _GameEvent(Chained):
    # What the builders default, the wire always carries: required here.
    game_id: Annotated[int, Field(ge=1)] = Field(
        description="the game's id: 1, 2, 3... for the table, never reused"
    )
    table: TableId
    epoch: Epoch
    ts: Timestamp = Field(description="when it was decided (ISO-8601 UTC, milliseconds)")
    schema_version: SchemaVersion


class Spinning(_GameEvent, SpinningPayload):
    """The ball is launched: bets are still open."""

    event: Literal["spinning"]

    rotor_direction: Direction | None = Field(description="cw, ccw, or null when unknown")
    ball_direction: Direction | None = Field(description="cw, ccw, or null when unknown")


class NoMoreBets(_GameEvent, NoMoreBetsPayload):
    """Betting closed."""

    event: Literal["no_more_bets"]


class Result(_GameEvent, ResultPayload):
    """The winning number and what it wins; the even chances are null for 0 and 00."""

    event: Literal["result"]

    number: Pocket = Field(
        description="the winning number, a string: 0, 00, 1 ... 36 (000, 0000 on 39/40)"
    )
    color: Color
    revolutions: int | None = Field(description="the ball's revolutions, null when unknown")
    rotor_direction: Direction | None
    ball_direction: Direction | None
    parity: Literal["even", "odd"] | None = Field(description="null for 0 and 00")
    half: Literal["low", "high"] | None = Field(description="low 1-18, high 19-36; else null")
    dozen: Annotated[int, Field(ge=1, le=3)] | None = Field(description="null for 0 and 00")
    column: Annotated[int, Field(ge=1, le=3)] | None = Field(description="null for 0 and 00")
    sectors: list[Sector] = Field(
        description="single-zero wheels: the called bets the number is in"
    )
    bonus: dict[str, int | str] | SkipJsonSchema[None] = Field(
        default=None,
        description='the wheel\'s bonus lines for the game (Cammegh *Y: {"aurora": "03"},'
        ' {"1": 17, "2": 250}); never the winning number',
    )


class NoSpin(_GameEvent, NoSpinPayload):
    """The game is void: ``reason`` the first cause, ``reasons`` every cause seen."""

    event: Literal["no_spin"]

    reason: ReasonCode
    reasons: list[ReasonCode]
    note: str | None = Field(description="the operator's note for declared, else null")


class GameEvent(RootModel[Spinning | NoMoreBets | Result | NoSpin]):
    """``<base>/game``: one message per game event, signed and chained when the daemon signs."""

    root: Annotated[Spinning | NoMoreBets | Result | NoSpin, Field(discriminator="event")]


class LatestResult(Result):
    """``<base>/result`` (retained): the latest result, the very message ``<base>/game`` carried."""


# -- the retained state ---------------------------------------------------------------------


class Status(Published):
    """``<base>/status`` (retained; offline is also the last will)."""

    state: Literal["online", "offline", "fault"]
    fault: Literal["journal_unwritable"] | SkipJsonSchema[None] = Field(
        default=None, description="while state is fault: what stops the table deciding"
    )
    instance: str | SkipJsonSchema[None] = Field(
        default=None, description="the daemon that said it: its host and state directory"
    )
    schema_version: SchemaVersion


class Sequence(Published):
    """``<base>/sequence`` (retained): the game message about to be published, whole.

    Said before that message goes out (intent first). A daemon reads it at
    start and at every reconnect, before deciding anything: game ids and seqs
    go on past it, so a lost state directory or a standby's journal never
    reuses one; when its journal does not hold that message, it says it again
    (a repeat consumers drop) and voids the game it launched."""

    game_id: Annotated[int, Field(ge=1)]
    event: EventName
    epoch: Epoch
    message: GameEvent = Field(description="the <base>/game message, as it is published")
    seq: Annotated[int, Field(ge=1)] | SkipJsonSchema[None] = Field(
        default=None, description="the seq of that message, when the daemon signs"
    )
    digest: Base64Url | SkipJsonSchema[None] = Field(
        default=None, description="SHA-256 of that message's RFC 8785 form: the next one's prev"
    )
    table: str
    schema_version: SchemaVersion


class Preflight(Published):
    """``<base>/status/preflight`` (not retained): the start-up check's probe, to itself."""

    #: A random token, new at each check.
    probe: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
    schema_version: SchemaVersion


class History(Published):
    """``<base>/history`` (retained): the last mqtt.history_length winning numbers, newest first."""

    numbers: list[Pocket]
    schema_version: SchemaVersion


class Wheel(Published):
    """``<base>/wheel`` (retained): the link, the wheel's identity and the decoder's counters."""

    link: Literal["up", "down"]
    driver: str
    port: str
    model: str | None
    firmware: str | None
    serial: str | None
    pockets: Literal[37, 38, 39, 40]
    pocket_order: list[Pocket] | SkipJsonSchema[None] = Field(
        default=None,
        description="wheel.pocket_order: the wheel's custom pocket order, clockwise (a Cammegh "
        "wheel set up with *Z), which the statistics' arcs and sectors follow; absent: the "
        "standard order",
    )
    output_level: Literal["basic", "advanced", "extended"] | SkipJsonSchema[None] = Field(
        default=None, description="Cammegh drivers: the output level the wheel speaks"
    )
    rules_judged_by_wheel: list[ReasonCode] | SkipJsonSchema[None] = Field(
        default=None,
        description="the rules wheeld cannot judge at that level and takes from the wheel",
    )
    flag_table: str | SkipJsonSchema[None] = Field(
        default=None, description="the warning-flag table the driver reads the flags through"
    )
    counters: dict[str, Count] = Field(description="the driver's decoder counters, by name")
    refused_events: dict[str, Count] = Field(
        description='wheel events refused where they are not legal, by "<phase>/<event>"'
    )
    ts: Timestamp
    schema_version: SchemaVersion


class Table(Published):
    """``<base>/table`` (retained): open or closed, with the last three results."""

    state: Literal["open", "closed"]
    last_numbers: list[Pocket] = Field(max_length=3)
    table: TableId
    ts: Timestamp
    schema_version: SchemaVersion


class Alarm(Signed):
    """``<base>/alarm``: what an engineer should know that is not a game decision.

    ``alarm`` is the code; the other members depend on it (docs/mqtt.md,
    "Alarms"). Faults that last are ``set`` and ``clear``ed, and alerts can be
    ``acknowledged``. A driver may raise alarms of its own, with members of its own.
    """

    alarm: str = Field(description="the alarm's code, e.g. wheel_link_lost")
    table: TableId
    ts: Timestamp
    state: Literal["set", "clear", "acknowledged"] | SkipJsonSchema[None] = None
    since: Timestamp | SkipJsonSchema[None] = None
    until: Timestamp | SkipJsonSchema[None] = None
    duration_s: float | SkipJsonSchema[None] = None
    operator: str | SkipJsonSchema[None] = Field(default=None, description="who acknowledged")
    severity: Literal["critical"] | SkipJsonSchema[None] = None
    why: str | SkipJsonSchema[None] = None
    error: str | SkipJsonSchema[None] = None
    reason: str | SkipJsonSchema[None] = None
    detail: str | None = None
    count: Count | SkipJsonSchema[None] = None
    game_id: int | None = None
    number: str | SkipJsonSchema[None] = None
    display: str | SkipJsonSchema[None] = None
    later: str | SkipJsonSchema[None] = None
    wheel_verdict: str | SkipJsonSchema[None] = Field(
        default=None, description="wheel_verdict_mismatch: the wheel's number, or why it voided"
    )
    wheel_time: str | SkipJsonSchema[None] = Field(
        default=None, description="wheel_clock_off: the time the wheel's clock gave"
    )
    offset_s: float | SkipJsonSchema[None] = Field(
        default=None, description="wheel_clock_off: the wheel's clock minus the host's"
    )
    wheeld_verdict: str | SkipJsonSchema[None] = Field(
        default=None, description="wheel_verdict_mismatch: wheeld's number, or its reason"
    )
    kind: Literal["not_published", "published_differently", "not_logged"] | SkipJsonSchema[None] = (
        Field(
            default=None,
            description="wheel_log_mismatch: the wheel's number unpublished, published "
            "differently, or a result the wheel never logged",
        )
    )
    wheel_record: dict[str, Any] | None = Field(
        default=None, description="wheel_log_mismatch: the wheel's log entry, null if none"
    )
    wheeld_record: dict[str, Any] | None = Field(
        default=None, description="wheel_log_mismatch: wheeld's result, null if none"
    )
    broker_game_id: int | SkipJsonSchema[None] = None
    next_game_id: int | SkipJsonSchema[None] = None
    step_s: float | SkipJsonSchema[None] = None
    from_: Timestamp | SkipJsonSchema[None] = Field(default=None, alias="from")
    to: Timestamp | SkipJsonSchema[None] = None
    lost: Count | SkipJsonSchema[None] = None
    configured: int | SkipJsonSchema[None] = None
    wheel: int | SkipJsonSchema[None] = None
    pockets: int | SkipJsonSchema[None] = None
    command: str | SkipJsonSchema[None] = None
    p_value: float | SkipJsonSchema[None] = None
    games: Count | SkipJsonSchema[None] = None
    problem: str | SkipJsonSchema[None] = None
    topic: str | SkipJsonSchema[None] = None
    bytes_per_minute: Count | SkipJsonSchema[None] = Field(
        default=None, description="line_noise: noise bytes over the last minute"
    )
    repeated: Count | SkipJsonSchema[None] = Field(
        default=None,
        description="alarms of this code held back since the last one said (over its rate)",
    )
    schema_version: SchemaVersion


# -- <base>/info ----------------------------------------------------------------------------


class Software(Published):
    name: str
    version: str
    sha256: Sha256Hex | None = Field(description="of the package's files; null if unreadable")


class DriverIdentity(Published):
    distribution: str | None
    version: str | None
    sha256: Sha256Hex | None


class WheelIdentity(Published):
    """What the wheel's hello said; each null until it has spoken."""

    model: str | None
    firmware: str | None
    serial: str | None
    pockets: int | None


class SigningKey(Published):
    kid: KeyId
    public_key: str = Field(description="SubjectPublicKeyInfo PEM, as signing.pub")


class Info(Signed):
    """``<base>/info`` (retained): which software, drivers, wheel, key and settings decide."""

    table: TableId
    epoch: Epoch
    software: Software
    drivers: dict[str, DriverIdentity] = Field(description="every installed driver, by name")
    driver: str
    wheel: WheelIdentity
    signing: SigningKey | None
    config_sha256: Sha256Hex
    ts: Timestamp
    schema_version: SchemaVersion


# -- <base>/stats ---------------------------------------------------------------------------


class ChiSquared(Published):
    value: float | None
    df: int
    p_value: float | None
    games: Count
    reason: str | SkipJsonSchema[None] = Field(default=None, description="why no value yet")


class Chance(Published):
    count: Count
    percent: float | None


class Repeats(Published):
    count: Count
    pairs: Count
    expected_rate: float


class MostHit(Published):
    pockets: list[Pocket] = Field(description="the arc's pockets in wheel order")
    count: Count
    p_value: float | None = Field(
        description="exact binomial upper tail, Bonferroni-corrected for the arcs compared"
    )


class Arc(Published):
    results: Count
    expected: float = Field(description="results expected in each arc")
    counts: dict[str, Count] = Field(description="results by the arc's first pocket")
    most_hit: MostHit


class Correlation(Published):
    r: float | None = Field(description="lag-1 Pearson correlation of the numbers")
    p_value: float | None
    reason: str | SkipJsonSchema[None] = Field(default=None, description="why no value yet")


class Serial(Published):
    pairs: Count
    correlation: Correlation
    distance_chi_squared: ChiSquared = Field(
        description="the pocket distances between consecutive results against uniform"
    )


class Spread(Published):
    count: Count
    mean: float | None
    median: float | None
    min: float | None
    max: float | None


class Tally(Published):
    """The figures over a run of results: the whole series, or a window."""

    results: Count
    counts: dict[str, Count] = Field(description="results by number")
    chi_squared: ChiSquared
    chances: dict[str, dict[str, Chance]] = Field(
        description="color, parity, half, dozen, column: by outcome (zero counted as zero)"
    )
    sectors: dict[str, dict[str, Count]] | None = Field(
        description="single-zero wheels: each sector's results, all and by rotor direction"
    )
    repeats: Repeats
    distance: dict[str, dict[str, Count]] = Field(
        description="pockets from the previous result, by rotor direction"
    )
    arcs: dict[str, dict[str, Arc]] = Field(
        description="arcs of k neighbouring pockets, by k, then all/cw/ccw"
    )
    serial: Serial


class NoSpinRate(Published):
    count: Count
    rate: float


class NoSpins(Published):
    count: Count
    by_reason: dict[str, NoSpinRate]


class RecentRate(Published):
    games: Count
    hours: float
    rate: float | None


class GameRate(Published):
    games: Count
    hours: float | None
    rate: float | None
    recent: RecentRate = Field(description="over the last 30 games, pauses left out")


class WheelChiSquared(Published):
    value: float = Field(description="the wheel's chi-squared over its own winning-number table")
    percent: float | None = Field(description="the percentage the wheel gives beside it")


class WheelFigures(Published):
    """The wheel's own statistics, read from it while idle (a Cammegh SS2's ``*w``)."""

    chi_squared: WheelChiSquared | SkipJsonSchema[None] = None
    read_at: Timestamp = Field(description="when wheeld last read them")


class Stats(Tally):
    """``<base>/stats`` (retained): the table's statistics after each game (docs/statistics.md)."""

    pockets: Literal[37, 38, 39, 40]
    games: Count
    windows: dict[str, Tally] = Field(description="the last N results, by N")
    no_spins: NoSpins
    games_per_hour: GameRate
    phases: dict[str, Spread] = Field(description="seconds between the game's events, by phase")
    pauses: Count = Field(description="launches over 15 minutes after the last outcome")
    revolutions: Spread = Field(description="ball revolutions, where the wheel reports them")
    rotor_rpm: Spread = Field(description="rotor speed at launch, where the wheel reports it")
    ignored: Count
    wheel: WheelFigures | SkipJsonSchema[None] = Field(
        default=None, description="the wheel's own figures beside wheeld's, where it keeps them"
    )
    schema_version: SchemaVersion


#: ``<base>/health``: the model ``wheeld.core.health`` builds the payload with.
Health = HealthPayload


def undeclared(payload: BaseModel) -> list[str]:
    """Members of a validated payload its model does not name, nested ones as ``a.b``."""
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, RootModel):
            walk(value.root, path)
        elif isinstance(value, BaseModel):
            found.extend(f"{path}{name}" for name in value.model_extra or {})
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{path}{name}.")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}{key}.")
        elif isinstance(value, list):
            for item in value:
                walk(item, path)

    walk(payload, "")
    return found
