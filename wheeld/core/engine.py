"""The game engine: wheel events and the time in, game decisions out.

A pure state machine. It does no I/O and reads no clock: every call is given
the host time ``now``, which the engine uses only to stamp decisions and to
judge ``wheel_link_lost``. Every rule duration is measured in wheel ticks.

The rules and their reason codes are those of ``docs/rules.md``. The engine
lets each wheel event in by the phase table, keeps what it knows of the wheel
between games (its rotor, its link, its pockets) and the state that survives a
restart; the game under way holds its own facts and judges its own rules
(``open_game.OpenGame``), and the engine announces the end it returns.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.core.events import (
    WHEEL_EVENT_NAMES,
    AlternationUnknown,
    BallLaunched,
    BallPassed,
    BallRunning,
    Direction,
    DisplayMismatch,
    FrameDropped,
    Heartbeat,
    PocketReading,
    ResultContradicted,
    RotorDatum,
    SequenceGap,
    WheelEvent,
    WheelHello,
    WheelIncident,
    WheelNoMoreBets,
    WheelProfile,
    WheelRecords,
    WheelReply,
    WheelVerdict,
    WheelVoid,
    WinningNumber,
)
from wheeld.core.game import (
    REASONS,
    Alarm,
    Decision,
    NoSpin,
    ReasonCode,
    Result,
    Spinning,
)
from wheeld.core.layout import WheelLayout, layout_for
from wheeld.core.open_game import OpenGame, Thresholds, ticks_since
from wheeld.core.rules import RESPIN_ROTOR_REVOLUTIONS

if TYPE_CHECKING:
    from wheeld.core.rules import RulesConfig

_INCIDENT_REASONS: dict[str, ReasonCode] = {
    "object": "foreign_object",
    "ball_out": "ball_out_of_wheel",
    "rotor_fault": "rotor_malfunction",
    "sensor_fault": "rotor_malfunction",
}


class Phase(enum.Enum):
    """Where a game cycle stands; ``docs/rules.md`` has the same table."""

    #: No game: the rotor turns, the next launch opens a game.
    IDLE = "idle"
    #: The ball was launched and runs; bets are still open.
    BETTING = "betting"
    #: The ball slowed to the threshold (or the wheel said so): betting closed.
    NO_MORE_BETS = "no_more_bets"
    #: The ball rests in a pocket; ``settle_ms`` of rest make it the result.
    SETTLING = "settling"


ANY_PHASE: dict[type, str] = {
    Heartbeat: "wheel time moves on: timers are judged",
    RotorDatum: "a rotor revolution (a direction change voids a game: rotor_malfunction)",
    WheelHello: "the wheel introduces itself (a reboot or a new pocket count mid-game: frame_loss)",
    WheelIncident: "voids a game (object, ball out, faults), else an alarm",
    SequenceGap: "frames lost: voids a game (frame_loss), else an alarm",
    FrameDropped: "a frame unusable: voids a game (frame_loss), else an alarm",
    WheelVoid: "the wheel voids the game, else an alarm",
    AlternationUnknown: "spins went by unseen: the alternation rule restarts",
    WheelReply: "a command reply: nothing for the rules",
    DisplayMismatch: "nothing for the rules (the pipeline raises display_mismatch)",
    ResultContradicted: "nothing for the rules (the pipeline raises result_contradicted)",
    WheelProfile: "nothing for the rules (the pipeline says it on <base>/wheel)",
    WheelVerdict: "nothing for the rules (the pipeline compares it: wheel_verdict_mismatch)",
    WheelRecords: "nothing for the rules (the pipeline compares it: wheel_log_mismatch)",
}
_IN_GAME: dict[type, str] = {
    BallRunning: "the wheel still sees the ball in the rim",
    WinningNumber: "the wheel's confirmed pocket: the result -> idle",
}
#: Which wheel event each phase takes, and what it does there. An event not
#: listed for the current phase is refused: counted, reported, never applied.
#: A second launch (``BallPassed`` with period 0) during a game is refused too.
PHASE_EVENTS: dict[Phase, dict[type, str]] = {
    Phase.IDLE: {
        **ANY_PHASE,
        BallPassed: "a launch (period 0): -> betting; other passes: a voided spin's ball",
        BallLaunched: "the wheel reports a launch: -> betting",
        PocketReading: "the ball rests or is picked up between games",
        BallRunning: "a voided spin's ball, still running",
        WheelNoMoreBets: "a voided spin's phases go on",
        WinningNumber: "a voided spin's pocket: never a result",
    },
    Phase.BETTING: {
        **ANY_PHASE,
        **_IN_GAME,
        BallPassed: "a revolution; slow enough: -> no_more_bets",
        PocketReading: "the ball dropped into a pocket: -> settling (betting closes)",
        WheelNoMoreBets: "the wheel's own no more bets: -> no_more_bets",
    },
    Phase.NO_MORE_BETS: {
        **ANY_PHASE,
        **_IN_GAME,
        BallPassed: "a revolution",
        PocketReading: "the ball dropped into a pocket: -> settling",
        WheelNoMoreBets: "the wheel confirms no more bets (it vouches for the run)",
    },
    Phase.SETTLING: {
        **ANY_PHASE,
        **_IN_GAME,
        BallPassed: "the ball jumped out and runs on: a revolution",
        PocketReading: "another pocket: settling afresh; none: -> no_more_bets",
        WheelNoMoreBets: "the wheel confirms no more bets (it vouches for the run)",
    },
}


@dataclass(slots=True)
class EngineState:
    """What must survive a restart: small, plain and JSON-serialisable."""

    next_game_id: int = 1
    last_result_rotor: Direction | None = None
    open_game: int | None = None
    #: Rotor revolutions since the last no-spin, capped at the respin threshold;
    #: None when no no-spin is waiting for the rotor.
    rotor_revolutions_since_no_spin: int | None = None

    # How the engine's decisions move it: every change of the state is one of these.

    def open_next(self) -> int:
        """A launch: the next game id is taken, and that game is open until it ends."""
        game_id = self.open_game = self.next_game_id
        self.next_game_id += 1
        return game_id

    def ended(self, ending: Result | NoSpin) -> None:
        """The open game ended: a result sets the rotor the next one must alternate
        from; a no-spin makes the next launch wait for the rotor to turn again."""
        if isinstance(ending, Result):
            self.last_result_rotor = ending.rotor_direction
            self.rotor_revolutions_since_no_spin = None
        else:
            self.rotor_revolutions_since_no_spin = 0
        self.open_game = None

    def rotor_turned(self) -> None:
        """A rotor revolution: counted while a no-spin waits for the rotor (up to enough)."""
        counted = self.rotor_revolutions_since_no_spin
        if counted is not None and counted < RESPIN_ROTOR_REVOLUTIONS:
            self.rotor_revolutions_since_no_spin = counted + 1

    def void_left_open(self, now: float) -> NoSpin | None:
        """A start after a stop: the game the previous run left open is void."""
        if self.open_game is None:
            return None
        reasons: tuple[ReasonCode, ...] = ("controller_restart",)
        no_spin = NoSpin(self.open_game, now, "controller_restart", reasons)
        self.ended(no_spin)
        return no_spin

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON-ready mapping (stored with every decision: by hand, not
        ``asdict``, which copies each field deeply and costs ten times as much)."""
        return {
            "next_game_id": self.next_game_id,
            "last_result_rotor": self.last_result_rotor,
            "open_game": self.open_game,
            "rotor_revolutions_since_no_spin": self.rotor_revolutions_since_no_spin,
        }

    @classmethod
    def from_dict(cls, data: object) -> EngineState:
        """Rebuild a stored state; raises ValueError naming the first malformed field."""
        if not isinstance(data, dict):
            raise ValueError("stored engine state is not a JSON object")
        next_id = _stored_count(data, "next_game_id", minimum=1)
        if next_id is None:
            raise ValueError("stored engine state has no next_game_id")
        rotor = data.get("last_result_rotor")
        if rotor not in (None, "cw", "ccw"):
            raise ValueError(f"stored engine state has a malformed last_result_rotor: {rotor!r}")
        open_game = _stored_count(data, "open_game", minimum=1)
        if open_game is not None and open_game >= next_id:
            raise ValueError(
                f"stored engine state names an impossible open game {open_game}"
                f" (next game id {next_id})"
            )
        revolutions = _stored_count(data, "rotor_revolutions_since_no_spin", minimum=0)
        return cls(next_id, rotor, open_game, revolutions)


