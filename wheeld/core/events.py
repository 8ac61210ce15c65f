"""Wheel events: what a driver tells the game engine, whatever the wheel's protocol.

Small slotted classes: one is built for every frame on the hot path, so they
stay plain dataclasses (no validation, no pydantic) and the per-frame ones are
not frozen, because a frozen dataclass's ``__init__`` costs about three times
as much. Treat them as immutable all the same: nothing in wheeld changes an
event after it is made. ``tick`` is the wheel's own millisecond clock; every
rule duration is measured in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

Direction = Literal["cw", "ccw"]

#: Discrete wheel incidents a driver reports (foreign object, ball out, faults, cover).
IncidentCode = Literal[
    "launch",
    "object",
    "ball_out",
    "rotor_fault",
    "sensor_fault",
    "cover_open",
    "cover_closed",
]


#: Why a game is void: the reason codes of ``rules.md``, in its order. When
#: several causes are seen at the same moment, ``reasons`` lists them in it.
ReasonCode = Literal[
    "ball_same_direction",
    "direction_not_alternated",
    "insufficient_revolutions",
    "foreign_object",
    "ball_out_of_wheel",
    "ball_not_settled",
    "rotor_stopped",
    "rotor_malfunction",
    "respin_too_early",
    "invalid_pocket",
    "frame_loss",
    "wheel_link_lost",
    "declared",
    "controller_restart",
]

#: Every reason code, in the order of ``rules.md``.
REASONS: tuple[ReasonCode, ...] = get_args(ReasonCode)


@dataclass(slots=True)
class WheelHello:
    """The wheel introduced itself (power-up, or a reply to a query)."""

    seq: int
    tick: int
    pockets: int
    model: str
    firmware: str
    serial: str


@dataclass(slots=True)
class Heartbeat:
    """Nothing happened; wheel time moved on."""

    seq: int
    tick: int


@dataclass(slots=True)
class RotorDatum:
    """The rotor's pocket-0 datum passed its sensor: one rotor revolution."""

    seq: int
    tick: int
    direction: Direction
    period_ms: int


@dataclass(slots=True)
class BallPassed:
    """The ball passed the in-rim sensor; ``period_ms`` 0 marks a launch."""

    seq: int
    tick: int
    direction: Direction
    period_ms: int


@dataclass(slots=True)
class PocketReading:
    """The pocket sensor's reading changed; ``pocket`` None means no ball in a pocket."""

    seq: int
    tick: int
    pocket: str | None


@dataclass(slots=True)
class WheelIncident:
    """A discrete event reported by the wheel (foreign object, ball out, faults, cover)."""

    seq: int
    tick: int
    code: IncidentCode


@dataclass(slots=True)
class SequenceGap:
    """Frames were lost on the link: ``lost`` sequence numbers never arrived."""

    expected: int
    received: int
    lost: int


@dataclass(slots=True)
class FrameDropped:
    """A frame arrived but could not be used (bad checksum, malformed fields)."""

    reason: Literal["bad_checksum", "malformed"]


# -- events of wheels that judge the game themselves -------------------------
# Such a wheel reports its own phases rather than raw sensor passes; the engine
# applies the same rules to them. ``tick`` is host milliseconds there.


@dataclass(frozen=True, slots=True)
class BallLaunched:
    """The wheel reports the ball in the rim: a game starts (directions as reported)."""

    tick: int
    rotor_direction: Direction | None
    ball_direction: Direction | None
    #: True when ball passes are streamed, so revolutions can be counted.
    counts_revolutions: bool
    extra: dict[str, Any] = field(default_factory=dict)
    #: False when the wheel's output says nothing of the rotor at all (a Cammegh
    #: on Basic output): an unknown rotor is then not judged, never taken as stopped.
    rotor_reported: bool = True
    #: False when the wheel sends nothing between its events (a Cammegh on Basic
    #: output): silence during the game is then no sign of a lost link.
    link_judged: bool = True


@dataclass(frozen=True, slots=True)
class BallRunning:
    """The wheel still sees the ball in the rim (its status says so)."""

    tick: int


@dataclass(frozen=True, slots=True)
class WheelNoMoreBets:
    """The wheel's own no more bets: the ball slowed to its threshold. The engine's
    decision that follows is ``wheeld.core.game.NoMoreBets`` (``no_more_bets``)."""

    tick: int


