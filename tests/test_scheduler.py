"""The daemon's one scheduler: one event-loop timer for the earliest of its timers,
and one host time handed to every callback that falls due together."""

from __future__ import annotations

import pytest

from tests.shell_fakes import hand_scheduler
from wheeld.shell import clock as clock_module
from wheeld.shell.clock import HostClock
from wheeld.shell.scheduler import Scheduler


def test_one_loop_timer_is_armed_for_the_earliest_of_them() -> None:
    scheduler, loop, _ = hand_scheduler()
    scheduler.after(5.0, lambda now: None, "late")
    assert loop.armed == [105.0]
    scheduler.after(10.0, lambda now: None, "later")
    assert loop.armed == [105.0], "a later timer re-arms nothing"
    soon = scheduler.after(1.0, lambda now: None, "soon")
    assert loop.armed == [101.0], "an earlier one takes the loop's timer"
    soon.cancel()
    assert loop.armed == [105.0]
    assert scheduler.names() == ["late", "later"]


def test_timers_due_together_get_one_time_in_the_order_they_fell_due() -> None:
    scheduler, loop, clock = hand_scheduler()
    called: list[tuple[str, float]] = []
    scheduler.after(2.0, lambda now: called.append(("b", now)), "b")
    scheduler.after(1.0, lambda now: called.append(("a", now)), "a")
    scheduler.after(9.0, lambda now: called.append(("c", now)), "c")
    loop.wake_late(102.5)  # both due: one reading for both
    assert called == [("a", 1102.5), ("b", 1102.5)]
    assert clock.reads == 1
    assert loop.armed == [109.0]


def test_at_turns_a_host_deadline_into_a_wait() -> None:
    scheduler, loop, _ = hand_scheduler()
    fired: list[float] = []
    scheduler.at(1103.0, fired.append, "deadline")  # host time 1103 is loop time 103
    assert loop.armed == [103.0]
    scheduler.at(1000.0, fired.append, "passed")  # already past: at once
    assert loop.armed == [100.0]
    loop.run_until(103.0)
    assert fired == [1100.0, 1103.0]


def test_a_repeating_timer_comes_round_every_period_until_cancelled() -> None:
    scheduler, loop, _ = hand_scheduler()
    ticks: list[float] = []
    timer = scheduler.every(10.0, ticks.append, "job")
    loop.run_until(135.0)
    assert ticks == [1110.0, 1120.0, 1130.0]
    assert timer.pending
    timer.cancel()
    loop.run_until(200.0)
    assert len(ticks) == 3 and not timer.pending
    with pytest.raises(ValueError, match="job: a period must be positive"):
        scheduler.every(0.0, ticks.append, "job")


def test_periodic_timers_and_the_beat_wake_the_loop_once_a_second_for_all() -> None:
    """An idle daemon's timers (the health's second, a batch of lines journaled within a
    second) keep to one grid of the loop's clock, so the loop wakes once for all of them;
    the first firing comes within one period (a watchdog's first ping never later than a
    period after READY); a repeating timer the loop was late for stays on its grid, and
    does not fire again at once when the loop woke just before a point of it."""
    scheduler, loop, _ = hand_scheduler()
    loop.t = 100.3
    fired: list[tuple[str, float]] = []
    scheduler.every(1.0, lambda now: fired.append(("health", loop.t)), "health")
    assert loop.armed == [101.0], "within a period, on the second"
    scheduler.every(5.0, lambda now: fired.append(("stats", loop.t)), "stats")
    loop.run_until(101.6)
    scheduler.on_the_beat(lambda now: fired.append(("frames", loop.t)), "frames flush")
    assert loop.armed == [102.0], "the next second: the health's"
    loop.run_until(102.0)
    assert fired == [("health", 101.0), ("health", 102.0), ("frames", 102.0)]
    loop.wake_late(104.5)  # held two and a half seconds
    loop.run_until(105.0)
    assert [t for name, t in fired if name == "health"][-2:] == [104.5, 105.0]
    loop.run_until(110.5)
    assert [t for name, t in fired if name == "stats"] == [105.0, 110.0]
    loop.wake_late(114.999)  # held again, to a hair before the stats' next point
    loop.run_until(119.9)
    assert [t for name, t in fired if name == "stats"] == [105.0, 110.0, 114.999], "not at 115"
    loop.run_until(120.0)
    assert [t for name, t in fired if name == "stats"][-1] == 120.0


def test_a_callback_cancelled_by_one_fired_before_it_does_not_fire() -> None:
    scheduler, loop, _ = hand_scheduler()
    called: list[str] = []
    second = scheduler.after(1.0, lambda now: called.append("second"), "second")

    def first(now: float) -> None:
        called.append("first")
        second.cancel()

    scheduler.after(0.5, first, "first")
    loop.run_until(101.0)
    assert called == ["first"]