#: Stored integers stay below 2**53 so every JSON reader (JavaScript too) reads them exactly.
_STORED_INT_LIMIT = 1 << 53


def _stored_count(data: dict[str, Any], key: str, *, minimum: int) -> int | None:
    """An optional stored integer, exact: 2.7, 1e300, true and "3" are refused."""
    value = data.get(key)
    if value is None:
        return None
    # bool is an int subclass: a stored true must not become game 1.
    if type(value) is not int or not minimum <= value < _STORED_INT_LIMIT:
        raise ValueError(f"stored engine state has a malformed {key}: {value!r}")
    return value


#: The pocket counts a wheel's hello may set, unless its driver's protocol says fewer:
#: 37 and 38, and a Cammegh SS2's 39 and 40 (firmware 2.52's extra zeros).
HELLO_POCKETS = (37, 38, 39, 40)


class GameEngine:
    """Turns wheel events into game decisions by the regulator's rules."""

    def __init__(
        self,
        rules: RulesConfig,
        *,
        pockets: int | None = None,
        state: EngineState | None = None,
        order: tuple[str, ...] | None = None,
        hello_pockets: tuple[int, ...] = HELLO_POCKETS,
    ) -> None:
        self.state = state if state is not None else EngineState()
        self._hello_pockets = hello_pockets  # the driver's protocol's (WRP/1: 37 or 38)
        self._thresholds = Thresholds.of(rules)
        self._link_timeout_s = rules.link_timeout_ms / 1000.0
        # Configured pockets (or ``wheel.pocket_order``) win; else the hello's, 37 until then.
        pockets = len(order) if order is not None else pockets
        self._pockets_fixed = pockets is not None
        self.layout: WheelLayout = layout_for(pockets if pockets is not None else 37, order)
        self._game: OpenGame | None = None
        self._rotor_direction: Direction | None = None
        self._last_rotor_tick: int | None = None
        self._heard_from_wheel = False
        self._last_heard: float | None = None
        #: Events refused for the phase they came in: (phase, event name) -> count.
        self.refused: Counter[tuple[str, str]] = Counter()
        self._refusals: list[tuple[Phase, WheelEvent]] = []

    # -- queries ---------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """The game cycle's phase, from the open game's own facts."""
        game = self._game
        if game is None:
            return Phase.IDLE
        if game.candidate is not None:
            return Phase.SETTLING
        return Phase.NO_MORE_BETS if game.no_more_bets else Phase.BETTING

    def take_refusals(self) -> list[tuple[Phase, WheelEvent]]:
        """The events refused since the last call (for the log); counts stay in ``refused``."""
        taken, self._refusals = self._refusals, []
        return taken

    @property
    def game_in_progress(self) -> int | None:
        """The id of the open game, if any."""
        return self._game.game_id if self._game is not None else None

    def link_deadline(self) -> float | None:
        """Host time at which silence from the wheel voids the open game, if any."""
        if self._game is None or self._last_heard is None or not self._game.link_judged:
            return None
        return self._last_heard + self._link_timeout_s

    # -- inputs ------------------------------------------------------------

    def resume(self, now: float) -> list[Decision]:
        """Start after a stop: a game left open by the previous run is void."""
        no_spin = self.state.void_left_open(now)
        return [] if no_spin is None else [no_spin]

    def taken_over(self, up_to: int, last_rotor: Direction | None) -> int | None:
        """Another controller announced games up to ``up_to`` since this engine's last
        word: the game open here (left by the last run, or still live) at or before it
        was that controller's to end, not ours, and alternation goes on from the
        rotor of its last result (``last_rotor``: None when unknown). Returns the game
        forgotten, if any."""
        self.state.last_result_rotor = last_rotor
        game_id = self.game_in_progress or self.state.open_game
        if game_id is None or game_id > up_to:
            return None
        self.state.open_game = None
        self._game = None
        return game_id

    def on_event(self, event: WheelEvent, now: float) -> list[Decision]:
        """Apply one wheel event heard at host time ``now``."""
        out: list[Decision] = []
        self._last_heard = now
        game = self._game
        tick = getattr(event, "tick", None)
        if game is not None and tick is not None:
            ending = game.expire(tick, self._last_rotor_tick, now)
            if ending is not None:
                self._end(ending, out)
        phase = self.phase
        if type(event) not in PHASE_EVENTS[phase] or (
            type(event) is BallPassed and event.period_ms == 0 and phase is not Phase.IDLE
        ):
            self.refused[(phase.value, WHEEL_EVENT_NAMES[type(event)])] += 1
            self._refusals.append((phase, event))
            return out
        _HANDLERS[type(event)](self, event, now, out)
        self._heard_from_wheel = True
        return out

    def on_host_time(self, now: float) -> list[Decision]:
        """Let host time pass: silence past ``link_timeout_ms`` voids the open game."""
        deadline = self.link_deadline()
        if deadline is None or now < deadline:
            return []
        out: list[Decision] = []
        self._void({"wheel_link_lost"}, deadline, out)
        return out

    def on_clock_step(self, step_s: float) -> None:
        """The host's wall clock stepped by ``step_s`` (the shell saw it against a
        monotonic clock): silence is measured from the same moment, moved with it."""
        if self._last_heard is not None:
            self._last_heard += step_s

    def on_link_down(self, now: float) -> list[Decision]:
        """The port itself went away: the open game cannot be vouched for."""
        out: list[Decision] = []
        if self._game is not None:
            self._void({"wheel_link_lost"}, now, out)
        # Whatever the wheel does while we cannot hear it is unknown to us.
        self._last_rotor_tick = None
        return out

    def declare_no_spin(self, note: str, now: float) -> list[Decision]:
        """The pit boss voids the open game; nothing happens when none is open."""
        out: list[Decision] = []
        if self._game is not None:
            self._void({"declared"}, now, out, note=note)
        return out

    def void_unrecorded(self, game_id: int, now: float) -> list[Decision]:
        """The journal could not keep game ``game_id``: void it (``controller_restart``).

        The open game is closed; a game that already ended (its end never
        reached the journal) is announced void all the same, so it ends once.
        """
        reasons: tuple[ReasonCode, ...] = ("controller_restart",)
        game = self._game
        if game is not None and game.game_id == game_id:
            out: list[Decision] = []
            self._void({"controller_restart"}, now, out)
            return out
        self.state.rotor_revolutions_since_no_spin = 0
        return [NoSpin(game_id, now, "controller_restart", reasons)]

    # -- a game's end ------------------------------------------------------

    def _end(self, ending: Result | NoSpin, out: list[Decision]) -> None:
        """The open game ended: announce it, close it, and move the state on."""
        out.append(ending)
        self.state.ended(ending)
        self._game = None

    def _void(
        self,
        reasons: set[ReasonCode],
        at: float,
        out: list[Decision],
        note: str | None = None,
    ) -> None:
        game = self._game
        assert game is not None
        self._end(game.void(reasons, at, note), out)

    # -- wheel events ------------------------------------------------------

    def _on_rotor(self, event: RotorDatum, now: float, out: list[Decision]) -> None:
        self._last_rotor_tick = event.tick
        self._rotor_direction = event.direction
        self.state.rotor_turned()
        game = self._game
        if game is not None and event.direction != game.rotor_direction:
            self._void({"rotor_malfunction"}, now, out)

    def _on_ball(self, event: BallPassed, now: float, out: list[Decision]) -> None:
        game = self._game
        if game is None:
            if event.period_ms == 0:
                self._launch(event, now, out)
            # Otherwise: the ball of a voided spin still running; ignored.
            return
        ending = game.ball_passed(event, now, out)
        if ending is not None:
            self._end(ending, out)

    def _launch(self, event: BallPassed, now: float, out: list[Decision]) -> None:
        limits = self._thresholds
        rotor: Direction | None = None
        if (
            self._last_rotor_tick is not None
            and ticks_since(event.tick, self._last_rotor_tick) < limits.rotor_timeout_ms
        ):
            rotor = self._rotor_direction
        game_id = self.state.open_next()
        game = OpenGame(game_id, rotor, event.direction, event.tick, thresholds=limits)
        self._open(game, now, out)

    def _open(self, game: OpenGame, now: float, out: list[Decision]) -> None:
        """A launch (the state has opened it): announce it, judge what can be judged at once."""
        state = self.state
        self._game = game
        rotor, ball = game.rotor_direction, game.ball_direction
        out.append(Spinning(game.game_id, now, rotor, ball, game.extra))
        revolutions = state.rotor_revolutions_since_no_spin
        causes = game.faults_at_launch(state.last_result_rotor, revolutions)
        if causes:
            self._end(game.void(causes, now), out)

    def _on_pocket(self, event: PocketReading, now: float, out: list[Decision]) -> None:
        game = self._game
        if game is not None:
            ending = game.pocket_read(event, self.layout, now, out)
            if ending is not None:
                self._end(ending, out)

    # -- wheels that judge the game themselves ------------------------------

    def _on_launched(self, event: BallLaunched, now: float, out: list[Decision]) -> None:
        # Only in idle (PHASE_EVENTS): a driver voids a game before it reports the next.
        if event.rotor_direction is not None:
            # The wheel just reported its rotor turning: as good as a datum pass
            # for the rotor timeout (not counted as a revolution).
            self._last_rotor_tick = event.tick
            self._rotor_direction = event.rotor_direction
        game = OpenGame.reported(event, self.state.open_next(), self._thresholds)
        self._open(game, now, out)

    def _on_running(self, event: BallRunning, now: float, out: list[Decision]) -> None:
        if self._game is not None:
            self._game.last_ball_tick = event.tick

    def _on_no_more_bets(self, event: WheelNoMoreBets, now: float, out: list[Decision]) -> None:
        if self._game is not None:
            self._game.wheel_closes_betting(now, out)

    def _on_winning_number(self, event: WinningNumber, now: float, out: list[Decision]) -> None:
        if self._game is not None:
            self._end(self._game.number_given(event, self.layout, now, out), out)

    def _on_wheel_void(self, event: WheelVoid, now: float, out: list[Decision]) -> None:
        # A driver names a reason code (typed so); anything else, from a driver
        # that is not type-checked, is a fault of the wheel itself.
        reason: ReasonCode = "rotor_malfunction"
        if event.reason in REASONS:
            reason = event.reason
        if self._game is not None:
            self._void({reason}, now, out)
        elif event.alarm_between_games:
            out.append(Alarm(now, "wheel_fault", {"reason": reason, "detail": event.detail}))

    def _on_alternation_unknown(
        self, event: AlternationUnknown, now: float, out: list[Decision]
    ) -> None:
        self.state.last_result_rotor = None

    def _nothing_for_the_rules(self, event: WheelEvent, now: float, out: list[Decision]) -> None:
        """Wheel time moved (the timers were judged on the way in), or a fact for the
        pipeline or the controller, not the game: ``ANY_PHASE`` says which."""

    def _on_incident(self, event: WheelIncident, now: float, out: list[Decision]) -> None:
        reason = _INCIDENT_REASONS.get(event.code)
        if self._game is not None and reason is not None:
            self._void({reason}, now, out)
        elif event.code != "launch":
            out.append(Alarm(now, event.code))

    def _on_hello(self, event: WheelHello, now: float, out: list[Decision]) -> None:
        rebooted = event.seq == 0 and self._heard_from_wheel
        if event.pockets not in self._hello_pockets:
            out.append(Alarm(now, "pockets_unsupported", {"pockets": event.pockets}))
        elif not self._pockets_fixed:
            if event.pockets != self.layout.pockets and self._game is not None:
                # The game was launched on the other count's wheel: a 00 a 37-pocket
                # game could not have would settle it. Another head answered, or this
                # one is confused; either way what it said of this game is not vouched for.
                self._void({"frame_loss"}, now, out)
            self.layout = layout_for(event.pockets)
        elif event.pockets != self.layout.pockets:
            out.append(
                Alarm(
                    now,
                    "pockets_mismatch",
                    {"configured": self.layout.pockets, "wheel": event.pockets},
                )
            )
        if rebooted:
            # The head restarted its clock: every tick reference is meaningless now.
            self._last_rotor_tick = None
            if self._game is not None:
                self._void({"frame_loss"}, now, out)
            out.append(Alarm(now, "wheel_restarted"))

    def _on_loss(self, event: SequenceGap | FrameDropped, now: float, out: list[Decision]) -> None:
        if self._game is not None:
            self._void({"frame_loss"}, now, out)
        else:
            detail: dict[str, Any] = (
                {"lost": event.lost} if isinstance(event, SequenceGap) else {"why": event.reason}
            )
            out.append(Alarm(now, "frame_loss", detail))


