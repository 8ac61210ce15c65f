"""The table pipeline: one wheel's inputs routed to the parts that judge them. Sans-I/O.

Its inputs are what happens to a table — bytes from the wheel with the host
time, a timer firing, the link going up or down, an operator command, the
broker's retained messages, the journal failing — and each returns
:class:`Effects`: journal records, messages to publish, bytes to write to the
wheel and log records. It routes: the driver's decoder and session read and
answer the wheel, the engine decides games, ``faults`` and ``alerts`` (one
module per alert) keep what is set, ``floors`` judge the broker's retained
messages, ``announcements`` build every payload, and ``framing`` cuts lines. It
reads no clock and does no I/O, so ``wheeld run``, ``wheeld replay`` and the
tests drive the very same object.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wheeld.core.commands import OperatorCommand
from wheeld.core.engine import HELLO_POCKETS, EngineState, GameEngine
from wheeld.core.events import (
    DisplayMismatch,
    ResultContradicted,
    WheelEvent,
    WheelHello,
    WheelProfile,
    WheelRecords,
    WheelVerdict,
)
from wheeld.core.framing import cut_after_line_ends
from wheeld.core.game import Alarm, Decision
from wheeld.core.messages import iso_utc
from wheeld.core.rules import RulesConfig
from wheeld.core.signing import ChainState, Signer
from wheeld.core.stats import Statistics
from wheeld.drivers import DriverSession, WheelDecoder
from wheeld.table.alerts import Alerts, AlertSettings
from wheeld.table.announcements import Announcer
from wheeld.table.book import Book
from wheeld.table.decisions import Recorder
from wheeld.table.effects import Effects, Outgoing, TableState
from wheeld.table.faults import (
    WHEEL_LINK_LOST,
    LineNoise,
)
from wheeld.table.floors import BrokerFloors
from wheeld.table.frames import LinkLines
from wheeld.table.operator import Operator
from wheeld.table.session import TableSession
from wheeld.table.verdicts import VerdictCheck, contradiction, log_mismatches
from wheeld.table.view import TableView
from wheeld.table.wheel import WheelFacts

#: A table's chain before its first message ever: seq 1, prev null.
FIRST_MESSAGE = ChainState()

#: The wheel events the table reads itself, never the rules (``TablePipeline._read``):
#: the wheel contradicting wheeld, its profile, its verdicts and its own log. Every
#: other event goes to the engine, so the common ones (a heartbeat, a rotor datum, a
#: ball's pass) are told apart from these by one set look-up.
_READ_BY_THE_TABLE: frozenset[type[WheelEvent]] = frozenset(
    {DisplayMismatch, ResultContradicted, WheelProfile, WheelVerdict, WheelRecords}
)


@dataclass(frozen=True, slots=True)
class TableSettings:
    """What a pipeline needs to know of the configuration."""

    table: str
    base_topic: str
    driver: str
    port: str = ""
    pockets: int | None = None
    #: A custom pocket order (``wheel.pocket_order``, clockwise); None: the standard one.
    pocket_order: tuple[str, ...] | None = None
    history_length: int = 100
    rules: RulesConfig = field(default_factory=RulesConfig)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    #: The journal's epoch, carried in every game message (``replay``: one made from the
    #: capture; a pipeline with no journal behind it: this placeholder).
    epoch: str = "unjournaled"
    #: The shell calls ``committed`` once the journal keeps a batch of decisions (the
    #: daemon); off, the pipeline derives at once (replay, which keeps nothing).
    after_commit: bool = False


def _engine(
    settings: TableSettings, decoder: WheelDecoder, state: EngineState | None
) -> GameEngine:
    return GameEngine(
        settings.rules,
        pockets=settings.pockets,
        state=state,
        order=settings.pocket_order,
        # A decoder whose protocol allows fewer counts says which (WRP/1: 37 or 38).
        hello_pockets=getattr(decoder, "hello_pockets", HELLO_POCKETS),
    )


class TablePipeline:
    """One table: wheel bytes, timers, link changes and commands in; effects out."""

    def __init__(
        self,
        settings: TableSettings,
        decoder: WheelDecoder,
        session: DriverSession | None = None,
        *,
        state: EngineState | None = None,
        history: Iterable[str] = (),
        table_state: TableState = "open",
        signer: Signer | None = None,
        chain: ChainState = FIRST_MESSAGE,
        statistics: Statistics | None = None,
        set_alerts: Mapping[str, Mapping[str, Any]] | None = None,
        taken_from: tuple[str, int, str] | None = None,
    ) -> None:
        self._settings = settings
        self.decoder = decoder
        self.engine = _engine(settings, decoder, state)
        self.history: deque[str] = deque(history, maxlen=settings.history_length)
        self.table_state: TableState = table_state
        self.wheel = WheelFacts(settings.driver, settings.port, settings.pocket_order)
        self.announce = Announcer(settings.table, settings.base_topic, settings.epoch, signer)
        #: The table's own faults now set; ``alerts.book``: the alerts now set.
        self.faults = Book()
        self.alerts = Alerts(settings.alerts, statistics)
        self.alerts.restore(set_alerts or {}, self.faults)
        self.record = Recorder(
            self.engine,
            self.announce,
            chain,
            faults=self.faults,
            alerts=self.alerts,
            history=self.history,
            statistics=statistics,
            after_commit=settings.after_commit,
        )
        #: What the shell may read of the table (never the parts above themselves).
        self.view = TableView(self.engine, decoder, self.record, self.announce, self.wheel)
        self.lines = LinkLines(settings.alerts)
        self.floors = BrokerFloors(
            settings.table, settings.epoch, self.engine, self.record, taken_from
        )
        self._verdicts = VerdictCheck()
        #: The driver's session, told of the table's moments (none: it does nothing).
        self.session = TableSession(session, self.record)
        self.operator = Operator(self)
        #: The sum of the host clock's steps so far (the decoder's time leaves them out).
        self._clock_steps = 0.0

    @property
    def settings(self) -> TableSettings:
        """What the pipeline knows of the configuration."""
        return self._settings

    @settings.setter
    def settings(self, settings: TableSettings) -> None:
        self._settings = settings
        self.alerts.configure(settings.alerts, self.statistics)
        self.lines.noise = LineNoise(settings.alerts)

    @property
    def statistics(self) -> Statistics | None:
        """The table's statistics, fed each outcome; published on <base>/stats."""
        return self.record.statistics

    @statistics.setter
    def statistics(self, statistics: Statistics | None) -> None:
        self.record.statistics = statistics
        self.alerts.configure(self.settings.alerts, statistics)

    @property
    def signer(self) -> Signer | None:
        """Signs every <base>/game payload (chained) and every alarm; None: unsigned."""
        return self.announce.signer

    @signer.setter
    def signer(self, signer: Signer | None) -> None:
        self.announce.signer = signer

    @property
    def chain(self) -> ChainState:
        """Where the chain of <base>/game messages stands: what the next one carries."""
        return self.record.chain

    def set_codes(self) -> set[str]:
        """The codes of every fault and alert set now."""
        return set(self.faults) | set(self.alerts.book)

    # -- the wheel ----------------------------------------------------------------

    def start(self, now: float) -> Effects:
        """The daemon starts: a game left open by the previous run is void, and what the
        last run left set whose condition is gone now is cleared, once."""
        out = Effects()
        self.record.decide(self.engine.resume(now), out)
        self.record.clear_gone(now, out)
        return out

    def on_bytes(self, data: bytes, now: float) -> Effects:
        """Bytes from the wheel, heard at host time ``now``; every line goes to the journal.

        A line that made no frame of the wheel's protocol is noise: measured
        (``line_noise``), and journaled as a sample rather than whole.
        """
        out = Effects()
        engine = self.engine
        for segment in cut_after_line_ends(data):
            before = engine.game_in_progress
            next_before = engine.state.next_game_id
            frames_before = getattr(self.decoder.counters, "frames", None)  # None: not counted
            self._on_segment(segment, now, out)
            # The game in progress when the line crossed, or the one it opened
            # (even if the launch was voided at once).
            game = before
            if game is None and engine.state.next_game_id != next_before:
                game = engine.state.next_game_id - 1
            frames_after = getattr(self.decoder.counters, "frames", None)
            noise = type(frames_before) is int and frames_after == frames_before  # no frame
            self.lines.heard(segment, now, game, noise, out)
        self.record.said(self.lines.judge_noise(now, self.faults), out)
        return self._frame_writes(out, now) if out.writes else out

    def _on_segment(self, data: bytes, now: float, out: Effects) -> None:
        # Drivers that time the wheel by the host's clock get it without its steps.
        events = self.decoder.feed(data, now - self._clock_steps)
        decisions: list[Decision] = []
        if events and WHEEL_LINK_LOST in self.faults.since:  # asked after every line
            # The wheel is heard again: a port that merely reopened proves nothing.
            self.record.said(self.faults.clear(WHEEL_LINK_LOST, now), out)
        for event in events:
            if type(event) in _READ_BY_THE_TABLE:
                decisions += self._read(event, now, out)
            elif not self.record.journal_failed:  # nothing new is decided while it cannot be kept
                made = self.engine.on_event(event, now)
                if made:  # most events (a heartbeat, a rotor datum, a pass) decide nothing
                    if self.table_state == "closed":
                        made = self.operator.closed_table(made, now)
                    self._verdicts.follow(event, made)
                    decisions += made
                self.session.event(event, now, out)
                if type(event) is WheelHello:
                    self.wheel.hello(event)
                    out.messages.append(self.wheel_message(now))
        for phase, refused in self.engine.take_refusals():
            # Legal elsewhere, not here: a corrupt frame or a driver's slip. Counted
            # in <base>/wheel and logged.
            out.log("info", "wheel event refused", phase=phase.value, wheel_event=repr(refused))
        self.record.decide(decisions, out)
        self.session.decided(decisions, now, out)

    def _read(self, event: WheelEvent, now: float, out: Effects) -> list[Decision]:
        """A wheel event the table reads itself (``_READ_BY_THE_TABLE``), never the rules."""
        said = contradiction(event, now, self.engine.game_in_progress, self.record.last_game)
        if said is not None:
            return [said]
        if isinstance(event, WheelProfile):
            if self.wheel.profiled(event.facts):
                out.messages.append(self.wheel_message(now))
        elif isinstance(event, WheelVerdict):
            return self._verdicts.judge(event, now)
        elif isinstance(event, WheelRecords):
            if event.figures:  # the wheel's own statistics, beside wheeld's
                out.messages += self.record.wheel_figures_read(event.figures, now)
            return log_mismatches(event, now, self.history)
        return []

    def on_timer(self, now: float) -> Effects:
        """A deadline set by :meth:`next_deadline` has come."""
        out = Effects()
        if not self.journal_failed:
            self.record.decide(self.engine.on_host_time(now), out)
        self.session.timer(now, out)
        return self._frame_writes(out, now)

    def on_clock_step(self, step_s: float, now: float) -> Effects:
        """The host's wall clock stepped by ``step_s``: a step is not silence.

        The shell sees a step against a monotonic clock (``run``) or reads it in
        a capture (``replay``); the link timeout moves with the clock, and an
        alarm says so.
        """
        self.engine.on_clock_step(step_s)
        self._clock_steps += step_s
        out = Effects()
        # Set and cleared at once: the clock was at ``from`` and is at ``to``.
        detail = {"step_s": round(step_s, 3), "from": iso_utc(now - step_s), "to": iso_utc(now)}
        self.record.decide([Alarm(now, "clock_step", detail)], out)
        return out

    def next_deadline(self) -> float | None:
        """The host time the pipeline next wants :meth:`on_timer`, if any."""
        # While the journal cannot write nothing is decided, so no rule's timer runs.
        deadlines = [None if self.journal_failed else self.engine.link_deadline()]
        known = [d for d in (*deadlines, self.session.deadline()) if d is not None]
        return min(known) if known else None

    def on_link_up(self, now: float) -> Effects:
        """The port opened."""
        self.wheel.link_up = True
        out = Effects()
        self.session.connect(now, self.engine.state.last_result_rotor, out)
        out.messages.append(self.wheel_message(now))
        return self._frame_writes(out, now)

    def on_link_down(self, why: str, now: float) -> Effects:
        """The port went away: the open game cannot be vouched for."""
        self.wheel.link_up = False
        out = Effects()
        self.session.disconnect(now)
        if not self.journal_failed:
            self.record.decide(self.engine.on_link_down(now), out)
        self.record.said(self.faults.set(WHEEL_LINK_LOST, now, why=why), out)
        out.messages.append(self.wheel_message(now))
        return out

    # -- the broker's retained messages ----------------------------------------------

    def on_broker_sequence(
        self, payload: bytes, now: float, history: bytes | None = None
    ) -> Effects:
        """The broker's retained sequence, and history: ``floors.BrokerFloors.on_sequence``."""
        return self.floors.on_sequence(payload, now, history)

    def on_broker_result(self, payload: bytes, now: float) -> Effects:
        """The broker's retained result: ``floors.BrokerFloors.on_result``."""
        return self.floors.on_result(payload, now)

    def alarm(self, now: float, code: str, **detail: Any) -> Effects:
        """An alarm the shell found (not the engine): journaled and published like the rest."""
        out = Effects()
        self.record.decide([Alarm(now, code, detail)], out)
        return out

    # -- the journal ------------------------------------------------------------------

    @property
    def journal_failed(self) -> bool:
        """The journal cannot write: nothing new is decided until it can."""
        return self.record.journal_failed

    def journal_write_failed(self, failed: Effects, error: str, now: float) -> Effects:
        """The journal could not keep ``failed`` (``Recorder.write_failed``)."""
        return self.record.write_failed(failed, error, now)

    def journal_recovered(self, now: float) -> Effects:
        """Writing works again (``Recorder.recovered``)."""
        return self.record.recovered(now)

    # -- operator commands --------------------------------------------------------------

    def on_command(self, command: OperatorCommand, now: float) -> tuple[dict[str, Any], Effects]:
        """Judge and carry out an operator command; every one is journaled with its sender."""
        reply, out, accepted = self.operator.carry_out(command, now)
        return reply, self._frame_writes(out, now) if accepted else out

    def acknowledge(self, code: str, operator: str, now: float) -> Effects:
        """An operator acknowledges a fault or alert that is set; raises CommandError otherwise."""
        return self.operator.acknowledge(code, operator, now)

    # -- messages ---------------------------------------------------------------------

    def wheel_message(self, now: float) -> Outgoing:
        """The retained wheel state: link, identity, pockets and decoder counters."""
        counters = self.decoder.counters.as_dict()
        state = self.wheel.state(self.engine.layout.pockets, counters, self.engine.refused)
        return self.announce.wheel(state, now)

    def status_message(self) -> Outgoing:
        """The retained status: online, or a fault that stops the table deciding."""
        return self.announce.status(self.record.journal_failed)

    def status_line(self) -> str:
        """One line for sd_notify STATUS."""
        link = "wheel up" if self.wheel.link_up else "wheel down"
        if self.journal_failed:
            return f"{link}; JOURNAL UNWRITABLE: deciding nothing"
        game = self.engine.game_in_progress
        table = "" if self.table_state == "open" else "; table closed"
        return (f"{link}; game {game} in progress" if game else f"{link}; idle") + table

    def unjournaled_alarm(self, at: float, code: str, detail: dict[str, Any]) -> Outgoing:
        """An alarm the shell raises about its own delivery (``broker_refused``): not
        journaled (it must not become an outbox entry that can be refused in turn),
        but built, and signed, as every other alarm."""
        return self.announce.alarm(Alarm(at, code, detail))

    def committed(self) -> Effects:
        """What follows from decisions once the journal keeps them (``Recorder.committed``)."""
        return self.record.committed()

    # -- helpers ----------------------------------------------------------------------

    def _frame_writes(self, out: Effects, now: float) -> Effects:
        return self.lines.written(out, now, self.engine.game_in_progress)