def test_a_failing_callback_is_said_once_and_the_others_still_run() -> None:
    scheduler, loop, _ = hand_scheduler()
    called: list[str] = []

    def broken(now: float) -> None:
        raise RuntimeError("a bug")

    scheduler.every(1.0, broken, "broken job")
    scheduler.every(1.0, lambda now: called.append("next"), "next")
    loop.run_until(102.0)
    assert called == ["next", "next"], "a failing job fails alone, and runs again"
    assert [error["message"] for error in loop.errors] == ["timer broken job failed"] * 2
    assert isinstance(loop.errors[0]["exception"], RuntimeError)


def test_timers_set_while_firing_are_armed_once_it_is_done() -> None:
    scheduler, loop, _ = hand_scheduler()
    called: list[str] = []

    def first(now: float) -> None:
        scheduler.soon(lambda now: called.append("soon"), "soon")

    scheduler.after(1.0, first, "first")
    loop.run_until(101.0)
    assert called == ["soon"]


def test_nothing_fires_or_is_set_once_closed() -> None:
    scheduler, loop, _ = hand_scheduler()
    fired: list[float] = []
    scheduler.every(1.0, fired.append, "job")
    scheduler.close()
    assert loop.armed == []
    late = scheduler.after(1.0, fired.append, "after the stop")
    assert not late.pending and loop.armed == []
    loop.run_until(110.0)
    assert fired == []


def test_the_clock_tells_of_a_step_before_handing_the_time_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = {"time": 5000.0, "monotonic": 10.0}

    class _Time:
        @staticmethod
        def time() -> float:
            return readings["time"]

        @staticmethod
        def monotonic() -> float:
            return readings["monotonic"]

    monkeypatch.setattr(clock_module, "time", _Time)
    clock = HostClock()
    steps: list[tuple[float, float]] = []
    clock.on_step = lambda step, wall: steps.append((step, wall))
    readings["time"] += 0.5
    readings["monotonic"] += 0.5
    assert clock.now() == 5000.5 and steps == []
    readings["time"] += 30.0  # stepped: the monotonic clock did not move
    assert clock.now() == 5030.5
    assert steps == [(30.0, 5030.5)]
    readings["time"] -= 0.4  # under a second: no step
    assert clock.now() == 5030.1 and len(steps) == 1
    assert clock.wall() == 5030.1 and clock.monotonic() == 10.5


def test_the_daemon_reads_the_host_time_only_through_its_clock() -> None:
    from pathlib import Path

    shell = Path(clock_module.__file__).parent
    units = [
        "daemon.py",
        "link.py",
        "http_server.py",
        "applier.py",
        "inputs.py",
        "write_batches.py",
        "journal_fault.py",
        "condition.py",
        "command_desk.py",
        "command_rate.py",
        "recall_desk.py",
        *(f"jobs/{path.name}" for path in (shell / "jobs").glob("*.py")),
    ]
    reading = [
        unit
        for unit in units
        if "import time" in (shell / unit).read_text(encoding="utf-8")
        or "time.time()" in (shell / unit).read_text(encoding="utf-8")
    ]
    assert reading == [], "the scheduler's and the link's time is HostClock's"


async def test_a_task_waits_on_a_timer_and_a_cancelled_wait_leaves_none() -> None:
    import asyncio

    scheduler = Scheduler(HostClock())
    await asyncio.wait_for(scheduler.sleep(0.0, "backoff"), timeout=10)
    assert scheduler.names() == []
    with pytest.raises(TimeoutError):  # cancelled by wait_for: its timer goes with it
        await asyncio.wait_for(scheduler.sleep(3600.0, "long backoff"), timeout=0.05)
    assert scheduler.names() == []


def test_many_timers_set_and_cancelled_cost_a_heap_not_a_scan() -> None:
    # An HTTP server's hundreds of connections each hold a head deadline, most
    # cancelled within milliseconds: the heap drops them, and fires the rest in order.
    scheduler, loop, _ = hand_scheduler()
    fired: list[float] = []
    kept = [scheduler.after(float(i % 7) + 1.0, fired.append, f"kept {i}") for i in range(20)]
    for i in range(5000):
        scheduler.after(0.5 + i / 10_000, fired.append, "head").cancel()
    assert len(scheduler._heap) <= 64 + 2 * len(kept)
    assert loop.armed == [101.0]
    loop.run_until(110.0)
    assert fired == sorted(fired) and len(fired) == len(kept)
    assert scheduler.names() == []