#: Which of the engine's methods applies each wheel event, once the phase table
#: (``PHASE_EVENTS``) has let it in: one table for every engine.
_HANDLERS: dict[type[WheelEvent], Callable[[GameEngine, Any, float, list[Decision]], None]] = {
    Heartbeat: GameEngine._nothing_for_the_rules,
    RotorDatum: GameEngine._on_rotor,
    BallPassed: GameEngine._on_ball,
    PocketReading: GameEngine._on_pocket,
    WheelIncident: GameEngine._on_incident,
    WheelHello: GameEngine._on_hello,
    SequenceGap: GameEngine._on_loss,
    FrameDropped: GameEngine._on_loss,
    BallLaunched: GameEngine._on_launched,
    BallRunning: GameEngine._on_running,
    WheelNoMoreBets: GameEngine._on_no_more_bets,
    WinningNumber: GameEngine._on_winning_number,
    WheelVoid: GameEngine._on_wheel_void,
    AlternationUnknown: GameEngine._on_alternation_unknown,
    WheelReply: GameEngine._nothing_for_the_rules,
    DisplayMismatch: GameEngine._nothing_for_the_rules,
    ResultContradicted: GameEngine._nothing_for_the_rules,
    WheelProfile: GameEngine._nothing_for_the_rules,
    WheelVerdict: GameEngine._nothing_for_the_rules,
    WheelRecords: GameEngine._nothing_for_the_rules,
}
