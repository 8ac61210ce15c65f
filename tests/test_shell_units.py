"""The daemon's units, each alone: the inputs held until the broker's memory is read,
effects applied (lines and commands batched, the deadline on the scheduler), the
command rate, and the unwritable journal's fault and retry."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from tests.shell_fakes import LoopClock, RecordingLog, hand_scheduler
from wheeld.core.commands import OperatorCommand
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.shell.applier import EffectsApplier
from wheeld.shell.command_desk import CommandDesk
from wheeld.shell.command_rate import RATE_SUMMARY_S, CommandGate
from wheeld.shell.inputs import TableInputs
from wheeld.shell.journal import JournalWriteError
from wheeld.shell.journal.state import PROBE_BYTES
from wheeld.shell.journal_fault import (
    JOURNAL_FLAP_WINDOW_S,
    JOURNAL_HOLD_MAX_S,
    JOURNAL_PROBE_MAX_BYTES,
    JOURNAL_RETRY_MAX_S,
    JOURNAL_RETRY_S,
    JournalFault,
)
from wheeld.shell.write_batches import FRAME_BATCH, FRAME_FLUSH_S
from wheeld.table.effects import (
    CommandRecord,
    Effects,
    FrameRecord,
    GameRecord,
    LogRecord,
    Outgoing,
)


def _state(message: Outgoing) -> str:
    return str(json.loads(message.payload)["state"])


class _Pipeline:
    """Says what it was told, and hands back what the test set."""

    def __init__(self) -> None:
        self.told: list[tuple[Any, ...]] = []
        self.deadline: float | None = None
        self.journal_failed = False
        self.view = SimpleNamespace(engine_state=None, signed_chain=None)

    def _said(self, *what: Any) -> Effects:
        self.told.append(what)
        return Effects()

    def on_bytes(self, data: bytes, now: float) -> Effects:
        return self._said("bytes", data, now)

    def on_link_up(self, now: float) -> Effects:
        return self._said("up", now)

    def on_link_down(self, why: str, now: float) -> Effects:
        return self._said("down", why, now)

    def on_clock_step(self, step: float, wall: float) -> Effects:
        return self._said("step", step, wall)

    def on_broker_sequence(
        self, payload: bytes, now: float, history: bytes | None = None
    ) -> Effects:
        return self._said("sequence", payload, history)

    def on_broker_result(self, payload: bytes, now: float) -> Effects:
        return self._said("result", payload)

    def on_timer(self, now: float) -> Effects:
        self.deadline = None  # passed
        return self._said("timer", now)

    def committed(self) -> Effects:
        self.told.append(("derived",))
        return Effects(messages=[Outgoing("wheeld/T1/stats", "{}")])

    def next_deadline(self) -> float | None:
        return self.deadline

    def status_line(self) -> str:
        return "fault: journal_unwritable" if self.journal_failed else "idle"

    def journal_write_failed(self, failed: Effects, error: str, now: float) -> Effects:
        self.journal_failed = True
        status = Outgoing("wheeld/T1/status", '{"state": "fault"}', retain=True)
        return Effects(messages=[status], logs=[LogRecord("error", "journal unwritable", {})])

    def journal_recovered(self, now: float) -> Effects:
        self.journal_failed = False
        return self._said("recovered", now)

    def status_message(self) -> Outgoing:
        return Outgoing("wheeld/T1/status", '{"state": "online"}', retain=True)


def _inputs(
    stops: list[int] | None = None, log: RecordingLog | None = None
) -> tuple[TableInputs, _Pipeline, list[Effects], list[float]]:
    _, _, clock = hand_scheduler()
    pipeline = _Pipeline()
    applied: list[Effects] = []
    steps: list[float] = []
    stopped = stops if stops is not None else []
    inputs = TableInputs(
        clock=clock,
        pipeline=cast(Any, pipeline),
        condition=cast(Any, SimpleNamespace(heard=lambda: None, status_line=lambda: "idle")),
        notifier=cast(Any, SimpleNamespace(status=lambda line: None)),
        capture=cast(Any, SimpleNamespace(clock_step=steps.append)),
        apply=applied.append,
        settle=lambda: None,
        stop=lambda: stopped.append(1),
        log=log or RecordingLog(),
    )
    return inputs, pipeline, applied, steps


def test_an_input_the_pipeline_raises_on_stops_the_daemon_once_and_says_why() -> None:
    """Not a warning and the rest of the input dropped while the table goes on deciding:
    the engine may have moved with its decisions unkept, so the daemon stops (status 1,
    the unit starts it again and the start voids the game under way)."""
    stops: list[int] = []
    log = RecordingLog()
    inputs, pipeline, applied, _ = _inputs(stops, log)
    inputs.release()

    def broken(data: bytes, now: float) -> Effects:
        raise OverflowError("int too large to convert")

    pipeline.on_bytes = broken  # type: ignore[method-assign]
    inputs.on_data(b"$WRHEL,1,99999999999999999999*00\r\n", 1001.0)
    assert stops == [1] and applied == []
    assert isinstance(inputs.broken_by, OverflowError)
    (line,) = [fields for level, event, fields in log.lines if level == "error"]
    assert line["error"] == "OverflowError: int too large to convert"
    inputs.on_data(b"again\r\n", 1002.0)  # until the loop stops: said once, stopped once
    assert stops == [1] and len([1 for level, _, _ in log.lines if level == "error"]) == 1


def test_a_waiting_line_the_pipeline_raises_on_stops_the_daemon_and_the_rest_wait_no_more() -> None:
    """Lines heard before the broker's memory was read are inputs too: the first the
    pipeline raises on at their release stops the daemon, once, and the rest wait no more."""
    stops: list[int] = []
    log = RecordingLog()
    inputs, pipeline, _, _ = _inputs(stops, log)
    decided: list[bytes] = []

    def breaks_on_b(data: bytes, now: float) -> Effects:
        if data == b"B\r\n":
            raise OverflowError("int too large to convert")
        decided.append(data)
        return Effects()

    pipeline.on_bytes = breaks_on_b  # type: ignore[method-assign]
    for heard in (b"A\r\n", b"B\r\n", b"C\r\n"):
        inputs.on_data(heard, 1001.0)
    inputs.release()
    assert decided == [b"A\r\n"] and stops == [1]
    assert isinstance(inputs.broken_by, OverflowError)
    (line,) = [fields for level, event, fields in log.lines if level == "error"]
    assert line["error"] == "OverflowError: int too large to convert"


def test_what_the_wheel_says_before_the_brokers_memory_is_decided_after_it_in_order() -> None:
    inputs, pipeline, applied, _ = _inputs()
    inputs.on_link_up()
    inputs.on_data(b"A\r\n", 1001.0)
    inputs.clock_stepped(30.0, 1032.0)  # an NTP step at boot: between the lines, not before
    inputs.on_data(b"B\r\n", 1033.0)
    assert pipeline.told == [] and applied == []
    inputs.release()
    assert pipeline.told == [
        ("up", 1100.0),
        ("bytes", b"A\r\n", 1001.0),
        ("step", 30.0, 1032.0),
        ("bytes", b"B\r\n", 1033.0),
    ]
    inputs.on_link_down("gone")
    assert pipeline.told[-1] == ("down", "gone", 1100.0), "after the answer: at once"
    assert len(applied) == 5


def test_a_stepped_clock_is_told_to_the_capture_and_the_pipeline() -> None:
    inputs, pipeline, applied, steps = _inputs()
    inputs.release()
    inputs.clock_stepped(-30.0, 970.0)
    assert steps == [-30.0]
    assert pipeline.told == [("step", -30.0, 970.0)] and len(applied) == 1


def test_the_brokers_retained_result_and_sequence_go_to_the_pipeline() -> None:
    inputs, pipeline, _, _ = _inputs()
    inputs.on_retained_result("history", b'{"numbers": []}')
    inputs.on_retained_result("sequence", b"{}")
    inputs.on_retained_result("result", b"[]")
    inputs.on_retained_result("sequence", b"{}")  # the history went with the first only
    assert pipeline.told == [
        ("sequence", b"{}", b'{"numbers": []}'),
        ("result", b"[]"),
        ("sequence", b"{}", None),
    ]


def test_the_history_a_takeover_adopted_is_kept_with_it() -> None:
    applier, journal, _, _, _ = _applier()
    applier.apply(Effects(taken_from=("journal-aaaa", 7, "result"), taken_history=["17", "3"]))
    assert journal.takeovers == [(("journal-aaaa", 7, "result"), ["17", "3"])]


class _Journal:
    def __init__(self) -> None:
        self.frames: list[list[FrameRecord]] = []
        self.commands: list[list[CommandRecord]] = []
        self.recorded: list[list[str]] = []
        #: Lines kept in a decision's own commit.
        self.with_decisions: list[list[FrameRecord]] = []
        self.failing = False
        self.takeovers: list[tuple[tuple[str, int, str], list[str] | None]] = []

    def record_takeover(
        self, taken_from: tuple[str, int, str], history: list[str] | None = None
    ) -> None:
        self.takeovers.append((taken_from, history))

    def record_frames(self, frames: list[FrameRecord]) -> None:
        if self.failing:
            raise JournalWriteError("disk full")
        self.frames.append(list(frames))

    def record_commands(self, commands: list[CommandRecord]) -> None:
        self.commands.append(list(commands))

    def record(
        self,
        games: list[Any],
        messages: list[Outgoing],
        state: Any,
        frames: list[FrameRecord] | tuple[()] = (),
        **_: Any,
    ) -> list[int]:
        self.recorded.append([m.topic for m in messages])
        if frames:
            self.with_decisions.append(list(frames))
        return list(range(len(messages)))

    def enqueue(self, messages: list[Outgoing]) -> None:
        self.recorded.append([m.topic for m in messages])


def _applier(
    wakes: list[int] | None = None,
) -> tuple[EffectsApplier, _Journal, _Pipeline, Any, list[tuple[Effects, str]]]:
    scheduler, loop, _ = hand_scheduler()
    journal, pipeline = _Journal(), _Pipeline()
    failed: list[tuple[Effects, str]] = []
    woken = wakes if wakes is not None else []
    applier = EffectsApplier(
        base_topic="wheeld/T1",
        log=RecordingLog(),
        scheduler=scheduler,
        journal=cast(Any, journal),
        pipeline=cast(Any, pipeline),
        link=cast(Any, SimpleNamespace(write=lambda data: None)),
        publisher=cast(Any, SimpleNamespace(wake=lambda: woken.append(len(journal.recorded)))),
        metrics=None,
        on_journal_failed=lambda effects, error: failed.append((effects, error)),
    )
    return applier, journal, pipeline, loop, failed


def _frame(n: int) -> FrameRecord:
    return FrameRecord(1000.0 + n, "<", b"HB", None)


def test_lines_wait_for_a_batch_or_the_flush_timer() -> None:
    applier, journal, _, loop, _ = _applier()
    applier.apply(Effects(frames=[_frame(1), _frame(2)]))
    assert journal.frames == []
    loop.run_until(loop.t + FRAME_FLUSH_S)
    assert journal.frames == [[_frame(1), _frame(2)]]
    applier.apply(Effects(frames=[_frame(n) for n in range(FRAME_BATCH)]))
    assert len(journal.frames) == 2 and len(journal.frames[1]) == FRAME_BATCH, "a full batch: now"


def test_a_game_s_end_keeps_the_lines_that_led_to_it_in_its_own_commit() -> None:
    """A result is one commit with the lines before it (its fsync makes both durable), not
    a commit of lines and then the result's; a game's start leaves its lines to the beat."""
    applier, journal, _, loop, _ = _applier()
    spinning = GameRecord(1, "spinning", "{}")
    result = GameRecord(1, "result", "{}", number="17")
    applier.apply(Effects(frames=[_frame(1)], games=[spinning]))
    assert journal.frames == [] and journal.with_decisions == [], "a start's lines wait"
    applier.apply(Effects(frames=[_frame(2)], games=[result]))
    assert journal.with_decisions == [[_frame(1), _frame(2)]] and journal.frames == []
    assert applier.batches.frames == []
    loop.run_until(loop.t + FRAME_FLUSH_S)
    assert journal.frames == [], "nothing left for the beat"


def test_lines_the_journal_refuses_are_kept_and_the_fault_is_said() -> None:
    applier, journal, _, loop, failed = _applier()
    journal.failing = True
    applier.apply(Effects(frames=[_frame(1)]))
    loop.run_until(loop.t + FRAME_FLUSH_S)
    assert [error for _, error in failed] == ["disk full"]
    assert applier.batches.frames == [_frame(1)]


def test_the_commands_of_one_turn_of_the_loop_go_in_one_commit() -> None:
    applier, journal, _, loop, _ = _applier()
    one = CommandRecord(1000.0, "ack", "ana", "{}", True, "acknowledged")
    two = CommandRecord(1000.0, "ack", "bob", "{}", True, "acknowledged")
    applier.apply(Effects(commands=[one]))
    applier.apply(Effects(commands=[two]))
    assert journal.commands == []
    loop.run_until(loop.t)
    assert journal.commands == [[one, two]]


def test_the_pipelines_next_deadline_is_on_the_scheduler() -> None:
    applier, _, pipeline, loop, _ = _applier()
    pipeline.deadline = 1000.0 + loop.t + 2.5
    applier.apply(Effects())
    assert loop.armed == [loop.t + 2.5]
    pipeline.deadline = None
    loop.run_until(loop.t + 2.5)
    assert pipeline.told == [("timer", 1000.0 + loop.t)]
    assert loop.armed == [], "no deadline after it: no timer"


def _deadline_moved_later(
    effects: Effects,
) -> tuple[EffectsApplier, _Pipeline, Any, float]:
    """A deadline 2 s on, then moved to 3 s on by ``effects`` applied."""
    applier, _, pipeline, loop, _ = _applier()
    start = loop.t
    pipeline.deadline = 1000.0 + start + 2.0
    applier.apply(Effects())
    pipeline.deadline = 1000.0 + start + 3.0
    applier.apply(effects)
    return applier, pipeline, loop, start


def test_a_deadline_moved_later_keeps_its_timer_and_is_called_only_when_it_comes() -> None:
    # Every line from the wheel moves the link's deadline on: the timer is not replaced
    # after each one (a cancel and a new event-loop timer a line), it re-arms when it fires.
    applier, pipeline, loop, start = _deadline_moved_later(Effects())
    assert loop.armed == [start + 2.0], "a later deadline: the timer set stays"
    loop.run_until(start + 2.0)
    assert pipeline.told == [], "not due yet: re-armed, the pipeline not called"
    assert loop.armed == [start + 3.0]
    loop.run_until(start + 3.0)
    assert pipeline.told == [("timer", 1000.0 + start + 3.0)]
    pipeline.deadline = 1000.0 + start + 9.0
    applier.apply(Effects())
    pipeline.deadline = 1000.0 + start + 5.0
    applier.apply(Effects())
    assert loop.armed == [start + 5.0], "an earlier deadline replaces the timer"


def test_a_deadline_moved_later_is_not_called_early_when_a_derived_step_waits() -> None:
    # The derived step settled when the timer fires sets a timer for the deadline as it
    # is then: the pipeline is still not told of a deadline that has not come.
    applier, pipeline, loop, start = _deadline_moved_later(_game())  # a derived step waits
    # The timer fires (the scheduler lets go of it) before the step's turn has come.
    timer = applier._deadline
    assert timer is not None
    timer.cancel()
    applier._deadline_due(1000.0 + start + 2.0)
    assert pipeline.told == [("derived",)]
    assert loop.armed == [start + 3.0]
    loop.run_until(start + 3.0)
    assert pipeline.told == [("derived",), ("timer", 1000.0 + start + 3.0)]


def _game() -> Effects:
    game = cast(Any, SimpleNamespace(event="result"))
    return Effects(games=[game], messages=[Outgoing("wheeld/T1/result", "{}")])


def test_what_kept_games_lead_to_is_derived_after_the_publisher_is_woken() -> None:
    wakes: list[int] = []
    applier, journal, pipeline, loop, _ = _applier(wakes)
    applier.apply(_game())
    assert journal.recorded == [["wheeld/T1/result"]] and pipeline.told == []
    assert wakes == [1], "the result goes to the publisher before the statistics are made"
    loop.run_until(loop.t)
    assert pipeline.told == [("derived",)], "on the loop's next turn, with no input"
    assert journal.recorded[-1] == ["wheeld/T1/stats"] and wakes == [1, 2]
    applier.settle()
    assert pipeline.told == [("derived",)], "once per kept batch"


def test_the_publisher_is_woken_only_when_the_outbox_has_new_entries() -> None:
    wakes: list[int] = []
    applier, journal, _, _, _ = _applier(wakes)
    applier.apply(Effects(frames=[_frame(1)]))  # a heartbeat: nothing to send
    assert wakes == []
    applier.apply(Effects(messages=[Outgoing("wheeld/T1/wheel", "{}")]))
    assert wakes == [1]
    applier.enqueue_best_effort(Outgoing("wheeld/T1/table", "{}"))
    assert wakes == [1, 2] and journal.recorded[-1] == ["wheeld/T1/table"]


def test_a_derived_step_pending_runs_before_the_next_input_reaches_the_pipeline() -> None:
    applier, _, pipeline, loop, _ = _applier()
    inputs = TableInputs(
        clock=LoopClock(loop),
        pipeline=cast(Any, pipeline),
        condition=cast(Any, SimpleNamespace(heard=lambda: None, status_line=lambda: "idle")),
        notifier=cast(Any, SimpleNamespace(status=lambda line: None)),
        capture=None,
        apply=applier.apply,
        settle=applier.settle,
        stop=lambda: None,
        log=RecordingLog(),
    )
    inputs.release()
    tells: list[Callable[[], None]] = [
        lambda: inputs.on_data(b"A\r\n", 1001.0),
        inputs.on_link_up,
        lambda: inputs.on_link_down("gone"),
        lambda: inputs.clock_stepped(1.0, 1002.0),
        lambda: inputs.on_retained_result("result", b"[]"),
    ]
    for tell in tells:
        applier.apply(_game())
        tell()
        assert pipeline.told[-2] == ("derived",), pipeline.told
    applier.apply(_game())
    pipeline.deadline = 1000.0 + loop.t
    applier.apply(Effects())  # the pipeline's deadline due now, on the same turn
    assert pipeline.told[-1] != ("derived",)
    loop.run_until(loop.t)
    assert pipeline.told[-2:] == [("derived",), ("timer", 1000.0 + loop.t)]
    assert pipeline.told.count(("derived",)) == 6


async def test_a_command_reaches_the_pipeline_after_a_derived_step_pending() -> None:
    order: list[str] = []

    def on_command(command: OperatorCommand, now: float) -> tuple[dict[str, Any], Effects]:
        order.append(command.name)
        return {"ok": True}, Effects()

    _, _, clock = hand_scheduler()
    inputs = TableInputs(
        clock=clock,
        pipeline=cast(Any, SimpleNamespace(on_command=on_command)),
        condition=cast(Any, None),
        notifier=cast(Any, None),
        capture=None,
        apply=lambda effects: order.append("applied"),
        settle=lambda: order.append("settled"),
        stop=lambda: None,
        log=RecordingLog(),
    )
    desk = _desk(clock, inputs)
    reply = await desk(OperatorCommand("close", b"{}"))
    assert reply is not None and reply["ok"]
    assert order == ["settled", "close", "applied"]


def _desk(clock: Any, inputs: TableInputs) -> CommandDesk:
    return CommandDesk(
        log=RecordingLog(),
        clock=clock,
        inputs=inputs,
        gate=cast(Any, SimpleNamespace(allow=lambda sender, name, now: True)),
        recalls=cast(Any, None),
    )


async def test_a_command_the_pipeline_raises_on_stops_the_daemon_and_none_after_is_done() -> None:
    """Not "internal error" and the table deciding on with its state unvouched for: the
    daemon stops as on any input the pipeline raises on, and refuses what comes meanwhile."""
    stops: list[int] = []
    log = RecordingLog()
    inputs, pipeline, applied, _ = _inputs(stops, log)
    inputs.release()
    carried: list[str] = []

    def on_command(command: OperatorCommand, now: float) -> tuple[dict[str, Any], Effects]:
        if command.name == "no_spin":
            raise RuntimeError("engine moved, decision unkept")
        carried.append(command.name)
        return {"ok": True}, Effects()

    pipeline.on_command = on_command  # type: ignore[attr-defined]
    desk = _desk(hand_scheduler()[2], inputs)
    refused = {
        "ok": False,
        "error": "internal error: the daemon is stopping, to start again",
        "schema_version": SCHEMA_VERSION,
    }
    assert await desk(OperatorCommand("no_spin", b"{}")) == refused
    assert stops == [1] and isinstance(inputs.broken_by, RuntimeError) and applied == []
    assert await desk(OperatorCommand("close", b"{}")) == refused
    assert carried == [] and applied == [] and stops == [1]
    (line,) = [fields for level, event, fields in log.lines if level == "error"]
    assert line["error"] == "RuntimeError: engine moved, decision unkept"


def test_inputs_after_the_pipeline_raised_are_not_decided_while_the_daemon_stops() -> None:
    """The stop ends the loop a turn later: a line, the link's news or the broker's that
    come meanwhile reach no pipeline (a frame_loss void of the lines it dropped, found)."""
    stops: list[int] = []
    inputs, pipeline, applied, _ = _inputs(stops)
    inputs.release()
    told = len(pipeline.told)

    def broken(data: bytes, now: float) -> Effects:
        raise RuntimeError("committed failed")

    pipeline.on_bytes = broken  # type: ignore[method-assign]
    inputs.on_data(b"A\r\n", 1001.0)
    pipeline.on_bytes = lambda data, now: pipeline._said("bytes", data, now)  # type: ignore[method-assign]
    inputs.on_data(b"B\r\n", 1002.0)
    inputs.on_link_down("gone")
    inputs.on_link_up()
    inputs.clock_stepped(5.0, 1003.0)
    inputs.on_retained_result("result", b"[]")
    ran: list[int] = []
    inputs.guarded_call(lambda: ran.append(1))
    assert len(pipeline.told) == told and applied == [] and ran == [] and stops == [1]


def test_the_pipelines_work_a_timer_starts_is_guarded_as_an_input() -> None:
    """A raise in the deadline's or the derived step's pipeline work stops the daemon
    (it was a logged warning, the table deciding on and its deadline never set again)."""
    applier, _, pipeline, loop, _ = _applier()
    stops: list[int] = []
    inputs, _, _, _ = _inputs(stops)
    applier.guard = inputs.guarded_call

    def broken(now: float) -> Effects:
        raise RuntimeError("on_timer failed")

    pipeline.on_timer = broken  # type: ignore[method-assign]
    pipeline.deadline = 1000.0 + loop.t
    applier.apply(Effects())
    loop.run_until(loop.t)
    assert stops == [1] and isinstance(inputs.broken_by, RuntimeError)


def _fault_parts(
    scheduler: Any,
    pipeline: _Pipeline,
    writable: Callable[[int], bool],
    *,
    log: RecordingLog | None = None,
    published: list[Outgoing] | None = None,
    statuses: list[str] | None = None,
    apply: Callable[[Effects], None] = lambda effects: None,
    settle: Callable[[], None] = lambda: None,
) -> Any:
    """What a ``JournalFault`` is built from: the journal's probe and the publisher's,
    the notifier's and the applier's calls kept where the test says."""
    return SimpleNamespace(
        log=RecordingLog() if log is None else log,
        scheduler=scheduler,
        journal=SimpleNamespace(writable=lambda now, probe_bytes: writable(probe_bytes)),
        pipeline=pipeline,
        publisher=SimpleNamespace(
            publish_unjournaled=(published if published is not None else []).append,
            wake=lambda: None,
        ),
        notifier=SimpleNamespace(status=(statuses if statuses is not None else []).append),
        condition=SimpleNamespace(status_line=pipeline.status_line),
        apply=apply,
        settle=settle,
        guard=lambda action: action(),
    )


def test_an_unwritable_journal_is_said_outside_it_and_tried_again_less_often() -> None:
    """A full disk nobody frees is one fault, tried after 1, 2, 4 and 8 s, then every
    10 s (one line says so): not a 128 KiB probe a second for as long as it lasts."""
    scheduler, loop, _ = hand_scheduler()
    pipeline = _Pipeline()
    published: list[Outgoing] = []
    statuses: list[str] = []
    applied: list[Effects] = []
    log = RecordingLog()
    tries: list[float] = []
    disk = {"full": True}

    def writable(probe_bytes: int) -> bool:
        tries.append(loop.t)
        return not disk["full"]

    parts = _fault_parts(
        scheduler,
        pipeline,
        writable,
        log=log,
        published=published,
        statuses=statuses,
        apply=applied.append,
    )
    fault = JournalFault(cast(Any, parts))
    fault.failed(Effects(), "disk full")
    fault.failed(Effects(), "disk full")  # still one retry
    assert [_state(m) for m in published] == ["fault", "fault"]
    assert statuses[-1] == "fault: journal_unwritable"
    assert scheduler.names() == ["journal retry"]
    start = loop.t
    loop.run_until(start + 70)
    assert scheduler.names() == ["journal retry"] and applied == [], "still unwritable"
    waits = [round(b - a, 3) for a, b in zip([start, *tries], tries, strict=False)]
    assert waits == [1, 2, 4, 8, 10, 10, 10, 10, 10]
    assert [event for _, event, _ in log.lines].count(
        "journal still unwritable: tried again less often"
    ) == 1
    assert [_state(m) for m in published] == ["fault", "fault"], "one fault, said once"
    disk["full"] = False
    loop.run_until(tries[-1] + JOURNAL_RETRY_MAX_S)
    assert pipeline.told == [("recovered", 1000.0 + loop.t)] and len(applied) == 1
    assert _state(published[-1]) == "online" and statuses[-1] == "idle"
    assert scheduler.names() == []
    fault.failed(Effects(), "disk full")  # a new fault: tried after a second again
    assert fault.retry_s == JOURNAL_RETRY_S


def test_a_journal_that_fails_again_soon_after_it_recovers_is_held_longer_each_time() -> None:
    """Found on the first day: under `ulimit -f` the journal recovered, failed at the next
    game and recovered again, raising and clearing the alarm every few seconds."""
    scheduler, loop, _ = hand_scheduler()
    pipeline = _Pipeline()
    published: list[Outgoing] = []
    log = RecordingLog()
    parts = _fault_parts(
        scheduler, pipeline, lambda probe_bytes: True, log=log, published=published
    )
    fault = JournalFault(cast(Any, parts))
    holds: list[float] = []
    for _ in range(10):
        fault.failed(Effects(), "File too large")
        holds.append(fault.hold_s)
        loop.run_until(loop.t + fault.hold_s - 0.5)
        assert pipeline.journal_failed, "held"
        loop.run_until(loop.t + 0.5)
        assert not pipeline.journal_failed, "tried again at the hold's end, and writable"
        loop.run_until(loop.t + 1.0)  # the next game's commit fails a second later
    assert holds == [1, 2, 4, 8, 16, 32, 64, 128, 256, JOURNAL_HOLD_MAX_S]
    assert [_state(m) for m in published] == ["fault", "online"] * 10
    assert log.lines[-1][1].startswith("journal unwritable again soon after it recovered")
    assert log.lines[-1][2] == {
        "recovered_s_ago": 1.0,
        "hold_s": JOURNAL_HOLD_MAX_S,
        "probe_kib": JOURNAL_PROBE_MAX_BYTES // 1024,
    }
    # Writable for the flap window: the one-second retry is earned back.
    loop.run_until(loop.t + JOURNAL_FLAP_WINDOW_S)
    fault.failed(Effects(), "disk full")
    assert fault.hold_s == JOURNAL_RETRY_S and fault.probe_bytes == PROBE_BYTES


def test_a_permanent_file_size_limit_settles_into_one_fault() -> None:
    """Found under a small permanent `ulimit -f`: after each write-ahead-log checkpoint
    the probe fitted again, the next games' commits did not, and the alarm was raised and
    cleared once a checkpoint for as long as the daemon ran. The probe a flapping fault
    asks for doubles, so the limit stops it after a flap or two: one fault, tried with a
    back-off, until the limit goes (the larger probe then passes at once)."""
    scheduler, loop, _ = hand_scheduler()
    pipeline = _Pipeline()
    published: list[Outgoing] = []
    room = {"bytes": 300 * 1024}  # what the write-ahead log has after its checkpoint
    probes: list[int] = []

    def writable(probe_bytes: int) -> bool:
        probes.append(probe_bytes)
        return probe_bytes < room["bytes"]

    log = RecordingLog()
    parts = _fault_parts(scheduler, pipeline, writable, log=log, published=published)
    fault = JournalFault(cast(Any, parts))
    for _ in range(20):  # the next games fill the log half a minute after each recovery
        if not pipeline.journal_failed:
            fault.failed(Effects(), "File too large")
        loop.run_until(loop.t + 30)
    assert [_state(m) for m in published] == ["fault", "online", "fault", "online", "fault"]
    assert pipeline.journal_failed, "settled: one fault"
    assert sorted(set(probes)) == [PROBE_BYTES, 2 * PROBE_BYTES, 4 * PROBE_BYTES]
    assert scheduler.names() == ["journal retry"] and fault.retry_s == JOURNAL_RETRY_MAX_S
    room["bytes"] = 1 << 30  # the limit raised, the disk freed
    loop.run_until(loop.t + JOURNAL_RETRY_MAX_S)
    assert not pipeline.journal_failed and _state(published[-1]) == "online"


class _RecoveringPipeline(_Pipeline):
    """Recovers as the table does: its effects say so in the log."""

    def journal_recovered(self, now: float) -> Effects:
        self.journal_failed = False
        return Effects(logs=[LogRecord("warning", "journal writable again", {})])


def test_a_recovery_whose_own_commit_fails_is_no_recovery() -> None:
    """Found under `ulimit -f`: the probe fitted, the recovery's commit did not, and the
    log said "journal writable again" (and the alarm cleared) all the same."""
    scheduler, loop, _ = hand_scheduler()
    pipeline = _RecoveringPipeline()
    log = RecordingLog()
    published: list[Outgoing] = []
    faults: list[JournalFault] = []

    def refused(effects: Effects) -> None:
        """What the applier does when the journal refuses the recovery's commit."""
        faults[0].failed(effects, "File too large")
        for record in effects.logs:
            getattr(log, record.level)(record.event, **record.fields)

    parts = _fault_parts(
        scheduler, pipeline, lambda probe_bytes: True, log=log, published=published, apply=refused
    )
    faults.append(JournalFault(cast(Any, parts)))
    faults[0].failed(Effects(), "File too large")
    loop.run_until(loop.t + JOURNAL_RETRY_S)
    assert pipeline.journal_failed
    assert "journal writable again" not in [event for _, event, _ in log.lines]
    assert [_state(m) for m in published] == ["fault", "fault"], "never online"
    assert scheduler.names() == ["journal retry"]
    # Found under `ulimit -f` too: the probe passed and the recovery failed, once a
    # minute for as long as it lasted. A probe that was no proof is a flap: larger next.
    assert faults[0].probe_bytes == 2 * PROBE_BYTES and faults[0].hold_s == 2 * JOURNAL_RETRY_S


