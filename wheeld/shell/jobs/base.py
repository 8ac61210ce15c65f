"""What a periodic job is, and the parts of the daemon it works with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from wheeld.config import Config
    from wheeld.core.signing import Signer
    from wheeld.shell.condition import TableCondition
    from wheeld.shell.journal import Journal
    from wheeld.shell.notify import Notifier
    from wheeld.shell.publisher import Publisher
    from wheeld.shell.scheduler import Scheduler
    from wheeld.table.effects import Effects, Outgoing
    from wheeld.table.pipeline import TablePipeline


@dataclass(frozen=True, slots=True)
class Parts:
    """The daemon's parts a job (or ``JournalFault``) may use: each takes what it needs."""

    config: Config
    log: Any
    scheduler: Scheduler
    journal: Journal
    pipeline: TablePipeline
    publisher: Publisher
    notifier: Notifier
    condition: TableCondition
    signer: Signer | None
    #: Applies a pipeline's effects: journal, then publish (``EffectsApplier.apply``).
    apply: Callable[[Effects], None]
    #: Queues a message in the outbox, or says it outside it when the journal cannot write.
    enqueue: Callable[[Outgoing], None]
    #: Derives what kept games lead to, if it waits, before the pipeline is read or
    #: told anything (``EffectsApplier.settle``).
    settle: Callable[[], None] = lambda: None
    #: Runs pipeline work as the table's inputs are run (``TableInputs.guarded_call``):
    #: not once the table broke, and a raise breaks it (the daemon stops, status 1).
    guard: Callable[[Callable[[], None]], None] = lambda action: action()


class Job:
    """A periodic job: ``tick`` every ``period_s()``, and hooks that default to nothing."""

    #: The job's name, for the scheduler and the logs.
    name: ClassVar[str]

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def period_s(self) -> float | None:
        """How often ``tick`` runs; None: never (a job that only listens, or is off)."""
        return None

    def tick(self, now: float) -> None:
        """The period has come round: ``now`` is the host time."""

    def running(self) -> None:
        """The daemon runs (its timers are set); nothing is decided yet."""

    def started(self, now: float) -> None:
        """The table has begun deciding (after the broker's memory was read)."""

    def decided(self) -> None:
        """Decisions were just committed; a JournalWriteError here is the journal's fault."""

    def applied(self) -> None:
        """Effects that carried messages were just applied (journal, wheel, logs): what
        changes the wheel's identity always does (its ``<base>/wheel``)."""

    async def stopping(self) -> None:
        """The daemon stops: last work before the journal closes (bounded)."""
