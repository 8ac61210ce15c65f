"""What the table pipeline asks of the shell: records to journal, messages, bytes, log lines.

Plain values, no behaviour: the pure core builds them, the shell (journal,
publisher, link, log) carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from wheeld.contract.registry import TOPICS, TopicName

if TYPE_CHECKING:
    from wheeld.core.engine import EngineState
    from wheeld.core.messages import EventName

LogLevel = Literal["debug", "info", "warning", "error"]
TableState = Literal["open", "closed"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One MQTT message to publish."""

    topic: str
    payload: str
    qos: int = 1
    retain: bool = False

    @classmethod
    def on(cls, base: str, topic: TopicName, payload: str) -> Outgoing:
        """``payload`` on ``<base>/<topic>``, retained and at the QoS the contract's
        registry gives that topic (the one place they are said)."""
        said = TOPICS[topic]
        return cls(said.address(base), payload, said.qos, said.retain)


@dataclass(slots=True)
class FrameRecord:
    """A line that crossed the link, for the journal: host time, direction, the game it fell in.

    Never changed once made, yet not frozen: one is made for every line, and a frozen
    dataclass's ``__init__`` (``object.__setattr__`` a field) costs four times as much.
    """

    at: float
    direction: Literal["<", ">"]
    #: The line without its terminator.
    line: bytes
    #: The game in progress when it crossed (or the one it opened), else None.
    game_id: int | None
    #: No frame of the wheel's protocol: line noise, kept as a sample and counted.
    noise: bool = False


@dataclass(frozen=True, slots=True)
class GameRecord:
    """A game decision as journalled: its id, its ``event`` as published, and its payload."""

    game_id: int
    #: The contract's name for it (``wheeld.core.messages.EventName``), never a class's.
    event: EventName
    payload: str
    number: str | None = None
    #: The payload as an object, for what is derived from it once it is kept (the
    #: statistics, the history, the alerts): never parsed again.
    message: dict[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A line for the daemon's structured log."""

    level: LogLevel
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """An operator command as the journal keeps it: who, what, and what came of it."""

    at: float
    name: str
    sender: str | None
    payload: str
    accepted: bool
    outcome: str


@dataclass(frozen=True, slots=True)
class AlarmRecord:
    """An alarm raised, cleared or acknowledged, as the journal keeps it (hash-chained)."""

    at: float
    code: str
    #: ``set``, ``clear`` or ``acknowledged``; ``raised`` for a one-off alarm.
    state: str
    #: The ``<base>/alarm`` payload as published.
    payload: str


@dataclass(slots=True)
class Effects:
    """What the shell must do, in this order: journal, write to the wheel, publish, log."""

    #: Game decisions; with ``state`` they make one journal commit.
    games: list[GameRecord] = field(default_factory=list)
    #: Messages to publish, in order, once ``games`` are durable.
    messages: list[Outgoing] = field(default_factory=list)
    #: The engine state to store, when it changed.
    state: EngineState | None = None
    #: The table was opened or closed: to be stored, so a restart keeps it.
    table_state: TableState | None = None
    commands: list[CommandRecord] = field(default_factory=list)
    #: Lines that crossed the link (both ways), journaled without an fsync of their own.
    frames: list[FrameRecord] = field(default_factory=list)
    writes: list[bytes] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    #: Alarms raised, cleared or acknowledged: journaled (chained) without an fsync of their own.
    alarms: list[AlarmRecord] = field(default_factory=list)
    #: The alerts and faults now set, when that changed: stored, so a restart keeps them.
    set_alerts: dict[str, dict[str, Any]] | None = None

    #: An alarm is among the messages: it must survive a power cut too.
    alarmed: bool = False
    #: The message chain was moved on past another journal's message: its (seq, digest)
    #: and the host time it was judged at, for ``verify`` to tell that jump from a gap.
    chain_floor: tuple[int, str, float] | None = None
    #: The marker of another controller the table was taken over from (epoch, seq or game
    #: id, event): kept, so that reading it again changes nothing.
    taken_from: tuple[str, int, str] | None = None
    #: The history the table shows from that takeover on, latest first: kept with it, so
    #: that a restart shows it too rather than this journal's older results.
    taken_history: list[str] | None = None
    #: Another journal went on past this one's: the game messages still waiting in the
    #: outbox never went out (they would contradict it) and the retained game state is
    #: behind: both are let go.
    superseded: bool = False

    @property
    def decided(self) -> bool:
        """True when a decision or an alarm is in it: kept in one commit, ``Journal.record``.

        Whether that commit is fsync'd is the journal's ``fsync_due`` to say.
        """
        return bool(self.games) or self.alarmed

    def extend(self, other: Effects) -> None:
        """Append ``other``'s effects after these."""
        self.games += other.games
        self.messages += other.messages
        if other.state is not None:
            self.state = other.state
        if other.table_state is not None:
            self.table_state = other.table_state
        self.alarmed = self.alarmed or other.alarmed
        self.commands += other.commands
        self.frames += other.frames
        self.writes += other.writes
        self.logs += other.logs
        self.alarms += other.alarms
        if other.set_alerts is not None:
            self.set_alerts = other.set_alerts
        if other.chain_floor is not None:
            self.chain_floor = other.chain_floor
        self.superseded = self.superseded or other.superseded
        if other.taken_from is not None:
            self.taken_from = other.taken_from
        if other.taken_history is not None:
            self.taken_history = other.taken_history

    def log(self, level: LogLevel, event: str, **fields: Any) -> None:
        """Add a log record."""
        self.logs.append(LogRecord(level, event, fields))