def test_a_status_queued_before_a_fault_goes_out_as_the_status_now() -> None:
    """Found under `ulimit -f`: the `online` a recovery queued was sent again from the
    outbox after the journal failed once more (its acknowledgement could not be kept),
    and the broker's retained status said `online` through the fault."""
    import asyncio

    from wheeld.config import Config
    from wheeld.shell.drain import OutboxDrain, unsigned_alarm
    from wheeld.shell.presence import Presence

    config = Config()
    presence = Presence(config, "host:/var/lib/wheeld", RecordingLog())
    drain = OutboxDrain(
        config,
        cast(Any, None),
        presence,
        RecordingLog(),
        alarm_message=unsigned_alarm(config),
    )
    sent: list[tuple[str, str]] = []

    class _Client:
        def send_acknowledged(self, topic: str, payload: str, **_: Any) -> None:
            sent.append((topic, payload))

        async def acknowledgement(self, pending: None) -> None:
            return None

    presence.payload = '{"state": "fault", "fault": "journal_unwritable"}'  # said since
    queued = Outgoing(f"{config.base_topic}/status", '{"state": "online"}', retain=True)
    asyncio.run(drain.deliver(cast(Any, _Client()), queued))
    ((topic, payload),) = sent
    assert topic == f"{config.base_topic}/status"
    assert json.loads(payload)["state"] == "fault"


