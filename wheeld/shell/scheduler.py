"""Every timer of the daemon, on one event-loop timer (as Klipper's reactor does).

The pipeline's next deadline, the journal's write batches, the command-rate
summary, the periodic jobs (``wheeld.shell.jobs``), the journal's retry, the
link's silence check and reopen backoff, each HTTP connection's head and write
deadlines: each is a ``Timer`` here. The scheduler keeps one ``loop.call_at``
for the earliest of them, never polls and never sleeps; when it fires, the
host time is read once (``HostClock.now``, which notices a stepped clock) and
every timer then due is called with that same ``now``, in the order they fell
due. The timers are a heap, so setting or cancelling one costs O(log n) even
with a server's hundreds of connections each holding a deadline.

Periodic timers keep to a grid of the loop's clock (a period's multiples,
offset within the second by the process's ``BEAT_PHASE_S``), and what only has
to happen within a second (a batch of lines journaled) waits for the grid's
next second (``on_the_beat``): an idle daemon wakes once a second for all of
them (the MQTT client's own second too, ``wheeld.shell.mqtt_client``), not
once for each.

A timer is due at a moment of the monotonic clock, so a stepped wall clock
neither hurries nor delays it; ``at()`` turns a host-time deadline into one
when it is set. A callback that raises is said through the loop's exception
handler (one line, never a traceback) and the others still run; a repeating
timer is re-armed before it is called, so a failing job runs again.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import os
from collections.abc import Callable

from wheeld.shell.clock import HostClock

#: What a timer calls: the host time, the same for every timer fired together.
Callback = Callable[[float], None]
#: Timers due this close together fire together (the loop may wake a hair early).
TOGETHER_S = 0.001
#: The beat: ``on_the_beat`` waits for the next second of the loop's clock.
BEAT_S = 1.0
#: Where this process's seconds fall within the loop clock's: its own (spread by its pid),
#: so that daemons on one host (64 wheels) do not all run their jobs in one millisecond.
BEAT_PHASE_S = (os.getpid() * 0.6180339887498949) % 1.0


class Timer:
    """One pending call: cancel it, or let it fire."""

    __slots__ = ("_scheduler", "callback", "due", "every_s", "name", "order")

    def __init__(
        self,
        scheduler: Scheduler,
        name: str,
        due: float,
        callback: Callback,
        every_s: float | None,
        order: int,
    ) -> None:
        self._scheduler = scheduler
        self.name = name
        #: When it fires, on the event loop's (monotonic) clock.
        self.due = due
        self.callback = callback
        #: Its period, for a repeating timer; None for one that fires once.
        self.every_s = every_s
        self.order = order

    @property
    def pending(self) -> bool:
        """Not yet fired (a repeating timer always is), and not cancelled."""
        return self in self._scheduler._timers

    def cancel(self) -> None:
        """It does not fire (again); cancelling twice is nothing."""
        self._scheduler._remove(self)


class Scheduler:
    """The daemon's timers, driven by one event-loop timer and handed one clock."""

    def __init__(
        self,
        clock: HostClock,
        loop: asyncio.AbstractEventLoop | None = None,
        phase_s: float = BEAT_PHASE_S,
    ) -> None:
        self._clock = clock
        self._loop = loop
        #: The grid's offset within a second (``BEAT_PHASE_S``; 0 in tests).
        self._phase = phase_s
        #: The pending timers; ``_heap`` orders them (with stale entries, dropped lazily:
        #: a cancelled timer's, and a repeating timer's earlier due).
        self._timers: set[Timer] = set()
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        #: The one event-loop timer, and the moment it is set for.
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: float | None = None
        self._firing = False
        self._closed = False

    @property
    def clock(self) -> HostClock:
        """The clock every callback's ``now`` comes from."""
        return self._clock

    def at(self, when: float, callback: Callback, name: str = "") -> Timer:
        """Call ``callback`` at host time ``when`` (at once when it has passed)."""
        return self.after(when - self._clock.wall(), callback, name)

    def after(self, delay_s: float, callback: Callback, name: str = "") -> Timer:
        """Call ``callback`` once, ``delay_s`` seconds from now."""
        return self._add(name, max(0.0, delay_s), callback, None)

    def soon(self, callback: Callback, name: str = "") -> Timer:
        """Call ``callback`` on the loop's next turn, after what is running now."""
        return self._add(name, 0.0, callback, None)

    def every(self, period_s: float, callback: Callback, name: str = "") -> Timer:
        """Call ``callback`` every ``period_s`` seconds, on its grid (the multiples of
        ``period_s`` of the loop's clock, offset by the process's phase), the first time
        within one period from now (a watchdog's first ping is never later than before)."""
        if period_s <= 0:
            raise ValueError(f"{name or 'timer'}: a period must be positive, not {period_s}")
        return self._add(name, self._next_on_grid(period_s), callback, period_s)

    def on_the_beat(self, callback: Callback, name: str = "") -> Timer:
        """Call ``callback`` once, at the next second of the process's grid (within a
        second), when the periodic timers of whole seconds fire too."""
        return self._add(name, self._next_on_grid(BEAT_S), callback, None)

    def _next_on_grid(self, period_s: float) -> float:
        return until_on_grid(self._running_loop().time(), period_s, self._phase)

    async def sleep(self, delay_s: float, name: str = "") -> None:
        """Wait ``delay_s`` seconds, as a timer (a task's backoff): no sleep of its own.

        Once the scheduler is closed this waits until the task is cancelled,
        which a stop does.
        """
        woken: asyncio.Future[None] = self._running_loop().create_future()

        def wake(now: float) -> None:
            if not woken.done():
                woken.set_result(None)

        timer = self.after(delay_s, wake, name)
        try:
            await woken
        finally:
            timer.cancel()

    def close(self) -> None:
        """Cancel every timer: nothing fires after this, nor is set (a stop)."""
        self._closed = True
        self._timers.clear()
        self._heap.clear()
        self._disarm()

    def names(self) -> list[str]:
        """The pending timers' names, soonest first (for tests and logs)."""
        return [timer.name for timer in sorted(self._timers, key=_key)]

    # -- the one event-loop timer ------------------------------------------------------

    def _add(self, name: str, delay_s: float, callback: Callback, every_s: float | None) -> Timer:
        loop = self._running_loop()
        timer = Timer(self, name, loop.time() + delay_s, callback, every_s, next(self._order))
        if not self._closed:
            self._timers.add(timer)
            self._push(timer)
            self._arm()
        return timer

    def _push(self, timer: Timer) -> None:
        heapq.heappush(self._heap, (timer.due, timer.order, timer))
        if len(self._heap) > 64 + 2 * len(self._timers):  # mostly cancelled: rebuild
            self._heap = [(t.due, t.order, t) for t in self._timers]
            heapq.heapify(self._heap)

    def _earliest(self) -> float | None:
        """The earliest pending timer's due, stale entries dropped from the heap's top."""
        heap, timers = self._heap, self._timers
        while heap:
            due, _, timer = heap[0]
            if timer in timers and timer.due == due:
                return due
            heapq.heappop(heap)
        return None

    def _remove(self, timer: Timer) -> None:
        if timer in self._timers:
            self._timers.discard(timer)
            self._arm()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def _arm(self) -> None:
        """One ``call_at`` for the earliest timer; none when there is none."""
        if self._firing:
            return  # re-armed once every timer due has been called
        earliest = self._earliest()
        if earliest == self._armed_for:
            return
        self._disarm()
        if earliest is not None:
            self._handle = self._running_loop().call_at(earliest, self._fire)
            self._armed_for = earliest

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._armed_for = None, None

    def _fire(self) -> None:
        self._handle, self._armed_for = None, None
        loop = self._running_loop()
        self._firing = True
        try:
            now = self._clock.now()  # once for all: a step is told before anyone is called
            ticked = loop.time()
            horizon = ticked + TOGETHER_S
            due: list[Timer] = []
            while (earliest := self._earliest()) is not None and earliest <= horizon:
                due.append(heapq.heappop(self._heap)[2])
            for timer in due:
                if timer not in self._timers:
                    continue  # cancelled by a callback called before it
                if timer.every_s is None:
                    self._timers.discard(timer)
                else:
                    # On its grid; past what it missed when the loop was held, and not
                    # again at once when the loop woke just before a point of it.
                    every = timer.every_s
                    missed = math.floor((ticked - timer.due) / every)
                    timer.due += every * (max(0, missed) + 1)
                    if timer.due - ticked < every / 2:
                        timer.due += every
                    self._push(timer)
                try:
                    timer.callback(now)
                except Exception as exc:  # one timer's failure is not the others'
                    loop.call_exception_handler(
                        {"message": f"timer {timer.name or '?'} failed", "exception": exc}
                    )
        finally:
            self._firing = False
            self._arm()


def until_on_grid(now: float, period_s: float, phase_s: float = BEAT_PHASE_S) -> float:
    """The wait from ``now`` (the loop's clock) to the next point of ``period_s``'s grid,
    offset by ``phase_s``: never more than a period."""
    point = phase_s + (math.floor((now - phase_s) / period_s) + 1) * period_s
    return point - now


def _key(timer: Timer) -> tuple[float, int]:
    return (timer.due, timer.order)
