"""The pipeline's effects carried out, in order: journal first, then the world.

``EffectsApplier.apply`` writes an ``Effects`` value's records to the journal
(the decisions and their outbox entries in one commit, durable before the
publisher may send them), then the bytes to the wheel, the log lines, the
jobs' hooks, a wake-up for the publisher when the outbox has new entries, and
the pipeline's next deadline on the scheduler. A write the journal refuses goes to ``JournalFault``.

What follows from kept games (the history, the statistics, the alerts:
``TablePipeline.committed``) is derived after the decision's messages have had
the publisher's turn: on the loop's next turn, or by ``settle`` before
anything else reaches the pipeline, whichever is first. Every input thus sees
the pipeline as if it had been derived at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wheeld.shell.journal import JournalWriteError
from wheeld.shell.journal.durability import fsync_due
from wheeld.shell.write_batches import FRAME_BATCH, WriteBatches
from wheeld.table.effects import Effects, Outgoing

if TYPE_CHECKING:
    from wheeld.shell.jobs import Jobs
    from wheeld.shell.journal import Journal
    from wheeld.shell.link import WheelLink
    from wheeld.shell.metrics import TableMetrics
    from wheeld.shell.publisher import Publisher
    from wheeld.shell.scheduler import Scheduler, Timer
    from wheeld.table.pipeline import TablePipeline

#: What a journal another went on past lets go of (``Effects.superseded``).
SUPERSEDED_TOPICS = ("sequence", "game", "result", "history", "stats")


class EffectsApplier:
    """Journal, then write to the wheel, log, wake the publisher and re-arm the deadline."""

    def __init__(
        self,
        *,
        base_topic: str,
        log: Any,
        scheduler: Scheduler,
        journal: Journal,
        pipeline: TablePipeline,
        link: WheelLink,
        publisher: Publisher,
        metrics: TableMetrics | None,
        on_journal_failed: Callable[[Effects, str], None],
    ) -> None:
        self._base = base_topic
        self._log = log
        self._scheduler = scheduler
        self._journal = journal
        self._pipeline = pipeline
        self._link = link
        self._publisher = publisher
        self._metrics = metrics
        self._journal_failed = on_journal_failed
        self.batches = WriteBatches(
            journal, scheduler, lambda error: on_journal_failed(Effects(), error)
        )
        #: The periodic jobs, told of decisions and of effects applied (set once built).
        self.jobs: Jobs | None = None
        #: Runs the pipeline's work a timer starts as an input is run
        #: (``TableInputs.guarded_call``, set once built): a raise stops the daemon.
        self.guard: Callable[[Callable[[], None]], None] = lambda action: action()
        self._deadline: Timer | None = None
        #: The pipeline's deadline (host time) ``_deadline`` was set for.
        self._deadline_for = 0.0
        #: Games kept whose history, statistics and alerts are still to be derived.
        self._derived: Timer | None = None

    def apply(self, effects: Effects) -> None:
        """Journal, then write to the wheel, log, wake the publisher and re-arm the timer."""
        journal = self._journal
        batches = self.batches
        try:
            # Decisions last: when a write fails, exactly the games whose records
            # did not reach the journal are the ones the pipeline will void.
            batches.frames += effects.frames
            # With a commit that is fsync'd (``fsync_due``: a game's end, an alarm) or a
            # command: the lines that led to it become durable with it, in the
            # decision's own commit when there is one (a game's end: one commit, not
            # two), else in one of their own before it. A game's start is not fsync'd,
            # and its lines wait for the beat: they are not on the launch's path.
            fsynced = fsync_due(effects)
            folded = fsynced and effects.decided and bool(batches.frames)
            if batches.frames and not folded:
                if fsynced or effects.commands or len(batches.frames) >= FRAME_BATCH:
                    batches.flush_frames()
                else:
                    batches.flush_frames_later()
            if effects.commands:
                # Commands are group-committed: those of one turn of the loop in one
                # commit, without an fsync; with what an accepted one did, at once.
                batches.commands += effects.commands
                if fsynced:
                    batches.flush_commands()
                else:
                    batches.flush_commands_soon()
            if effects.table_state is not None:
                journal.save_table_state(effects.table_state)
            if effects.superseded:
                topics = [f"{self._base}/{name}" for name in SUPERSEDED_TOPICS]
                dropped = journal.supersede(topics)
                if dropped:
                    self._log.warning(
                        "game messages never published dropped: another wheeld went on past them",
                        dropped=dropped,
                    )
            if effects.chain_floor is not None:
                journal.record_floor(*effects.chain_floor)
            if effects.taken_from is not None:
                journal.record_takeover(effects.taken_from, effects.taken_history)
            if effects.alarms or effects.set_alerts is not None:
                # Before the decisions: their durable commit makes these durable too.
                journal.record_alarms(effects.alarms, effects.set_alerts)
            if effects.decided:
                view = self._pipeline.view
                state = effects.state or view.engine_state
                # The chain as it stands after this batch, kept in the same commit.
                chain = view.signed_chain
                ids = journal.record(
                    effects.games,
                    effects.messages,
                    state,
                    chain=chain,
                    alarm=effects.alarmed,
                    frames=batches.frames if folded else (),
                )
                if folded:
                    batches.recorded_frames()
                if self._metrics is not None:
                    self._metrics.decided(effects.games, effects.messages, ids)
                if effects.games:
                    # Kept: the history, the statistics and the alerts follow from them,
                    # once the publisher has had its turn (``settle``); the jobs are told
                    # then, their statistics counting the games with the journal.
                    if self._derived is None:
                        self._derived = self._scheduler.soon(self._derive_due, "derive")
                elif self.jobs is not None:
                    self.jobs.decided()
            else:
                if effects.state is not None:
                    journal.save_state(effects.state)
                if effects.messages:
                    journal.enqueue(effects.messages)
        except JournalWriteError as exc:
            self._journal_failed(effects, str(exc))
        for data in effects.writes:
            self._link.write(data)
        for record in effects.logs:
            getattr(self._log, record.level)(record.event, **record.fields)
        if effects.messages:
            # What the jobs watch (the wheel's identity, for <base>/info) changes only
            # with a message of the pipeline's (its <base>/wheel): a heartbeat, most
            # lines, asks them nothing.
            if self.jobs is not None:
                self.jobs.applied()
            # Only then: a wake-up reads the outbox, a query per line from the wheel else.
            self._publisher.wake()
        self._rearm()

    def settle(self) -> None:
        """What kept games lead to, derived now if it waits: called before any
        input reaches the pipeline, so none sees it underived. Guarded, whoever
        calls it (a job, the stop): nothing once the table broke."""
        if self._derived is not None:
            self.guard(self._settle_now)

    def _settle_now(self) -> None:
        if self._derived is None:
            return
        self._derived.cancel()
        self._derived = None
        self.apply(self._pipeline.committed())
        if self.jobs is not None:
            try:
                self.jobs.decided()
            except JournalWriteError as exc:
                # The games are kept already: only a checkpoint failed, nothing to void.
                self._journal_failed(Effects(), str(exc))

    def _derive_due(self, now: float) -> None:
        self.settle()

    def apply_start(self, started: Effects) -> None:
        """The start's effects (the broker's memory acted on, a game left open voided),
        after what the last run may have left underived (``rederive``): a takeover among
        them lets that go again."""
        self.rederive()
        self.apply(started)

    def rederive(self) -> None:
        """At start, before the broker's memory is acted on: the history and the statistics
        the journal's games make, said again where the journal holds other ones.

        They are derived a turn of the loop after a result's commit (``settle``): a
        daemon killed in between left them without it, and nothing said them until
        the next outcome. A journal another went on past lets them go again
        (``superseded``), as it does what else it held of games.
        """
        wanted = self._pipeline.view.derived_messages()
        held = last_said(self._journal, {message.topic for message in wanted})
        # None held: never said (the first outcome's, killed), or let go when another
        # controller went on past this journal: the broker's are that one's then.
        unsaid = self._journal.taken_from() is None
        stale = [m for m in wanted if _behind(held.get(m.topic), m.payload, unsaid=unsaid)]
        if stale:
            self._log.warning(
                "said again at start: the last run stopped before it derived them",
                topics=[message.topic for message in stale],
            )
            self.apply(Effects(messages=stale))

    def enqueue_best_effort(self, message: Outgoing) -> None:
        """Into the outbox; said outside it when the journal cannot write."""
        try:
            self._journal.enqueue([message])
        except JournalWriteError:
            self._publisher.publish_unjournaled(message)
            return
        self._publisher.wake()

    def _rearm(self) -> None:
        deadline = self._pipeline.next_deadline()
        if deadline is None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            return
        if self._deadline is not None:
            if self._deadline_for <= deadline:
                # Every line from the wheel moves the link's deadline on: the timer set
                # stays, and re-arms for the later one when it fires (``_deadline_due``),
                # rather than being replaced after each line.
                return
            self._deadline.cancel()
        self._arm_deadline(deadline)

    def _arm_deadline(self, deadline: float) -> None:
        self._deadline = self._scheduler.at(deadline, self._deadline_due, "deadline")
        self._deadline_for = deadline

    def _deadline_due(self, now: float) -> None:
        self._deadline = None
        self.guard(lambda: self._deadline_reached(now))

    def _deadline_reached(self, now: float) -> None:
        armed_for = self._deadline_for
        self.settle()  # may apply, and so set a timer for the deadline as it is now
        deadline = self._pipeline.next_deadline()
        if deadline is not None and deadline > armed_for:
            # It moved on since the timer was set: not due yet.
            if self._deadline is None:
                self._arm_deadline(deadline)
            return
        self.apply(self._pipeline.on_timer(now))


def last_said(journal: Journal, topics: set[str]) -> dict[str, str]:
    """The newest payload the journal holds for each of ``topics``: waiting in the
    outbox, else the last the broker acknowledged."""
    said = {m.topic: m.payload for m in journal.retained() if m.topic in topics}
    after = 0
    while entries := journal.pending(after, 500):
        for entry in entries:
            if entry.message.topic in topics:
                said[entry.message.topic] = entry.message.payload
        after = entries[-1].id
    return said


def _behind(held: str | bytes | None, derived: str, *, unsaid: bool) -> bool:
    """Whether ``held`` (a history or statistics payload the journal holds, None: none) is
    not what the games make, ``derived``: another history, or statistics of another
    number of games (the wheel's own figures beside them are not the games' to judge).
    None held is behind only when ``unsaid`` (never said, rather than let go)."""
    new: dict[str, Any] = json.loads(derived)
    key = "numbers" if "numbers" in new else "games"
    if held is None:
        return unsaid and bool(new.get(key))  # no game yet: nothing to say
    try:
        old = json.loads(held)
    except (ValueError, RecursionError):
        return True
    return not isinstance(old, dict) or old.get(key) != new.get(key)
