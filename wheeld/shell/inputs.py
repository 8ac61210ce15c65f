"""What the world tells the table, handed to the pipeline with the host time.

The wheel's bytes, the link going up or down, the broker's retained result
and sequence, and a stepped clock each become one pipeline input, whose
effects are applied at once. Until the broker's memory has been read at start
(``Daemon``'s start-up check) what the wheel says is deferred, in order and with
its time, and decided after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

if TYPE_CHECKING:
    from wheeld.core.commands import OperatorCommand
    from wheeld.shell.capture_writer import CaptureWriter
    from wheeld.shell.clock import HostClock
    from wheeld.shell.condition import TableCondition
    from wheeld.shell.notify import Notifier
    from wheeld.table.effects import Effects
    from wheeld.table.pipeline import TablePipeline


_P = ParamSpec("_P")


def _guarded(
    method: Callable[Concatenate[TableInputs, _P], None],
) -> Callable[Concatenate[TableInputs, _P], None]:
    """An input whose pipeline raised leaves the table's state unvouched for (the engine
    may have moved, its decisions not kept): ``TableInputs.broke`` stops the daemon,
    rather than a warning and the rest of the input lost while it goes on deciding."""

    def guarded(self: TableInputs, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        self.guarded_call(lambda: method(self, *args, **kwargs))

    return guarded


class TableInputs:
    """The link's, the broker's and the clock's news, into the pipeline."""

    def __init__(
        self,
        *,
        clock: HostClock,
        pipeline: TablePipeline,
        condition: TableCondition,
        notifier: Notifier,
        capture: CaptureWriter | None,
        apply: Callable[[Effects], None],
        settle: Callable[[], None],
        stop: Callable[[], None],
        log: Any,
    ) -> None:
        self._clock = clock
        self._pipeline = pipeline
        self._condition = condition
        self._notifier = notifier
        self._capture = capture
        self._apply = apply
        #: Derives what kept games lead to, if it waits: before each input (``EffectsApplier``).
        self._settle = settle
        #: Stops the daemon: an input the pipeline raised on (``_guarded``).
        self._stop = stop
        self._log = log
        #: What an input raised, if one did: the daemon stops with status 1.
        self.broken_by: Exception | None = None
        #: What the wheel said before the broker's memory was read: decided after it.
        self._deferred: list[Callable[[], None]] | None = []
        #: The broker's retained ``<base>/history``, until the sequence read with it.
        self._history: bytes | None = None
        clock.on_step = self.clock_stepped

    def broke(self, error: Exception) -> None:
        """The pipeline raised on an input: what it decided is no longer known to be
        whole, so nothing more is decided. The daemon stops (status 1: the unit starts it
        again, and the start voids the game under way, ``controller_restart``)."""
        if self.broken_by is None:
            self.broken_by = error
            self._log.error(
                "table pipeline failed: stopping, to start again with the game under way voided",
                error=f"{type(error).__name__}: {error}",
            )
            self._stop()

    def guarded_call(self, action: Callable[[], None]) -> None:
        """``action`` (the pipeline's work a timer starts) run as an input is: not once
        the table broke, and a raise breaks it."""
        if self.broken_by is not None:
            return  # stopping: what comes until the loop ends is not decided
        try:
            action()
        except Exception as exc:
            self.broke(exc)

    def on_command(self, command: OperatorCommand, now: float) -> dict[str, Any] | None:
        """An operator's command to the pipeline, its effects applied: its reply, or None
        when the table broke (before, or on this command: it stops as on any input)."""
        if self.broken_by is not None:
            return None
        try:
            self._settle()
            reply, effects = self._pipeline.on_command(command, now)
            self._apply(effects)
        except Exception as exc:
            self.broke(exc)
            return None
        return reply

    @_guarded
    def release(self) -> None:
        """The broker's memory is read: decide what waited, in order, and the rest as it comes.

        Guarded as the inputs are: a line that waited is an input all the same, and
        what follows one the pipeline raised on is not decided."""
        deferred, self._deferred = self._deferred or [], None
        for heard in deferred:
            heard()

    @_guarded
    def clock_stepped(self, step: float, wall: float) -> None:
        """The wall clock was stepped: the capture and the pipeline are told, so
        a forward step does not read as silence and void the game in progress."""
        if self._capture is not None:
            self._capture.clock_step(step)
        if self._deferred is not None:  # in its place among the lines that wait
            self._deferred.append(lambda: self._apply(self._pipeline.on_clock_step(step, wall)))
            return
        self._settle()
        self._apply(self._pipeline.on_clock_step(step, wall))

    @_guarded
    def on_data(self, data: bytes, now: float) -> None:
        self._condition.heard()
        if self._deferred is not None:  # before the broker's answer: kept, in order, with its time
            self._deferred.append(lambda: self._apply(self._pipeline.on_bytes(data, now)))
            return
        self._settle()
        self._apply(self._pipeline.on_bytes(data, now))

    @_guarded
    def on_link_up(self) -> None:
        now = self._clock.now()
        if self._deferred is not None:
            self._deferred.append(lambda: self._link_changed(self._pipeline.on_link_up(now)))
            return
        self._settle()
        self._link_changed(self._pipeline.on_link_up(now))

    @_guarded
    def on_link_down(self, why: str) -> None:
        now = self._clock.now()
        if self._deferred is not None:
            self._deferred.append(lambda: self._link_changed(self._pipeline.on_link_down(why, now)))
            return
        self._settle()
        self._link_changed(self._pipeline.on_link_down(why, now))

    def _link_changed(self, effects: Effects) -> None:
        self._apply(effects)
        self._notifier.status(self._condition.status_line())

    @_guarded
    def on_retained_result(self, name: str, payload: bytes) -> None:
        """The broker's retained ``history``, ``sequence`` or ``result``, at a (re)connect."""
        self._settle()
        if name == "history":  # handed before the sequence: what a takeover there may adopt
            self._history = payload
        elif name == "sequence":
            history, self._history = self._history, None
            self._apply(self._pipeline.on_broker_sequence(payload, self._clock.now(), history))
        else:
            self._apply(self._pipeline.on_broker_result(payload, self._clock.now()))
