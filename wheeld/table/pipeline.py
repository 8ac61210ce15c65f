"""The table pipeline: one wheel's bytes in, everything the daemon must do out. Sans-I/O.

It owns the driver's decoder and session, the game engine, the winning-number
history and every payload builder. Its inputs are what happens to a table —
bytes from the wheel with the host time, a timer firing, the link going up or
down, an operator command, the journal failing — and each input returns
:class:`Effects`: journal records, messages to publish, bytes to write to the
wheel and log records. It reads no clock and does no I/O, so ``wheeld run``,
``wheeld replay`` and the tests drive the very same object.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from wheeld.core.framing import CUT_BYTES
from wheeld.core.commands import (
    Acknowledge,
    CommandError,
    DeclareNoSpin,
    OperatorCommand,
    SetTable,
    named_operator,
    parse,
)
from wheeld.core.engine import EngineState, GameEngine
from wheeld.core.events import (
    BallLaunched,
    DisplayMismatch,
    ResultContradicted,
    WheelHello,
    WheelProfile,
    WheelVerdict,
)
from wheeld.core.game import (
    Alarm,
    Decision,
    GameEvent,
    NoMoreBets,
    NoSpin,
    ReasonCode,
    Result,
    Spinning,
)
from wheeld.core.messages import SCHEMA_VERSION, game_payload, iso_utc
from wheeld.core.noise import NoiseMeter
from wheeld.core.ratelimit import AlarmRate
from wheeld.core.rules import RulesConfig
from wheeld.core.signing import ChainState, Signer, digest, signature_problem
from wheeld.core.signing import chain as sign_into_chain
from wheeld.core.stats import Statistics
from wheeld.drivers import DriverSession, WheelDecoder
from wheeld.table.effects import (
    AlarmRecord,
    CommandRecord,
    Effects,
    FrameRecord,
    GameRecord,
    Outgoing,
    TableState,
)

#: The rules a wheel with sensor output (a Cammegh on Extended Advanced) lets wheeld
#: judge itself: a no-spin for one of them where the wheel gave a number is a
#: ``wheel_verdict_mismatch``; other no-spins (link, frames, an operator) are not.
JUDGED_FROM_SENSORS: frozenset[ReasonCode] = frozenset(
    {"insufficient_revolutions", "ball_same_direction", "rotor_stopped"}
)
#: The note a spin launched while the table is closed is voided with.
CLOSED_TABLE_NOTE = "table closed"
#: Faults that are set and later cleared (alarms with state, since and until).
WHEEL_LINK_FAULT = "wheel_link_lost"
JOURNAL_FAULT = "journal_unwritable"
COVER_FAULT = "cover_open"
LINE_NOISE_FAULT = "line_noise"
DEVIATION_ALERT = "deviation"
REPEATED_NO_SPIN_ALERT = "repeated_no_spins"
GAMES_PER_HOUR_ALERT = "games_per_hour"
ROTOR_SPEED_ALERT = "rotor_speed"
SECTOR_ALERT = "sector_concentration"
DIRECTION_ALERT = "direction_unchanged"
#: How much of a command's payload the journal keeps.
MAX_JOURNALED_COMMAND = 2000
_EVENT_NAMES: dict[type, str] = {Spinning: "spinning", NoMoreBets: "no more bets"}
#: The ``event`` each game decision is published as.
_PUBLISHED_AS: dict[type, str] = {
    Spinning: "spinning",
    NoMoreBets: "no_more_bets",
    Result: "result",
    NoSpin: "no_spin",
}
#: The highest game id or seq the broker may move a table on to. Far below JSON's
#: exact integers (2**53 - 1): a table moved there still has room for every game
#: it will ever play, and a forged or broken value near the end is no evidence.
LAST_CONTINUABLE = 2**52
#: Events that open a game (a game whose last word was one of these is still open).
LAUNCHED = frozenset({"spinning", "no_more_bets"})
#: A table's chain before its first message ever: seq 1, prev null.
FIRST_MESSAGE = ChainState()


def _compact(payload: dict[str, Any]) -> str:
    """A signed payload on the wire: compact, like the unsigned ones (the models' JSON)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


class LineSplitter:
    """The wheel's byte stream cut into lines for the journal: at LF, without CR.

    A line that runs on without a line end is handed over in pieces of
    ``CUT_BYTES``, as the capture writes it, so garbage costs memory in
    proportion to nothing.
    """

    def __init__(self) -> None:
        self._partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes (and the pieces of any over-long one)."""
        lines: list[bytes] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._partial += data[start:end]
            lines.append(bytes(self._partial).removesuffix(b"\r"))
            self._partial.clear()
            start = end + 1
        self._partial += data[start:]
        while len(self._partial) > CUT_BYTES:
            lines.append(bytes(self._partial[:CUT_BYTES]))
            del self._partial[:CUT_BYTES]
        return lines


def _segments(data: bytes) -> list[bytes]:
    """``data`` cut after each LF: the decoder is fed a line at a time, so each line's
    frame record names the game it fell in."""
    pieces = data.split(b"\n")
    segments = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1] or not segments:
        segments.append(pieces[-1])
    return segments


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """``[alerts]``: when the table's figures call for an engineer (docs/statistics.md)."""

    #: A chi-squared p-value below this, over the whole series, is a deviation.
    deviation_p_value: float = 0.001
    #: This many no-spins of one cause in a row.
    repeated_no_spins: int = 3
    #: The recent rate of play (games per hour) below or above these; None: not judged.
    games_per_hour_min: float | None = None
    games_per_hour_max: float | None = None
    #: The rotor's speed at launch (rpm, where the wheel reports it) outside these.
    rotor_rpm_min: float | None = None
    rotor_rpm_max: float | None = None
    #: The most-hit arc's p-value under this; None: not judged.
    sector_p_value: float | None = None
    #: Results an arc family needs before its concentration is judged.
    sector_min_games: int = 370
    #: This many launches in a row with the rotor turning as at the last result.
    direction_unchanged: int | None = None
    #: Noise bytes in a minute past which ``line_noise`` is set (cleared under half).
    line_noise_bytes_per_minute: int = 2048


@dataclass(frozen=True, slots=True)
class TableSettings:
    """What a pipeline needs to know of the configuration."""

    table: str
    base_topic: str
    driver: str
    port: str = ""
    pockets: int | None = None
    history_length: int = 100
    rules: RulesConfig = field(default_factory=RulesConfig)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    #: The journal's epoch, carried in every game message (``replay``: one made from the
    #: capture; a pipeline with no journal behind it: this placeholder).
    epoch: str = "unjournaled"
    #: The shell calls ``committed`` once the journal keeps a batch of decisions (the
    #: daemon); off, the pipeline derives at once (replay, which keeps nothing).
    after_commit: bool = False


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
        self.settings = settings
        #: The table's statistics, fed each outcome; published on <base>/stats.
        self.statistics = statistics
        self.decoder = decoder
        self.session = session
        self.engine = GameEngine(settings.rules, pockets=settings.pockets, state=state)
        self.history: deque[str] = deque(history, maxlen=settings.history_length)
        self.table_state: TableState = table_state
        self.link_up = False
        self.wheel_info: dict[str, Any] = {}
        #: What the driver said of the wheel's output (``WheelProfile``), on <base>/wheel.
        self.wheel_profile: dict[str, Any] = {}
        #: The game the wheel's last launch opened, and how wheeld ended it: what the
        #: wheel's own verdict on that game is held against.
        self._wheel_game: int | None = None
        self._wheel_outcome: Result | NoSpin | None = None
        #: Game ids whose decisions the journal could not keep, in order.
        self.unrecorded: list[int] = []
        #: Faults now set: code -> host time they began.
        self.faults: dict[str, float] = {}
        #: What each set fault was raised with (its detail), for a restart to keep.
        self._fault_detail: dict[str, dict[str, Any]] = {}
        #: Set faults an operator acknowledged: code -> (operator, host time).
        self.acknowledged: dict[str, tuple[str, float]] = {}
        #: The no-spin cause repeating now, and how many times in a row.
        self._no_spin_run: tuple[str | None, int] = (None, 0)
        #: The last result's rotor direction, and launches in a row turning the same way.
        self._direction_run: tuple[str | None, int] = (None, 0)
        #: The sum of the host clock's steps so far (the decoder's time leaves them out).
        self._clock_steps = 0.0
        self.journal_failed = False
        self._saved_state = replace(self.engine.state)
        self._last_game: int | None = None
        self._base = settings.base_topic
        #: Signs every <base>/game payload (chained) and every alarm; None: unsigned.
        self.signer = signer
        #: Where the chain of <base>/game messages stands: what the next one carries.
        self.chain = chain
        self._from_wheel = LineSplitter()
        self._noise = NoiseMeter()
        self._alarm_rate = AlarmRate()
        #: Decisions made, not yet known kept: what ``committed`` derives from.
        self._undone: list[tuple[GameRecord, GameEvent]] = []
        #: The last result's rotor as the journal keeps it (alternation is judged by it).
        self._kept_rotor = self.engine.state.last_result_rotor
        #: The last marker of another controller this journal took the table over
        #: from: (epoch, seq or game id, event); read again, it changes nothing.
        self.taken_from = taken_from
        self._restore_alerts(set_alerts or {})

    def _restore_alerts(self, stored: Mapping[str, Mapping[str, Any]]) -> None:
        """The alerts the last run left set (the journal's ``set_alerts``): same since, same ack."""
        for code, alert in stored.items():
            since = alert.get("since")
            if isinstance(since, bool) or not isinstance(since, int | float):
                continue  # unreadable: judged afresh
            self.faults[code] = float(since)
            detail = alert.get("detail")
            self._fault_detail[code] = dict(detail) if isinstance(detail, Mapping) else {}
            by, at = alert.get("acknowledged_by"), alert.get("acknowledged_at")
            if isinstance(by, str) and isinstance(at, int | float):
                self.acknowledged[code] = (by, float(at))
        repeated = self._fault_detail.get(REPEATED_NO_SPIN_ALERT, {})
        if isinstance(repeated.get("reason"), str) and type(repeated.get("count")) is int:
            # The run goes on from where it stood: one more no-spin of that cause is no new one.
            self._no_spin_run = (repeated["reason"], repeated["count"])

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        """The faults and alerts now set, as the journal keeps them for a restart."""
        kept: dict[str, dict[str, Any]] = {}
        for code, since in sorted(self.faults.items()):
            by, at = self.acknowledged.get(code, (None, None))
            kept[code] = {
                "since": since,
                "detail": self._fault_detail.get(code, {}),
                "acknowledged_by": by,
                "acknowledged_at": at,
            }
        return kept

    # -- inputs ---------------------------------------------------------------

    def start(self, now: float) -> Effects:
        """The daemon starts: a game left open by the previous run is void."""
        out = Effects()
        self._decide(self.engine.resume(now), out)
        self._clear_gone(now, out)
        return out

    def _clear_gone(self, now: float, out: Effects) -> None:
        """Alerts the last run left set whose condition is gone now: each cleared, once."""
        settings = self.settings.alerts
        gone = {JOURNAL_FAULT}  # the journal opened: it is writable
        if settings.games_per_hour_min is None and settings.games_per_hour_max is None:
            gone.add(GAMES_PER_HOUR_ALERT)
        if settings.rotor_rpm_min is None and settings.rotor_rpm_max is None:
            gone.add(ROTOR_SPEED_ALERT)
        if settings.direction_unchanged is None:
            gone.add(DIRECTION_ALERT)
        if self._no_spin_run[1] < settings.repeated_no_spins:
            gone.add(REPEATED_NO_SPIN_ALERT)
        if self.statistics is not None:
            p_value = self.statistics.chi_squared.p_value
            if p_value is None or p_value >= settings.deviation_p_value:
                gone.add(DEVIATION_ALERT)
        if settings.sector_p_value is None:
            gone.add(SECTOR_ALERT)
        elif self.statistics is not None:
            found = self.statistics.sector_concentration(settings.sector_min_games)
            if found is None or found.p_value >= settings.sector_p_value:
                gone.add(SECTOR_ALERT)
        for code in sorted(gone & self.faults.keys()):
            self._fault(code, now, out, active=False)

    def on_bytes(self, data: bytes, now: float) -> Effects:
        """Bytes from the wheel, heard at host time ``now``; every line goes to the journal.

        A line that made no frame of the wheel's protocol is noise: measured
        (``line_noise``), and journaled as a sample rather than whole.
        """
        out = Effects()
        noisy = 0
        for segment in _segments(data):
            before = self.engine.game_in_progress
            next_before = self.engine.state.next_game_id
            frames_before = self._good_frames()
            self._on_segment(segment, now, out)
            # The game in progress when the line crossed, or the one it opened
            # (even if the launch was voided at once).
            game = before
            if game is None and self.engine.state.next_game_id != next_before:
                game = self.engine.state.next_game_id - 1
            noise = frames_before is not None and self._good_frames() == frames_before
            for line in self._from_wheel.feed(segment):
                out.frames.append(FrameRecord(now, "<", line, game, noise))
                if noise:
                    noisy += len(line) + 1
        if noisy:
            self._noise.add(now, noisy)
        if noisy or LINE_NOISE_FAULT in self.faults:
            self._judge_noise(now, out)
        return self._frame_writes(out, now)

    def _good_frames(self) -> int | None:
        """The frames the decoder has read whole (its ``frames`` counter), None if it keeps none."""
        count = getattr(self.decoder.counters, "frames", None)
        return count if type(count) is int else None

    def _judge_noise(self, now: float, out: Effects) -> None:
        """``line_noise``: set past the threshold over the last minute, cleared under half."""
        heard = self._noise.in_window(now)
        threshold = self.settings.alerts.line_noise_bytes_per_minute
        if heard > threshold:
            self._fault(LINE_NOISE_FAULT, now, out, active=True, bytes_per_minute=heard)
        elif heard <= threshold // 2:
            self._fault(LINE_NOISE_FAULT, now, out, active=False)

    def _on_segment(self, data: bytes, now: float, out: Effects) -> None:
        decisions: list[Decision] = []
        session = self.session
        # Drivers that time the wheel by the host's clock get it without its steps.
        events = self.decoder.feed(data, now - self._clock_steps)
        if events and WHEEL_LINK_FAULT in self.faults:
            # The wheel is heard again: a port that merely reopened proves nothing.
            self._fault(WHEEL_LINK_FAULT, now, out, active=False)
        for event in events:
            if isinstance(event, DisplayMismatch):
                game = self.engine.game_in_progress or self._last_game
                decisions.append(
                    Alarm(
                        now,
                        "display_mismatch",
                        {"game_id": game, "number": event.number, "display": event.display},
                    )
                )
                continue
            if isinstance(event, ResultContradicted):
                # Said loudly: settlement may need the pit boss (docs/mqtt.md).
                decisions.append(
                    Alarm(
                        now,
                        "result_contradicted",
                        {
                            "severity": "critical",
                            "game_id": self._last_game,
                            "number": event.number,
                            "later": event.later,
                        },
                    )
                )
                continue
            if isinstance(event, WheelProfile):
                if self.wheel_profile != {**self.wheel_profile, **event.facts}:
                    self.wheel_profile.update(event.facts)
                    out.messages.append(self.wheel_message(now))
                continue
            if isinstance(event, WheelVerdict):
                decisions += self._judge_verdict(event, now)
                continue
            if self.journal_failed:
                # Nothing new is decided while decisions cannot be kept.
                continue
            if self.table_state == "closed":
                made = self._closed_table(self.engine.on_event(event, now), now)
            else:
                made = self.engine.on_event(event, now)
            self._follow_wheel_game(event, made)
            decisions += made
            if session is not None:
                out.writes += session.on_event(event, now)
            if isinstance(event, WheelHello):
                self.wheel_info.update(
                    model=event.model,
                    firmware=event.firmware,
                    serial=event.serial,
                    wheel_pockets=event.pockets,
                )
                out.messages.append(self.wheel_message(now))
        for phase, refused in self.engine.take_refusals():
            # Legal elsewhere, not here: a corrupt frame or a driver's slip. Counted
            # in <base>/wheel and logged.
            out.log("info", "wheel event refused", phase=phase.value, wheel_event=repr(refused))
        self._decide(decisions, out)
        if session is not None:
            out.writes += session.after_decisions(decisions, now)
            self._session_alarms(now, out)

    def _follow_wheel_game(self, event: object, made: list[Decision]) -> None:
        """Keep the game a wheel's launch opened and wheeld's end of it."""
        for decision in made:
            if isinstance(decision, Spinning) and isinstance(event, BallLaunched):
                self._wheel_game, self._wheel_outcome = decision.game_id, None
            elif isinstance(decision, Result | NoSpin) and decision.game_id == self._wheel_game:
                self._wheel_outcome = decision

    def _judge_verdict(self, verdict: WheelVerdict, now: float) -> list[Decision]:
        """``wheel_verdict_mismatch``: the wheel completed a number for a game wheeld voided
        by a rule it judged from the wheel's own sensors, or voided one wheeld published."""
        outcome, self._wheel_outcome = self._wheel_outcome, None
        if outcome is None:
            return []  # wheeld has not ended that game (or never saw it start)
        wheel_valid = verdict.void is None and verdict.number is not None
        if isinstance(outcome, Result):
            if wheel_valid:
                return []
            ours = outcome.number
        elif not wheel_valid or not JUDGED_FROM_SENSORS.intersection(outcome.reasons):
            return []  # both void, or wheeld voided for what the wheel cannot see
        else:
            ours = outcome.reason
        theirs = verdict.number if wheel_valid else verdict.void or "no number"
        detail = {"game_id": outcome.game_id, "wheel_verdict": theirs, "wheeld_verdict": ours}
        return [Alarm(now, "wheel_verdict_mismatch", detail)]

    def on_timer(self, now: float) -> Effects:
        """A deadline set by :meth:`next_deadline` has come."""
        out = Effects()
        if not self.journal_failed:
            self._decide(self.engine.on_host_time(now), out)
        if self.session is not None:
            out.writes += self.session.on_timer(now)
            self._session_alarms(now, out)
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
        self._decide([Alarm(now, "clock_step", detail)], out)
        return out

    def next_deadline(self) -> float | None:
        """The host time the pipeline next wants :meth:`on_timer`, if any."""
        # While the journal cannot write nothing is decided, so no rule's timer runs.
        deadlines = [None if self.journal_failed else self.engine.link_deadline()]
        if self.session is not None:
            deadlines.append(self.session.next_deadline())
        known = [d for d in deadlines if d is not None]
        return min(known) if known else None

    def on_link_up(self, now: float) -> Effects:
        """The port opened."""
        self.link_up = True
        out = Effects()
        if self.session is not None:
            # A session that picks the rotor's direction needs the last result's (SS2 2.52).
            on_last_result = getattr(self.session, "on_last_result", None)
            if on_last_result is not None:
                on_last_result(self.engine.state.last_result_rotor)
            out.writes += self.session.on_connect(now)
            self._session_alarms(now, out)
        out.messages.append(self.wheel_message(now))
        return self._frame_writes(out, now)

    def on_link_down(self, why: str, now: float) -> Effects:
        """The port went away: the open game cannot be vouched for."""
        self.link_up = False
        out = Effects()
        if self.session is not None:
            self.session.on_disconnect(now)
        if not self.journal_failed:
            self._decide(self.engine.on_link_down(now), out)
        self._fault(WHEEL_LINK_FAULT, now, out, active=True, why=why)
        out.messages.append(self.wheel_message(now))
        return out

    def _sequence_message(self, decision: GameEvent, message: dict[str, Any]) -> Outgoing:
        """``<base>/sequence``, retained: the game message about to be published, whole.

        Published before that message (intent first). A daemon that lost its
        state directory, or a standby that takes the table over with a journal
        of its own, reads it before deciding anything: it goes on past this
        game id and this seq, never reusing one a consumer saw, and says the
        message again (a repeat a consumer drops) rather than contradict it.
        """
        said: dict[str, Any] = {
            "game_id": decision.game_id,
            "event": _PUBLISHED_AS[type(decision)],
            "epoch": self.settings.epoch,
        }
        if self.signer is not None:
            said["seq"] = self.chain.seq - 1
            said["digest"] = self.chain.prev  # the next message's prev
        said.update(message=message, table=self.settings.table, schema_version=SCHEMA_VERSION)
        return Outgoing(f"{self._base}/sequence", json.dumps(said), retain=True)

    def on_broker_sequence(self, payload: bytes, now: float) -> Effects:
        """The broker's retained ``<base>/sequence``: game ids and seqs go on past it.

        Read at start, before the first decision, and at every reconnect. The
        marker names the last game message said for the table, before it went
        out, whole. One this journal holds (or already took over from) changes
        nothing. Another — a standby's, a lost state directory's, or one a
        power cut took from ours — is a table another controller went on with:
        its message is said again, word for word (a repeat consumers drop: it
        may never have gone out); ids and seqs go on past it, the next
        message's ``prev`` naming it; a game it launched is voided here, once;
        the game open here at or before it is forgotten (it was the other
        controller's to end); alternation goes on from the other's last
        result; and what this journal still had to say of its games is let go
        (``Effects.superseded``): it never went out, or the marker would say so.

        Only a marker whose message is the one it names, signed by this table's
        key (at an unsigned table: unsigned), moves anything: a marker is
        retained state, and anyone allowed to publish there could forge one.
        An older wheeld's marker (no epoch, no message) moves ids and seqs on.
        """
        out = Effects()
        body = self._broker_json(payload, "sequence", out)
        if body is None:
            return out
        game, event, seq = body.get("game_id"), body.get("event"), body.get("seq")
        if type(game) is not int or not 0 < game <= LAST_CONTINUABLE:
            why = f"game_id {str(game)[:32]} is not one to go on from"
            out.log("warning", "broker's retained sequence ignored", why=why)
            return out
        if "epoch" not in body:
            return self._older_marker(body, game, now, out)
        message = self._vouched(body, out)
        if message is None:
            return out
        # Signed, the marker's seq is its message's (``_vouched``): the chain's place.
        number = seq if self.signer is not None and type(seq) is int else None
        ours = body["epoch"] == self.settings.epoch and (
            number < self.chain.seq if number is not None else game < self.engine.state.next_game_id
        )
        said = (str(body["epoch"]), number if number is not None else game, str(event))
        if ours or said == self.taken_from:
            return out
        self.taken_from = out.taken_from = said
        out.superseded = True
        body_text = _compact(message)
        out.messages.append(Outgoing(f"{self._base}/game", body_text))
        if event == "result":
            out.messages.append(Outgoing(f"{self._base}/result", body_text, retain=True))
        rotor = message.get("rotor_direction") if event == "result" else None
        forgotten = self.engine.taken_over(game, rotor if rotor in ("cw", "ccw") else None)
        if forgotten is not None:
            out.log("warning", "game open here ended by another controller", game_id=forgotten)
        digest_ = body.get("digest")
        if number is not None and type(digest_) is str:
            self._go_on_after(number, digest_, now, out)
        self._floor_game_id(game, now, out)
        voided: list[Decision] = []
        if event in LAUNCHED:
            voided.append(NoSpin(game, now, "controller_restart", ("controller_restart",)))
        self._decide(voided, out)  # the engine state too, when it changed
        return out

    def _older_marker(self, body: dict[str, Any], game: int, now: float, out: Effects) -> Effects:
        """An older wheeld's marker: the last message after it went out, by id and seq."""
        left_open = body.get("event") in LAUNCHED and game >= self.engine.state.next_game_id
        digest_ = body.get("digest")
        if type(digest_) is str and len(digest_) == 43:
            self._floor_seq(body.get("seq"), digest_, now, out)
        self._floor_game_id(game, now, out)
        voided: list[Decision] = []
        if left_open and self.engine.state.next_game_id > game:
            voided.append(NoSpin(game, now, "controller_restart", ("controller_restart",)))
        self._decide(voided, out)
        return out

    def _vouched(self, marker: dict[str, Any], out: Effects) -> dict[str, Any] | None:
        """The game message a marker carries, when it is the one the marker names and this
        table vouches for it; else None, with one log line."""
        message = marker.get("message")
        why = None
        if not isinstance(message, dict):
            why = "it carries no message"
        elif (message.get("game_id"), message.get("event"), message.get("epoch")) != (
            marker.get("game_id"),
            marker.get("event"),
            marker.get("epoch"),
        ) or message.get("table") != self.settings.table:
            why = "its message is not the one it names"
        elif self.signer is not None:
            why = signature_problem(message, self.signer.public_key)
            if why is None and (message.get("seq"), digest(message)) != (
                marker.get("seq"),
                marker.get("digest"),
            ):
                why = "its seq or digest is not its message's"
        elif "sig" in message:
            why = "a signed message at a table that signs nothing"
        if why is not None:
            out.log("warning", "broker's retained sequence ignored", why=why)
            return None
        assert isinstance(message, dict)
        return message

    def _go_on_after(self, seq: int, digest_: str, now: float, out: Effects) -> None:
        """The chain goes on after another controller's message ``seq`` (``digest_``): the
        next message names it as ``prev``, its seq past both chains'."""
        moved = self.chain.seq <= seq
        self.chain = ChainState(max(self.chain.seq, seq + 1), digest_)
        out.chain_floor = (self.chain.seq - 1, digest_)
        if moved:
            self._raise(
                Alarm(
                    now,
                    "seq_behind_broker",
                    {"severity": "critical", "broker_seq": seq, "next_seq": seq + 1},
                ),
                out,
            )

    def on_broker_result(self, payload: bytes, now: float) -> Effects:
        """The broker's retained result: a game id (or seq) at or past ours would repeat.

        A state directory lost whole (journal and game-ids) restarts ids at 1,
        while the table's consumers have seen higher ones and drop repeats by id.
        The next game then takes the id after the broker's, and a critical
        alarm says so; a signed result moves the chain past its seq too.
        """
        out = Effects()
        body = self._broker_json(payload, "result", out)
        if body is None:
            return out
        if isinstance(body.get("sig"), str):
            try:
                said = digest(body)
            except (ValueError, TypeError):  # not canonicalisable: signed by nobody
                out.log("warning", "broker's retained result ignored", why="not canonical JSON")
                return out
            self._floor_seq(body.get("seq"), said, now, out)
        return self._floor_game_id(body.get("game_id"), now, out)

    def _broker_json(self, payload: bytes, name: str, out: Effects) -> dict[str, Any] | None:
        """A retained payload of this table's, as JSON; None (and a log line) for anything else."""
        try:
            body = json.loads(payload)
        except (ValueError, RecursionError):
            why = "not JSON"
        else:
            if not isinstance(body, dict):
                why = "not a JSON object"
            elif body.get("table") != self.settings.table:
                why = f"not this table's (table {str(body.get('table'))[:64]!r})"
            else:
                return body
        out.log("warning", f"broker's retained {name} ignored", why=why)
        return None

    def _floor_seq(self, seen: object, digest_: str, now: float, out: Effects) -> None:
        """Move the chain past ``seen`` (a seq the broker holds), from its ``digest_``."""
        if self.signer is None or type(seen) is not int:
            return
        if not self.chain.seq <= seen <= LAST_CONTINUABLE:
            return
        self.chain = ChainState(seen + 1, digest_)
        out.chain_floor = (seen, digest_)
        self._raise(
            Alarm(
                now,
                "seq_behind_broker",
                {"severity": "critical", "broker_seq": seen, "next_seq": seen + 1},
            ),
            out,
        )

    def _floor_game_id(self, seen: object, now: float, out: Effects) -> Effects:
        """Move the next game id past ``seen`` (a game id the broker holds), saying so.

        A game in progress keeps its id; the next one takes the id after the broker's.
        """
        state = self.engine.state
        if type(seen) is not int or not 0 < seen <= LAST_CONTINUABLE:
            return out
        if seen < state.next_game_id:
            return out
        state.next_game_id = seen + 1
        self._raise(
            Alarm(
                now,
                "game_ids_behind_broker",
                {"severity": "critical", "broker_game_id": seen, "next_game_id": seen + 1},
            ),
            out,
        )
        out.state = replace(state)
        self._saved_state = out.state
        return out

    def alarm(self, now: float, code: str, **detail: Any) -> Effects:
        """An alarm the shell found (not the engine): journaled and published like the rest."""
        out = Effects()
        self._decide([Alarm(now, code, detail)], out)
        return out

    # -- the journal ------------------------------------------------------------

    def journal_write_failed(self, failed: Effects, error: str, now: float) -> Effects:
        """The journal could not keep ``failed``: stop deciding until it can again.

        Returns what to publish without the journal (an alarm and the status).
        The chain goes back to where it stood before ``failed``: its messages were
        never sent, so the next ones take their ``seq`` and no consumer sees a gap.
        """
        out = Effects()
        self.chain = self._chain_before(failed) or self.chain
        # Nothing is derived from what was not kept; alternation goes on from what was.
        self._undone = []
        self.engine.state.last_result_rotor = self._kept_rotor
        for game in failed.games:
            if game.game_id not in self.unrecorded:
                self.unrecorded.append(game.game_id)
        open_game = self.engine.game_in_progress
        if open_game is not None and open_game not in self.unrecorded:
            self.unrecorded.append(open_game)
        if not self.journal_failed:
            self.journal_failed = True
            self.faults[JOURNAL_FAULT] = now
            detail = {"state": "set", "since": iso_utc(now), "error": error}
            out.messages.append(self.alarm_message(Alarm(now, JOURNAL_FAULT, detail)))
            out.messages.append(self.status_message())
            out.log("error", "journal unwritable: no game is decided until it is", error=error)
        return out

    def journal_recovered(self, now: float) -> Effects:
        """Writing works again: void every game the journal could not keep, in order."""
        out = Effects()
        if not self.journal_failed:
            return out
        self.journal_failed = False
        voided: list[Decision] = []
        for game_id in self.unrecorded:
            voided += self.engine.void_unrecorded(game_id, now)
        self.unrecorded = []
        self._decide(voided, out)
        # The clear is journaled, and says when the fault began: the set could not be.
        self._fault(JOURNAL_FAULT, now, out, active=False)
        out.messages.append(self.status_message())
        out.log(
            "warning",
            "journal writable again",
            voided=[d.game_id for d in voided if isinstance(d, NoSpin)],
        )
        return out

    # -- operator commands ----------------------------------------------------------

    def on_command(self, command: OperatorCommand, now: float) -> tuple[dict[str, Any], Effects]:
        """Judge and carry out an operator command; every one is journaled with its sender."""
        out = Effects()
        text = command.payload[:MAX_JOURNALED_COMMAND].decode("utf-8", "replace")
        try:
            asked = parse(command)
            if isinstance(asked, DeclareNoSpin):
                reply = self._no_spin(asked, now, out)
            elif isinstance(asked, SetTable):
                reply = self._open_or_close(asked, now, out)
            elif isinstance(asked, Acknowledge):
                out.extend(self.acknowledge(asked.alert, asked.operator, now))
                reply = {"ok": True, "alert": asked.alert, "operator": asked.operator}
            else:  # reading the journal is the shell's: the daemon answers recall itself
                raise CommandError("recall is answered by the daemon, not the table")
        except CommandError as refusal:
            reason = str(refusal)
            # Refused, it is journaled with whom it names all the same.
            sender = named_operator(command)
            out.commands.append(CommandRecord(now, command.name, sender, text, False, reason))
            out.log("warning", "command refused", command=command.name, sender=sender, error=reason)
            return {"ok": False, "error": reason}, out
        who = asked.operator
        out.commands.append(CommandRecord(now, command.name, who, text, True, json.dumps(reply)))
        return reply, self._frame_writes(out, now)

    def _no_spin(self, asked: DeclareNoSpin, now: float, out: Effects) -> dict[str, Any]:
        if self.journal_failed:
            raise CommandError("the journal is unwritable: no game is being decided")
        open_game = self.engine.game_in_progress
        if open_game is None:
            raise CommandError("no game in progress")
        if asked.game_id is not None and asked.game_id != open_game:
            # A command queued while we were away must not void a later game.
            raise CommandError(f"game {asked.game_id} is not in progress (game {open_game} is)")
        out.log(
            "warning",
            "no spin declared",
            game_id=open_game,
            note=asked.note,
            operator=asked.operator,
        )
        decisions = self.engine.declare_no_spin(asked.note, now)
        self._decide(decisions, out)
        if self.session is not None:
            out.writes += self.session.after_decisions(decisions, now)
        return {"ok": True, "game_id": open_game}

    def _open_or_close(self, asked: SetTable, now: float, out: Effects) -> dict[str, Any]:
        self.table_state = "open" if asked.open else "closed"
        if not asked.open and not self.journal_failed:
            # A game still running when the table closes settles nothing either.
            decisions = self.engine.declare_no_spin(CLOSED_TABLE_NOTE, now)
            self._decide(decisions, out)
            if self.session is not None:
                out.writes += self.session.after_decisions(decisions, now)
        # "anunciar las tres (3) últimas lanzadas" on closing.
        announcement = {
            "state": self.table_state,
            "last_numbers": list(self.history)[:3],
            "table": self.settings.table,
            "ts": iso_utc(now),
            "schema_version": SCHEMA_VERSION,
        }
        out.messages.append(Outgoing(f"{self._base}/table", json.dumps(announcement), retain=True))
        out.log(
            "info",
            f"table {self.table_state}",
            last_numbers=announcement["last_numbers"],
            operator=asked.operator,
        )
        out.table_state = self.table_state
        return {"ok": True, **announcement}

    # -- messages -------------------------------------------------------------------

    def wheel_message(self, now: float) -> Outgoing:
        """The retained wheel state: link, identity, pockets and decoder counters."""
        state = {
            "link": "up" if self.link_up else "down",
            "driver": self.settings.driver,
            "port": self.settings.port,
            "model": self.wheel_info.get("model"),
            "firmware": self.wheel_info.get("firmware"),
            "serial": self.wheel_info.get("serial"),
            "pockets": self.engine.layout.pockets,
            **self.wheel_profile,
            "counters": self.decoder.counters.as_dict(),
            "refused_events": {
                f"{phase}/{name}": count for (phase, name), count in self.engine.refused.items()
            },
            "ts": iso_utc(now),
            "schema_version": SCHEMA_VERSION,
        }
        return Outgoing(f"{self._base}/wheel", json.dumps(state), retain=True)

    def status_message(self) -> Outgoing:
        """The retained status: online, or a fault that stops the table deciding."""
        if self.journal_failed:
            body: dict[str, Any] = {"state": "fault", "fault": "journal_unwritable"}
        else:
            body = {"state": "online"}
        body["schema_version"] = SCHEMA_VERSION
        return Outgoing(f"{self._base}/status", json.dumps(body), retain=True)

    def status_line(self) -> str:
        """One line for sd_notify STATUS."""
        link = "wheel up" if self.link_up else "wheel down"
        if self.journal_failed:
            return f"{link}; JOURNAL UNWRITABLE: deciding nothing"
        game = self.engine.game_in_progress
        table = "" if self.table_state == "open" else "; table closed"
        return (f"{link}; game {game} in progress" if game else f"{link}; idle") + table

    # -- decisions ------------------------------------------------------------------

    def _closed_table(self, decisions: list[Decision], now: float) -> list[Decision]:
        """While closed, a spin settles nothing: every launch is voided at once."""
        out: list[Decision] = []
        for decision in decisions:
            out.append(decision)
            if isinstance(decision, Spinning):
                out += self.engine.declare_no_spin(CLOSED_TABLE_NOTE, now)
        return out

    def _decide(self, decisions: list[Decision], out: Effects) -> None:
        """Turn decisions into journal records, messages and log lines."""
        table = self.settings.table
        layout = self.engine.layout
        for decision in decisions:
            if isinstance(decision, Alarm):
                if decision.code in ("cover_open", "cover_closed"):
                    # One fault with both ends rather than two unrelated alarms.
                    active = decision.code == "cover_open"
                    self._fault(COVER_FAULT, decision.at, out, active=active)
                    continue
                self._raise(decision, out)
                continue
            body = game_payload(decision, table, layout, self.settings.epoch).to_json()
            message: dict[str, Any] = json.loads(body)
            if self.signer is not None:
                message, self.chain = sign_into_chain(message, self.chain, self.signer)
                body = _compact(message)
            number = decision.number if isinstance(decision, Result) else None
            record = GameRecord(
                decision.game_id, _PUBLISHED_AS[type(decision)], body, number, message
            )
            out.games.append(record)
            # Intent first: the marker names the message before it goes out, so a
            # successor that finds it knows what may have reached a consumer.
            out.messages.append(self._sequence_message(decision, message))
            out.messages.append(Outgoing(f"{self._base}/game", body))
            self._last_game = decision.game_id
            self._log_decision(decision, out)
            if number is not None:
                out.messages.append(Outgoing(f"{self._base}/result", body, retain=True))
            self._undone.append((record, decision))
        if out.games or self.engine.state != self._saved_state:
            out.state = replace(self.engine.state)
            self._saved_state = out.state
        if not self.settings.after_commit:
            out.extend(self.committed())

    def committed(self) -> Effects:
        """What follows from decisions once the journal keeps them: the history, the
        statistics, the alerts (the shell says so after its commit; with
        ``TableSettings.after_commit`` off, ``_decide`` says so itself).

        A decision the journal could not keep is voided when it can again, and
        nothing was derived from it: not a number in the history, not a count.
        """
        out = Effects()
        outcome = False
        for record, decision in self._undone:
            if record.message is None:
                continue
            if record.number is not None:
                self.history.appendleft(record.number)
            if self.statistics is not None:
                # Launches and no-more-bets are timed (phases); outcomes refresh the figures.
                self.statistics.add(record.message)
            if isinstance(decision, Spinning):
                self._judge_direction(decision, out)
            if isinstance(decision, Result | NoSpin):
                outcome = True
                self._judge_alerts(decision, out)
        if any(record.number is not None for record, _ in self._undone):
            out.messages.append(self._history_message())
        if outcome and self.statistics is not None:
            figures = {**self.statistics.to_json(), "schema_version": SCHEMA_VERSION}
            out.messages.append(Outgoing(f"{self._base}/stats", json.dumps(figures), retain=True))
        self._undone = []
        self._kept_rotor = self.engine.state.last_result_rotor
        return out

    def _fault(self, code: str, now: float, out: Effects, *, active: bool, **detail: Any) -> None:
        """A fault that is set and later cleared: one alarm each way, the clear with both ends."""
        since = self.faults.get(code)
        if active and since is None:
            self.faults[code] = now
            self._fault_detail[code] = detail
            alarm = Alarm(now, code, {"state": "set", "since": iso_utc(now), **detail})
        elif not active and since is not None:
            del self.faults[code]
            self._fault_detail.pop(code, None)
            self.acknowledged.pop(code, None)
            alarm = Alarm(
                now,
                code,
                {
                    "state": "clear",
                    "since": iso_utc(since),
                    "until": iso_utc(now),
                    "duration_s": round(now - since, 3),
                    **detail,
                },
            )
        else:
            return
        self._raise(alarm, out)
        out.set_alerts = self.set_alerts()

    def _judge_alerts(self, outcome: Result | NoSpin, out: Effects) -> None:
        """Alerts the figures call for: set, cleared when they no longer hold, acknowledged."""
        settings = self.settings.alerts
        at = outcome.at
        if isinstance(outcome, Result) and outcome.rotor_direction is not None:
            self._direction_run = (outcome.rotor_direction, 0)
        if isinstance(outcome, NoSpin):
            same = self._no_spin_run[0] == outcome.reason
            self._no_spin_run = (outcome.reason, self._no_spin_run[1] + 1 if same else 1)
        else:
            self._no_spin_run = (None, 0)
        reason, run = self._no_spin_run
        if run >= settings.repeated_no_spins:
            self._fault(REPEATED_NO_SPIN_ALERT, at, out, active=True, reason=reason, count=run)
        elif run in {0, 1}:
            self._fault(REPEATED_NO_SPIN_ALERT, at, out, active=False)
        if self.statistics is not None and isinstance(outcome, Result):
            test = self.statistics.chi_squared
            if test.p_value is not None:
                deviating = test.p_value < settings.deviation_p_value
                detail = {"p_value": test.p_value, "games": test.games} if deviating else {}
                self._fault(DEVIATION_ALERT, at, out, active=deviating, **detail)
        self._judge_rotor_speed(outcome, out)
        if self.statistics is not None:
            self._judge_rate(at, out)
        if self.statistics is not None and isinstance(outcome, Result):
            self._judge_concentration(at, out)

    def _judge_rate(self, at: float, out: Effects) -> None:
        """The recent rate of play against ``games_per_hour_min``/``max``."""
        low, high = self.settings.alerts.games_per_hour_min, self.settings.alerts.games_per_hour_max
        assert self.statistics is not None
        rate = self.statistics.recent_rate()["rate"]
        if (low is None and high is None) or rate is None:
            return
        outside = (low is not None and rate < low) or (high is not None and rate > high)
        detail = {"rate": rate, "min": low, "max": high} if outside else {}
        self._fault(GAMES_PER_HOUR_ALERT, at, out, active=outside, **detail)

    def _judge_rotor_speed(self, outcome: Result | NoSpin, out: Effects) -> None:
        """The rotor's speed at launch, where the wheel reports it (``rotor_rpm``),
        against ``rotor_rpm_min``/``max``."""
        low, high = self.settings.alerts.rotor_rpm_min, self.settings.alerts.rotor_rpm_max
        reported = outcome.extra.get("rotor_rpm")
        if (low is None and high is None) or not isinstance(reported, int | float):
            return
        if isinstance(reported, bool) or not math.isfinite(reported):
            return  # a stray true or a NaN is no speed
        rpm = float(reported)
        outside = (low is not None and rpm < low) or (high is not None and rpm > high)
        detail = {"rpm": rpm, "min": low, "max": high, "game_id": outcome.game_id}
        self._fault(
            ROTOR_SPEED_ALERT, outcome.at, out, active=outside, **(detail if outside else {})
        )

    def _judge_concentration(self, at: float, out: Effects) -> None:
        """The most-hit arc of k pockets against ``sector_p_value`` (docs/statistics.md)."""
        threshold = self.settings.alerts.sector_p_value
        assert self.statistics is not None
        if threshold is None:
            return
        found = self.statistics.sector_concentration(self.settings.alerts.sector_min_games)
        if found is None:
            return
        concentrated = found.p_value < threshold
        detail: dict[str, Any] = {}
        if concentrated:
            detail = {
                "pockets": list(found.pockets),
                "rotor_direction": found.family,
                "count": found.count,
                "games": found.results,
                "p_value": found.p_value,
            }
        self._fault(SECTOR_ALERT, at, out, active=concentrated, **detail)

    def _judge_direction(self, launch: Spinning, out: Effects) -> None:
        """Launches in a row with the rotor turning as at the last result."""
        threshold = self.settings.alerts.direction_unchanged
        if threshold is None or launch.rotor_direction is None:
            return
        last, run = self._direction_run
        if last is None:
            return  # no result yet to alternate from
        run = run + 1 if launch.rotor_direction == last else 0
        self._direction_run = (last, run)
        if run >= threshold:
            detail = {"rotor_direction": last, "count": run}
            self._fault(DIRECTION_ALERT, launch.at, out, active=True, **detail)
        elif run == 0:
            self._fault(DIRECTION_ALERT, launch.at, out, active=False)

    def acknowledge(self, code: str, operator: str, now: float) -> Effects:
        """An operator acknowledges an alert that is set; raises CommandError otherwise."""
        out = Effects()
        if code not in self.faults:
            known = ", ".join(sorted(self.faults)) or "none"
            raise CommandError(f"no alert {code!r} is set (set: {known})")
        if code in self.acknowledged:
            by, at = self.acknowledged[code]
            raise CommandError(f"{code} already acknowledged by {by} at {iso_utc(at)}")
        self.acknowledged[code] = (operator, now)
        since = iso_utc(self.faults[code])
        detail = {"state": "acknowledged", "since": since, "operator": operator}
        self._raise(Alarm(now, code, detail), out)
        out.set_alerts = self.set_alerts()
        return out

    def _raise(self, alarm: Alarm, out: Effects) -> None:
        """Journal (durably) and publish an alarm, and log it.

        A one-off alarm (no ``state``) past its code's rate is counted instead;
        the next one said carries the count (``repeated``).
        """
        state = alarm.detail.get("state")
        if state is None:
            said, held = self._alarm_rate.allow(alarm.code, alarm.at)
            if not said:
                return
            if held:
                alarm = Alarm(alarm.at, alarm.code, {**alarm.detail, "repeated": held})
        message = self.alarm_message(alarm)
        kind = state if isinstance(state, str) else "raised"
        out.alarms.append(AlarmRecord(alarm.at, alarm.code, kind, message.payload))
        out.messages.append(message)
        out.alarmed = True
        out.log("warning", "alarm", alarm=alarm.code, **alarm.detail)

    def unjournaled_alarm(self, at: float, code: str, detail: dict[str, Any]) -> Outgoing:
        """An alarm the shell raises about its own delivery (``broker_refused``): not
        journaled (it must not become an outbox entry that can be refused in turn),
        but built, and signed, as every other alarm."""
        return self.alarm_message(Alarm(at, code, detail))

    def alarm_message(self, alarm: Alarm) -> Outgoing:
        """``<base>/alarm`` for ``alarm``: the contract's payload, signed when the table signs.

        The one builder of alarms: the publisher's own (``broker_refused``) comes
        here too, so every alarm carries ``schema_version`` and a signature.
        """
        payload = {
            "alarm": alarm.code,
            "table": self.settings.table,
            "ts": iso_utc(alarm.at),
            **alarm.detail,
            "schema_version": SCHEMA_VERSION,
        }
        if self.signer is not None:
            # Signed, not chained: alarms are not decisions and may bypass the journal.
            return Outgoing(f"{self._base}/alarm", _compact(self.signer.sign(payload)))
        return Outgoing(f"{self._base}/alarm", json.dumps(payload))

    def _chain_before(self, effects: Effects) -> ChainState | None:
        """Where the chain stood before ``effects``: its first game message's link."""
        for message in effects.messages:
            if message.topic == f"{self._base}/game":
                payload = json.loads(message.payload)
                if "seq" in payload:
                    return ChainState(payload["seq"], payload["prev"])
        return None

    def _frame_writes(self, out: Effects, now: float) -> Effects:
        """Every line written to the wheel goes to the journal too, with its game."""
        game = self.engine.game_in_progress
        for data in out.writes:
            for line in data.rstrip(b"\r\n").split(b"\n"):
                out.frames.append(FrameRecord(now, ">", line.removesuffix(b"\r"), game))
        return out

    def _history_message(self) -> Outgoing:
        body = json.dumps({"numbers": list(self.history), "schema_version": SCHEMA_VERSION})
        return Outgoing(f"{self._base}/history", body, retain=True)

    def _session_alarms(self, now: float, out: Effects) -> None:
        session = self.session
        assert session is not None
        while session.unanswered:
            silent = session.unanswered.pop(0)
            self._decide([Alarm(now, "wheel_not_answering", {"command": silent})], out)
        # A session may raise alarms of its own (the Cammegh SS2's wheel clock).
        raised: list[tuple[str, dict[str, Any]]] = getattr(session, "alarms", [])
        while raised:
            code, detail = raised.pop(0)
            self._decide([Alarm(now, code, detail)], out)

    @staticmethod
    def _log_decision(decision: GameEvent, out: Effects) -> None:
        if isinstance(decision, Result):
            out.log(
                "info",
                "result",
                game_id=decision.game_id,
                number=decision.number,
                revolutions=decision.revolutions,
            )
        elif isinstance(decision, NoSpin):
            out.log(
                "warning",
                "no spin",
                game_id=decision.game_id,
                reason=decision.reason,
                reasons=list(decision.reasons),
            )
        else:
            out.log("info", _EVENT_NAMES[type(decision)], game_id=decision.game_id)