class _Outbox:
    """A journal's outbox for the drain: its entries, and each commit that let some go."""

    def __init__(self, entries: list[Any]) -> None:
        self.outbox = list(entries)
        self.commits: list[list[int]] = []

    def pending(self, after: int = 0) -> list[Any]:
        return [entry for entry in self.outbox if entry.id > after]

    def acknowledge(self, *gone: Any) -> None:
        self.commits.append([entry.id for entry in gone])
        self.outbox = [entry for entry in self.outbox if entry not in gone]


def test_what_the_broker_acknowledged_leaves_the_outbox_in_one_commit_even_when_cut() -> None:
    """A game's messages (its marker, the message, the history, the statistics) each
    cost a commit of their own to leave the outbox; now one for those drained together,
    and what the broker acknowledged still leaves it when the connection goes."""
    import asyncio

    from wheeld.config import Config
    from wheeld.shell.drain import OutboxDrain, unsigned_alarm
    from wheeld.shell.journal.outbox import OutboxEntry
    from wheeld.shell.presence import Presence

    config = Config()
    entries = [OutboxEntry(i, Outgoing(f"t/{i}", "{}")) for i in range(1, 5)]

    class _Client:
        def __init__(self, cut_at: int | None = None) -> None:
            self.cut_at = cut_at

        def send_acknowledged(self, topic: str, payload: str, **_: Any) -> str:
            if topic == f"t/{self.cut_at}":
                raise ConnectionError("the broker went")
            return topic

        async def acknowledgement(self, pending: str) -> Any:
            return SimpleNamespace(is_failure=False)

        def forget(self, pending: str) -> None:
            pass

    acknowledged: list[int] = []
    journal = _Outbox(entries)
    drain = OutboxDrain(
        config,
        cast(Any, journal),
        Presence(config, "host:/var/lib/wheeld", RecordingLog()),
        RecordingLog(),
        alarm_message=unsigned_alarm(config),
        on_acknowledged=lambda entry: acknowledged.append(entry.id),
    )
    with contextlib.suppress(ConnectionError):
        asyncio.run(drain._drain_once(cast(Any, _Client(cut_at=3))))
    assert journal.commits == [[1, 2]], "what the broker took before the cut left the outbox"
    asyncio.run(drain._drain_once(cast(Any, _Client())))
    assert journal.commits == [[1, 2], [3, 4]] and journal.outbox == []
    assert acknowledged == [1, 2, 3, 4]


