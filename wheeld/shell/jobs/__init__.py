"""The daemon's periodic jobs, one module each, registered in ``JOBS`` (as
zigbee2mqtt's extensions are): ``<base>/health``, ``<base>/info``, the
retained wheel state, the systemd STATUS line, the statistics kept, journal
retention, the chains' checkpoint, the write-ahead log's checkpoint and the
systemd watchdog.

A job owns its period and its topic; the ``Scheduler`` drives it and hands it
the host time. A new periodic job is one new module with a ``Job`` subclass,
one line in ``JOBS``, and its test.
"""

from __future__ import annotations

from typing import TypeVar

from wheeld.shell.jobs.base import Job, Parts
from wheeld.shell.jobs.checkpoint import CheckpointJob
from wheeld.shell.jobs.health import HealthJob
from wheeld.shell.jobs.info import InfoJob
from wheeld.shell.jobs.retention import RetentionJob
from wheeld.shell.jobs.statistics import StatisticsJob
from wheeld.shell.jobs.status_line import StatusLineJob
from wheeld.shell.jobs.wal import WalCheckpointJob
from wheeld.shell.jobs.watchdog import WatchdogJob
from wheeld.shell.jobs.wheel import WheelStateJob

__all__ = ["JOBS", "Job", "Jobs", "Parts"]

#: Every periodic job, in the order their hooks are called.
JOBS: tuple[type[Job], ...] = (
    HealthJob,
    InfoJob,
    WheelStateJob,
    StatusLineJob,
    StatisticsJob,
    RetentionJob,
    CheckpointJob,
    WalCheckpointJob,
    WatchdogJob,
)


J = TypeVar("J", bound=Job)


class Jobs:
    """The jobs of one daemon: their timers set, their hooks called."""

    def __init__(self, parts: Parts, registered: tuple[type[Job], ...] = JOBS) -> None:
        self.all = [job(parts) for job in registered]
        self._scheduler = parts.scheduler
        # Only the jobs that listen: applying effects is the hot path.
        self._decided = [job.decided for job in self.all if _overrides(job, "decided")]
        self._applied = [job.applied for job in self.all if _overrides(job, "applied")]

    def get(self, kind: type[J]) -> J:
        """The job of that kind (the daemon asks for the statistics' at stop, say)."""
        for job in self.all:
            if isinstance(job, kind):
                return job
        raise LookupError(kind.__name__)

    def start(self) -> None:
        """Every job that has a period, every period, from one period from now."""
        for job in self.all:
            job.running()
            period = job.period_s()
            if period is not None:
                self._scheduler.every(period, job.tick, job.name)

    def started(self, now: float) -> None:
        """The table has begun deciding."""
        for job in self.all:
            job.started(now)

    def decided(self) -> None:
        """Decisions were committed to the journal (raises JournalWriteError)."""
        for hook in self._decided:
            hook()

    def applied(self) -> None:
        """A pipeline's effects that carried messages have been applied."""
        for hook in self._applied:
            hook()

    async def stopping(self) -> None:
        """The daemon stops: each job's last word, before the journal closes."""
        for job in self.all:
            await job.stopping()


def _overrides(job: Job, hook: str) -> bool:
    return getattr(type(job), hook) is not getattr(Job, hook)
