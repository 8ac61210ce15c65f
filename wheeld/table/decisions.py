"""Decisions into effects: journal records and messages, and what follows once kept.

A game decision becomes its journal record and its messages (built by
``announcements``, chained into the table's signed series); an alarm is
journaled and published, a one-off past its rate counted instead. Once the
journal keeps a batch (``committed``), what follows from it is derived: the
history, the statistics, the alerts. A batch the journal could not keep is
forgotten (``not_kept``): nothing derived from it, the chain back where it stood.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from wheeld.core.engine import GameEngine
from wheeld.core.game import Alarm, Decision, GameEvent, NoSpin, Result, Spinning
from wheeld.core.messages import event_name, iso_utc
from wheeld.core.ratelimit import AlarmRate
from wheeld.core.signing import ChainState
from wheeld.core.stats import Statistics
from wheeld.table.alerts import Alerts
from wheeld.table.announcements import Announcer
from wheeld.table.book import Book
from wheeld.table.effects import AlarmRecord, Effects, Outgoing
from wheeld.table.faults import COVER_OPEN, JOURNAL_UNWRITABLE


class Recorder:
    """A table's decisions on their way to the journal and the broker."""

    def __init__(
        self,
        engine: GameEngine,
        announce: Announcer,
        chain: ChainState,
        *,
        faults: Book,
        alerts: Alerts,
        history: deque[str],
        statistics: Statistics | None,
        after_commit: bool,
    ) -> None:
        self.engine = engine
        self.announce = announce
        #: Where the chain of <base>/game messages stands: what the next one carries.
        self.chain = chain
        self.faults = faults
        self.alerts = alerts
        self.history = history
        self.statistics = statistics
        self.after_commit = after_commit
        #: The game the last decision was about.
        self.last_game: int | None = None
        self._alarm_rate = AlarmRate()
        self._saved_state = replace(engine.state)
        #: Decisions made, not yet known kept: what ``committed`` derives from.
        self._undone: list[tuple[GameEvent, dict[str, Any]]] = []
        #: The last result's rotor as the journal keeps it (alternation is judged by it).
        self._kept_rotor = engine.state.last_result_rotor
        #: The journal cannot write: nothing new is decided until it can.
        self.journal_failed = False
        #: Game ids whose decisions the journal could not keep, in order.
        self.unrecorded: list[int] = []
        #: The wheel's own statistics (``WheelRecords.figures``), beside wheeld's on <base>/stats.
        self.wheel_figures: dict[str, Any] = {}

    def decide(self, decisions: list[Decision], out: Effects) -> None:
        """Turn decisions into journal records, messages and log lines."""
        for decision in decisions:
            if isinstance(decision, Alarm):
                if decision.code in ("cover_open", "cover_closed"):
                    # One fault with both ends rather than two unrelated alarms.
                    if decision.code == "cover_open":
                        self.said(self.faults.set(COVER_OPEN, decision.at), out)
                    else:
                        self.said(self.faults.clear(COVER_OPEN, decision.at), out)
                    continue
                self.raise_alarm(decision, out)
                continue
            record, messages, self.chain = self.announce.game(
                decision, self.engine.layout, self.chain
            )
            out.games.append(record)
            out.messages += messages
            self.last_game = decision.game_id
            _log_decision(decision, out)
            assert record.message is not None
            self._undone.append((decision, record.message))
        self.state_changed(out, force=bool(out.games))
        if not self.after_commit:
            out.extend(self.committed())

    def state_changed(self, out: Effects, *, force: bool = False) -> None:
        """The engine state goes into ``out`` when it changed since it was last stored."""
        if self.engine.state != self._saved_state:
            out.state = replace(self.engine.state)
            self._saved_state = out.state
        elif force and out.state is None:
            # Unchanged: the copy already made serves (it is never changed).
            out.state = self._saved_state

    def committed(self) -> Effects:
        """What follows from decisions once the journal keeps them: the history, the
        statistics, the alerts (the shell says so after its commit; with
        ``TableSettings.after_commit`` off, ``decide`` says so itself).

        A decision the journal could not keep is voided when it can again, and
        nothing was derived from it: not a number in the history, not a count.
        """
        out = Effects()
        outcome = numbered = False
        for decision, message in self._undone:
            if isinstance(decision, Result):
                self.history.appendleft(decision.number)
                numbered = True
            if self.statistics is not None:
                # Launches and no-more-bets are timed (phases); outcomes refresh the figures.
                self.statistics.add(message)
            if isinstance(decision, Spinning):
                self._said_all(self.alerts.on_launch(decision), out)
            if isinstance(decision, Result | NoSpin):
                outcome = True
                self._said_all(self.alerts.on_outcome(decision), out)
        if numbered:
            out.messages.append(self.announce.history(self.history))
        if outcome and self.statistics is not None:
            out.messages.append(self.announce.stats(self.statistics, self.wheel_figures))
        self._undone = []
        self._kept_rotor = self.engine.state.last_result_rotor
        return out

    def wheel_figures_read(self, figures: Mapping[str, Any], now: float) -> list[Outgoing]:
        """The wheel's own statistics read from its log: kept, and said with wheeld's."""
        self.wheel_figures.update(figures, read_at=iso_utc(now))
        if self.statistics is None:
            return []
        return [self.announce.stats(self.statistics, self.wheel_figures)]

    def write_failed(self, failed: Effects, error: str, now: float) -> Effects:
        """The journal could not keep ``failed``: stop deciding until it can again.

        Returns what to publish without the journal (an alarm and the status).
        The chain goes back to where it stood before ``failed``: its messages were
        never sent, so the next ones take their ``seq`` and no consumer sees a gap.
        Nothing is derived from what was not kept; alternation goes on from what was.
        """
        out = Effects()
        for game in failed.games:
            if game.message is not None and "seq" in game.message:
                self.chain = ChainState(game.message["seq"], game.message["prev"])
                break
        self._undone = []
        self.engine.state.last_result_rotor = self._kept_rotor
        for game_id in [game.game_id for game in failed.games] + [self.engine.game_in_progress]:
            if game_id is not None and game_id not in self.unrecorded:
                self.unrecorded.append(game_id)
        if not self.journal_failed:
            self.journal_failed = True
            alarm = self.faults.set(JOURNAL_UNWRITABLE, now)
            assert alarm is not None
            detail = {**alarm.detail, "error": error}
            out.messages.append(self.announce.alarm(Alarm(now, alarm.code, detail)))
            out.messages.append(self.announce.status(journal_failed=True))
            out.log("error", "journal unwritable: no game is decided until it is", error=error)
        return out

    def recovered(self, now: float) -> Effects:
        """Writing works again: void every game the journal could not keep, in order."""
        out = Effects()
        if not self.journal_failed:
            return out
        self.journal_failed = False
        voided: list[Decision] = []
        for game_id in self.unrecorded:
            voided += self.engine.void_unrecorded(game_id, now)
        self.unrecorded = []
        self.decide(voided, out)
        # The clear is journaled, and says when the fault began: the set could not be.
        self.said(self.faults.clear(JOURNAL_UNWRITABLE, now), out)
        out.messages.append(self.announce.status(journal_failed=False))
        out.log(
            "warning",
            "journal writable again",
            voided=[d.game_id for d in voided if isinstance(d, NoSpin)],
        )
        return out

    def clear_gone(self, now: float, out: Effects) -> None:
        """At start: what the last run left set whose condition is gone now, each cleared
        once, in the order of their codes."""
        gone = [(code, self.alerts.book) for code in self.alerts.gone()]
        if JOURNAL_UNWRITABLE in self.faults:  # the journal opened: it is writable
            gone.append((JOURNAL_UNWRITABLE, self.faults))
        for code, book in sorted(gone, key=lambda pair: pair[0]):
            self.said(book.clear(code, now), out)

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        """The faults and alerts now set, as the journal keeps them for a restart."""
        return dict(sorted({**self.faults.kept(), **self.alerts.book.kept()}.items()))

    def said(self, alarm: Alarm | None, out: Effects) -> None:
        """A fault or alert set, cleared or acknowledged (None: nothing changed): its alarm
        raised, and what is set kept."""
        if alarm is not None:
            self.raise_alarm(alarm, out)
            out.set_alerts = self.set_alerts()

    def _said_all(self, alarms: list[Alarm], out: Effects) -> None:
        for alarm in alarms:
            self.said(alarm, out)

    def raise_alarm(self, alarm: Alarm, out: Effects) -> None:
        """Journal (durably) and publish an alarm, and log it.

        A one-off alarm (no ``state``) past its code's rate is counted instead;
        the next one said carries the count (``repeated``).
        """
        state = alarm.detail.get("state")
        if state is None:
            said, repeated = self._alarm_rate.allow(alarm.code, alarm.at)
            if not said:
                return
            if repeated:
                alarm = Alarm(alarm.at, alarm.code, {**alarm.detail, "repeated": repeated})
        message = self.announce.alarm(alarm)
        kind = state if isinstance(state, str) else "raised"
        out.alarms.append(AlarmRecord(alarm.at, alarm.code, kind, message.payload))
        out.messages.append(message)
        out.alarmed = True
        out.log("warning", "alarm", alarm=alarm.code, **alarm.detail)


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
        out.log("info", event_name(decision), game_id=decision.game_id)