def test_the_journal_fault_settles_a_derived_step_before_telling_the_pipeline() -> None:
    scheduler, loop, _ = hand_scheduler()
    pipeline = _Pipeline()
    parts = _fault_parts(
        scheduler,
        pipeline,
        lambda probe_bytes: True,
        settle=lambda: pipeline.told.append(("settled",)),
    )
    fault = JournalFault(cast(Any, parts))
    fault.failed(Effects(), "disk full")
    assert pipeline.told == [("settled",)], "then the pipeline's journal_write_failed"
    loop.run_until(loop.t + JOURNAL_RETRY_S)
    assert pipeline.told[1:] == [("settled",), ("recovered", 1000.0 + loop.t)]


def test_commands_past_the_rate_are_counted_and_journaled_once_a_minute() -> None:
    scheduler, loop, _ = hand_scheduler()
    applied: list[Effects] = []
    log = RecordingLog()
    gate = CommandGate(log=log, scheduler=scheduler, apply=applied.append)
    allowed = [gate.allow("ana", "ack", 1000.0) for _ in range(200)]
    assert allowed[0] and not all(allowed)
    assert scheduler.names() == ["rate summary"], "one summary, however many refused"
    loop.run_until(loop.t + RATE_SUMMARY_S)
    (effects,) = applied
    (record,) = effects.commands
    refused = allowed.count(False)
    assert (record.name, record.sender, record.accepted) == ("ack", "ana", False)
    assert record.payload == f"{refused} ack command(s) refused over the rate"
    assert log.lines[-1][1] == "commands refused over the rate"
    assert all(gate.allow("bob", "close", 1000.0) for _ in range(3)), "each kind its own"