@dataclass(frozen=True, slots=True)
class WinningNumber:
    """The wheel's sensors agree on the pocket the ball rests in."""

    tick: int
    number: str
    #: Members the result carries beside the number (a Cammegh's ``bonus``).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WheelVoid:
    """The wheel reported a condition that voids the game in progress."""

    tick: int
    reason: ReasonCode
    detail: str = ""
    #: False when the driver follows the wheel's game past wheeld's own end of it (a
    #: rule wheeld judged): with no game open the void then says nothing.
    alarm_between_games: bool = True


@dataclass(frozen=True, slots=True)
class AlternationUnknown:
    """Spins went by unseen: the last result's rotor direction no longer says anything."""

    tick: int


@dataclass(frozen=True, slots=True)
class WheelReply:
    """A wheel's reply to a command the driver's session sent; nothing for the rules."""

    command: str
    text: str


@dataclass(frozen=True, slots=True)
class DisplayMismatch:
    """The wheel's passive-display line disagrees with the confirmed winning number."""

    tick: int
    #: The number the status frames confirmed (the one that stands).
    number: str
    #: What the display line showed players.
    display: str


@dataclass(frozen=True, slots=True)
class ResultContradicted:
    """After a number was published, the wheel's own later frames agreed on another."""

    tick: int
    #: The number published (it stands: a result cannot be withdrawn).
    number: str
    #: What the later frames agreed on.
    later: str


@dataclass(frozen=True, slots=True)
class WheelProfile:
    """What the driver learnt of the wheel's output, for ``<base>/wheel`` (its output
    level, the rules the wheel judges, the warning-flag table); said when it changes."""

    tick: int
    facts: dict[str, Any]


@dataclass(frozen=True, slots=True)
class WheelVerdict:
    """The wheel's own verdict on the game it just ended: its number, or why it voided.

    Sent where wheeld judges rules the wheel judges too, so the two can be compared
    (``wheel_verdict_mismatch``); nothing for the rules.
    """

    tick: int
    #: The number the wheel completed the game with, if it did.
    number: str | None
    #: Why the wheel voided it (a warning flag, no number), if it did.
    void: str | None


@dataclass(frozen=True, slots=True)
class LoggedGame:
    """One game in the wheel's own log: its number, or None where it logged a misfire."""

    number: str | None
    #: The log entry as the wheel wrote it (page, slot, misfire), for the alarm.
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WheelRecords:
    """The wheel's own records, read from it while idle; nothing for the rules.

    ``games`` are its newest logged games, oldest first, held against the results
    wheeld published (``wheel_log_mismatch``); those before ``judged_from`` were
    judged at an earlier read and only align the rest. ``figures`` are its own
    statistics (a Cammegh's ``*w`` chi-squared), published beside wheeld's.
    """

    tick: int
    games: tuple[LoggedGame, ...] = ()
    judged_from: int = 0
    figures: dict[str, Any] = field(default_factory=dict)


WheelEvent = (
    WheelHello
    | Heartbeat
    | RotorDatum
    | BallPassed
    | PocketReading
    | WheelIncident
    | SequenceGap
    | FrameDropped
    | BallLaunched
    | BallRunning
    | WheelNoMoreBets
    | WinningNumber
    | WheelVoid
    | AlternationUnknown
    | WheelReply
    | DisplayMismatch
    | ResultContradicted
    | WheelProfile
    | WheelVerdict
    | WheelRecords
)

#: Each wheel event's name outside the process (``refused_events`` in ``<base>/wheel``,
#: the metrics' ``event`` label, docs/rules.md's phase table): written out here, never
#: read from a class's ``__name__``, so renaming a class changes nothing a consumer reads.
WHEEL_EVENT_NAMES: Final[dict[type, str]] = {
    WheelHello: "WheelHello",
    Heartbeat: "Heartbeat",
    RotorDatum: "RotorDatum",
    BallPassed: "BallPassed",
    PocketReading: "PocketReading",
    WheelIncident: "WheelIncident",
    SequenceGap: "SequenceGap",
    FrameDropped: "FrameDropped",
    BallLaunched: "BallLaunched",
    BallRunning: "BallRunning",
    WheelNoMoreBets: "WheelNoMoreBets",
    WinningNumber: "WinningNumber",
    WheelVoid: "WheelVoid",
    AlternationUnknown: "AlternationUnknown",
    WheelReply: "WheelReply",
    DisplayMismatch: "DisplayMismatch",
    ResultContradicted: "ResultContradicted",
    WheelProfile: "WheelProfile",
    WheelVerdict: "WheelVerdict",
    WheelRecords: "WheelRecords",
}
