"""Lines from the wheel and operator commands, journaled in batches.

Lines: with the next decision, at ``FRAME_BATCH`` of them, or within
``FRAME_FLUSH_S`` of the first (one SQLite commit a second, not one a frame: on
the scheduler's beat, with the periodic jobs, not a wake-up of its own). Commands:
group-committed, those of one turn of the loop in one commit. When is decided
by ``EffectsApplier``; this module keeps what waits, and its timers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from wheeld.shell.journal import JournalWriteError
from wheeld.shell.scheduler import BEAT_S
from wheeld.table.effects import CommandRecord, FrameRecord

if TYPE_CHECKING:
    from wheeld.shell.journal import Journal
    from wheeld.shell.scheduler import Scheduler, Timer

#: Lines from the wheel are journaled in batches: with the next decision, at this
#: many, or this long after the first.
FRAME_BATCH = 64
FRAME_FLUSH_S = BEAT_S
#: Lines (and commands) kept while the journal cannot write (the oldest go first).
FRAME_BUFFER_MAX = 10_000


class WriteBatches:
    """What waits to be journaled; a failed write keeps it for the next try."""

    def __init__(
        self,
        journal: Journal,
        scheduler: Scheduler,
        on_failed: Callable[[str], None],
    ) -> None:
        self._journal = journal
        self._scheduler = scheduler
        #: Told the error when a batch its timer wrote could not be journaled.
        self._on_failed = on_failed
        self.frames: list[FrameRecord] = []
        self.commands: list[CommandRecord] = []
        self._frames_timer: Timer | None = None
        self._commands_timer: Timer | None = None

    def flush_frames(self) -> None:
        """Journal the buffered lines; JournalWriteError keeps them for the next try."""
        self._journal.record_frames(self.frames)
        self.recorded_frames()

    def recorded_frames(self) -> None:
        """The buffered lines went into the journal with a decision's commit."""
        if self._frames_timer is not None:
            self._frames_timer.cancel()
            self._frames_timer = None
        self.frames = []

    def flush_frames_later(self) -> None:
        """Within ``FRAME_FLUSH_S`` of the first line waiting: on the next beat."""
        if self._frames_timer is None:
            self._frames_timer = self._scheduler.on_the_beat(self._frames_due, "frames flush")

    def _frames_due(self, now: float) -> None:
        self._frames_timer = None
        try:
            self.flush_frames()
        except JournalWriteError as exc:
            if len(self.frames) > FRAME_BUFFER_MAX:
                del self.frames[: len(self.frames) - FRAME_BUFFER_MAX]
            self._on_failed(str(exc))

    def flush_commands(self) -> None:
        """Journal the commands buffered; JournalWriteError keeps them for the next try."""
        if self._commands_timer is not None:
            self._commands_timer.cancel()
            self._commands_timer = None
        if self.commands:
            self._journal.record_commands(self.commands)
            self.commands = []

    def flush_commands_soon(self) -> None:
        """On the loop's next turn: every command of this one in one commit."""
        if self._commands_timer is None:
            self._commands_timer = self._scheduler.soon(self._commands_due, "commands flush")

    def _commands_due(self, now: float) -> None:
        self._commands_timer = None
        try:
            self.flush_commands()
        except JournalWriteError as exc:
            del self.commands[: max(0, len(self.commands) - FRAME_BUFFER_MAX)]
            self._on_failed(str(exc))

    def flush(self) -> None:
        """Everything waiting, now (a clean stop: before the journal closes)."""
        self.flush_commands()
        self.flush_frames()