def test_what_was_refused_is_journaled_at_a_stop() -> None:
    scheduler, _, _ = hand_scheduler()
    applied: list[Effects] = []
    gate = CommandGate(log=RecordingLog(), scheduler=scheduler, apply=applied.append)
    while gate.allow("ana", "ack", 1000.0):
        pass
    gate.stopping(1001.0)
    assert len(applied) == 1 and scheduler.names() == []
    gate.stopping(1002.0)
    assert len(applied) == 1, "nothing refused since: nothing said"


# -- stopping a task that owns an MQTT client (wheeld.shell.stop) ---------------------------


async def test_a_task_that_swallows_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    import asyncio
    import contextlib

    from wheeld.shell.stop import stop_tasks

    swallowed = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(1)  # as aiomqtt's connect can, on Python 3.11
        await asyncio.sleep(3600)

    async def failing() -> None:
        raise RuntimeError("gone")

    tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing())]
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_tasks(*tasks), timeout=10)
    assert swallowed == [1] and all(task.done() for task in tasks)

    released = False

    async def deaf() -> None:
        while not released:  # deaf to every cancellation until released
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    never = asyncio.create_task(deaf())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_tasks(never, patience_s=0.05), timeout=10)  # bounded
    assert not never.done()
    released = True
    await asyncio.wait_for(stop_tasks(never), timeout=10)
    assert never.done()


def test_a_games_marker_and_message_go_on_the_wire_before_either_puback() -> None:
    """Intent first holds by the connection's order (the broker takes the marker first);
    the message no longer waits a round trip for the marker's PUBACK. Two entries on one
    topic still go one answer apart: a refusal must hold back the later one."""
    import asyncio

    from wheeld.config import Config
    from wheeld.shell.drain import OutboxDrain, unsigned_alarm
    from wheeld.shell.journal.outbox import OutboxEntry
    from wheeld.shell.presence import Presence

    config = Config()
    topics = ["b/sequence", "b/game", "b/result", "b/sequence", "b/game"]
    entries = [OutboxEntry(i, Outgoing(topic, "{}")) for i, topic in enumerate(topics, 1)]
    wire: list[str] = []

    class _Client:
        def send_acknowledged(self, topic: str, payload: str, **_: Any) -> str:
            wire.append(f"PUBLISH {topic}")
            return topic

        async def acknowledgement(self, pending: str) -> Any:
            wire.append(f"PUBACK {pending}")
            return SimpleNamespace(is_failure=False)

        def forget(self, pending: str) -> None:
            pass

    journal = _Outbox(entries)
    drain = OutboxDrain(
        config,
        cast(Any, journal),
        Presence(config, "host:/var/lib/wheeld", RecordingLog()),
        RecordingLog(),
        alarm_message=unsigned_alarm(config),
    )
    asyncio.run(drain._drain_once(cast(Any, _Client())))
    assert wire == [
        *("PUBLISH b/sequence", "PUBLISH b/game", "PUBLISH b/result"),
        *("PUBACK b/sequence", "PUBACK b/game", "PUBACK b/result"),
        *("PUBLISH b/sequence", "PUBLISH b/game", "PUBACK b/sequence", "PUBACK b/game"),
    ]
    assert journal.outbox == []


async def test_a_raise_applying_a_commands_effects_stops_the_daemon_as_on_an_input() -> None:
    stops: list[int] = []
    inputs, pipeline, _, _ = _inputs(stops)
    inputs._apply = lambda effects: 1 / 0  # type: ignore[assignment]  # its deadline, say
    inputs.release()
    pipeline.on_command = lambda command, now: ({"ok": True}, Effects())  # type: ignore[attr-defined]
    reply = await _desk(hand_scheduler()[2], inputs)(OperatorCommand("close", b"{}"))
    assert reply is not None and not reply["ok"]
    assert stops == [1] and isinstance(inputs.broken_by, ZeroDivisionError)


def test_the_journals_retry_and_the_stops_settle_are_guarded_too() -> None:
    """The journal's retry timer telling the pipeline it recovered, and a derived step
    asked for by a job or the stop: a raise stops the daemon, and once it broke none runs."""
    scheduler, loop, _ = hand_scheduler()
    pipeline = _Pipeline()
    stops: list[int] = []
    inputs, _, _, _ = _inputs(stops)
    parts = _fault_parts(scheduler, pipeline, lambda probe: True)
    parts.guard = inputs.guarded_call
    fault = JournalFault(parts)

    def recovered(now: float) -> Effects:
        raise RuntimeError("journal_recovered failed")

    pipeline.journal_recovered = recovered  # type: ignore[method-assign]
    fault.failed(Effects(), "disk full")
    loop.run_until(loop.t + JOURNAL_RETRY_S)
    assert stops == [1] and isinstance(inputs.broken_by, RuntimeError)
    applier, _, applier_pipeline, _, _ = _applier()
    applier.guard = inputs.guarded_call
    applier.apply(_game())
    applier.settle()  # the stop's, after the break: nothing derived
    assert applier_pipeline.told == []
