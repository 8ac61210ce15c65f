"""The daemon's periodic jobs, each alone: its period, its topic, what it does when
its time comes, and the table that registers them all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.shell_fakes import RecordingLog
from wheeld.config import Config
from wheeld.core.health import Condition, Readings
from wheeld.shell import identity
from wheeld.shell.jobs import JOBS, Job, Jobs, Parts
from wheeld.shell.jobs.checkpoint import CHECKPOINT_EVERY_S, CheckpointJob
from wheeld.shell.jobs.health import HEALTH_CHECK_S, HealthJob
from wheeld.shell.jobs.info import InfoJob
from wheeld.shell.jobs.retention import RETENTION_EVERY_S, RETENTION_PAUSE_S, RetentionJob
from wheeld.shell.jobs.statistics import STATISTICS_EVERY, StatisticsJob
from wheeld.shell.jobs.status_line import STATUS_CHECK_S, StatusLineJob
from wheeld.shell.jobs.wal import WalCheckpointJob
from wheeld.shell.jobs.watchdog import WatchdogJob
from wheeld.shell.jobs.wheel import WHEEL_STATE_EVERY_S, WheelStateJob
from wheeld.shell.journal import JournalWriteError
from wheeld.table.effects import Effects, Outgoing


class _Scheduler:
    """Records what is asked of it; the tests call the callbacks themselves."""

    def __init__(self) -> None:
        self.every_calls: list[tuple[str, float]] = []
        self.after_calls: list[tuple[str, float, Any]] = []
        self.clock = SimpleNamespace(now=lambda: 1000.0, wall=lambda: 1000.0, monotonic=lambda: 5.0)

    def every(self, period_s: float, callback: Any, name: str = "") -> None:
        self.every_calls.append((name, period_s))

    def after(self, delay_s: float, callback: Any, name: str = "") -> Any:
        self.after_calls.append((name, delay_s, callback))
        return SimpleNamespace(cancel=lambda: None)


def _parts(**overrides: Any) -> Parts:
    config = SimpleNamespace(
        base_topic="wheeld/T1",
        table=SimpleNamespace(id="T1"),
        metrics=SimpleNamespace(health_interval_s=30.0),
        state=SimpleNamespace(decisions_days=None, frames_days=None, keep_games=None),
    )
    journal = SimpleNamespace(
        statistics=lambda: (None, 0),
        pruner=lambda retention: SimpleNamespace(step=lambda now: 0),
        epoch="e1",
        path="journal.sqlite",
        file=SimpleNamespace(lost=lambda: None),
    )
    pipeline = SimpleNamespace(
        settings=SimpleNamespace(base_topic="wheeld/T1"),
        view=SimpleNamespace(pockets=37, wheel_info={}),
        statistics=None,
        status_line=lambda: "idle",
    )
    values: dict[str, Any] = {
        "config": config,
        "log": RecordingLog(),
        "scheduler": _Scheduler(),
        "journal": journal,
        "pipeline": pipeline,
        "publisher": SimpleNamespace(connected=True, published=[]),
        "notifier": SimpleNamespace(watchdog_interval=None, statuses=[], pings=[]),
        "condition": SimpleNamespace(status_line=lambda: "idle; broker unreachable"),
        "signer": None,
        "apply": lambda effects: None,
        "enqueue": lambda message: None,
    }
    values.update(overrides)
    return Parts(**values)


def test_every_job_is_registered_once_by_a_name_of_its_own() -> None:
    names = [job.name for job in JOBS]
    assert len(set(names)) == len(names) == len(JOBS)
    assert set(names) >= {"health", "info", "wheel", "statistics", "retention", "checkpoint"}
    assert all(issubclass(job, Job) for job in JOBS)


def test_the_jobs_with_a_period_get_a_timer_of_that_period() -> None:
    parts = _parts(
        journal=SimpleNamespace(
            statistics=lambda: (None, 0),
            pruner=lambda retention: None,
            checkpoint_elsewhere=lambda: None,
            epoch="e1",
        )
    )
    Jobs(parts).start()
    every = dict(cast(_Scheduler, parts.scheduler).every_calls)
    assert every["health"] == HEALTH_CHECK_S
    assert every["wheel"] == WHEEL_STATE_EVERY_S
    assert every["status line"] == STATUS_CHECK_S
    assert every["retention"] == RETENTION_EVERY_S
    assert every["checkpoint"] == CHECKPOINT_EVERY_S
    assert "info" not in every, "info is said when the wheel's hello changes, not by the clock"
    assert "watchdog" not in every, "no watchdog asked for by systemd: none pinged"


def test_a_job_is_found_by_its_kind() -> None:
    jobs = Jobs(_parts())
    assert isinstance(jobs.get(StatisticsJob), StatisticsJob)


def _readings(link: str = "up") -> Readings:
    return Readings(
        condition=Condition(link, "connected", ()),  # type: ignore[arg-type]
        outbox=0,
        journal_bytes=4096,
        last_frame_age_s=0.5,
    )


def test_health_is_said_on_a_change_and_as_the_heartbeat_never_while_disconnected() -> None:
    published: list[Outgoing] = []
    state = {"link": "up"}
    condition = SimpleNamespace(
        condition=lambda now: _readings(state["link"]).condition,
        readings=lambda: _readings(state["link"]),
    )
    publisher = SimpleNamespace(connected=True, publish_unjournaled=published.append)
    job = HealthJob(_parts(publisher=publisher, condition=condition))
    assert job.period_s() == HEALTH_CHECK_S
    job.tick(1000.0)
    job.tick(1001.0)  # nothing new, the heartbeat not due
    assert [m.topic for m in published] == ["wheeld/T1/health"]
    assert published[0].retain and json.loads(published[0].payload)["state"] == "ok"
    state["link"] = "silent"
    job.tick(1002.0)
    assert len(published) == 2
    publisher.connected = False
    job.tick(1003.0)
    assert len(published) == 2
    publisher.connected = True  # back: said again, the broker may have forgotten it
    job.tick(1004.0)
    assert len(published) == 3


def test_info_is_said_first_and_again_only_when_the_wheel_says_something_new() -> None:
    queued: list[Outgoing] = []
    parts = _parts(enqueue=queued.append, config=Config())
    job = InfoJob(parts)
    job.applied()
    job.applied()
    assert [m.topic for m in queued] == ["wheeld/T1/info"]
    assert queued[0].retain and json.loads(queued[0].payload)["ts"]
    cast(Any, parts.pipeline).view.wheel_info = {"model": "Mk2", "firmware": "1.2", "serial": "7"}
    job.applied()
    assert len(queued) == 2
    assert json.loads(queued[1].payload)["wheel"]["model"] == "Mk2"


def test_info_reads_the_package_at_its_first_message_not_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the package's files (its digest, the drivers') is no part of start → READY:
    the job is built before READY, its first message is applied after it."""
    read: list[str] = []

    def digest(root: Path | None = None) -> str:
        read.append("sha")
        return "0"

    def drivers() -> tuple[()]:
        read.append("drivers")
        return ()

    monkeypatch.setattr(identity, "package_digest", digest)
    monkeypatch.setattr(identity, "installed_drivers", drivers)
    queued: list[Outgoing] = []
    job = InfoJob(_parts(enqueue=queued.append, config=Config()))
    assert read == []
    job.applied()
    assert sorted(read) == ["drivers", "sha"]
    assert json.loads(queued[0].payload)["software"]["sha256"] == "0"


def test_the_wheel_state_is_refreshed_with_the_status_line() -> None:
    applied: list[Effects] = []
    statuses: list[str] = []
    message = Outgoing("wheeld/T1/wheel", "{}", retain=True)
    pipeline = SimpleNamespace(wheel_message=lambda now: message)
    notifier = SimpleNamespace(status=statuses.append)
    job = WheelStateJob(_parts(apply=applied.append, pipeline=pipeline, notifier=notifier))
    job.tick(1000.0)
    assert applied[0].messages == [message]
    assert statuses == ["idle; broker unreachable"]


def test_the_status_line_is_said_again_when_what_it_says_of_the_broker_changes() -> None:
    """Found by a benchmark: STATUS said "broker unreachable" from READY until the wheel
    state's next minute, the broker long since reached."""
    statuses: list[str] = []
    broker: list[str] = ["no broker reached since start"]
    condition = SimpleNamespace(
        broker_words=lambda: list(broker), status_line=lambda: "; ".join(["idle", *broker])
    )
    notifier = SimpleNamespace(readied=False, said_status=None)

    def status(line: str) -> None:
        statuses.append(line)
        notifier.said_status = line

    notifier.status = status
    job = StatusLineJob(_parts(condition=condition, notifier=notifier))
    job.tick(999.0)  # before READY: the start says its own
    notifier.readied, notifier.said_status = True, "idle; no broker reached since start"
    job.tick(1000.0)  # READY's line says it already
    job.tick(1001.0)  # nothing new: nothing said
    broker.clear()  # reached
    job.tick(1002.0)
    job.tick(1003.0)
    broker.append("broker unreachable")
    job.tick(1004.0)
    assert statuses == ["idle", "idle; broker unreachable"]


class _Journal:
    def __init__(self, last: int = 0, kept: int = 0) -> None:
        self.last, self.kept, self.saved = last, kept, list[int]()
        self.fail = False

    def statistics(self) -> tuple[None, int]:
        return None, self.kept

    def last_decision_id(self) -> int:
        return self.last

    def save_statistics(self, snapshot: Any, last: int) -> None:
        if self.fail:
            raise JournalWriteError("disk full")
        self.saved.append(last)


async def test_the_statistics_are_kept_every_so_many_decisions_and_at_a_stop() -> None:
    journal = _Journal()
    pipeline = SimpleNamespace(statistics=SimpleNamespace(snapshot=lambda: {}))
    parts = _parts(journal=journal, pipeline=pipeline)
    job = StatisticsJob(parts)
    journal.last = STATISTICS_EVERY - 1
    job.decided()
    assert journal.saved == []
    journal.last = STATISTICS_EVERY
    job.decided()
    assert journal.saved == [STATISTICS_EVERY]
    journal.last += 3
    journal.fail = True
    job.tick(1000.0)
    assert cast(RecordingLog, parts.log).lines[-1][:2] == (
        "warning",
        "journal checkpoint postponed",
    )
    await job.stopping()  # a failure at a stop is nothing: counted again at the next start
    journal.fail = False
    await job.stopping()
    assert journal.saved == [STATISTICS_EVERY, STATISTICS_EVERY + 3]
    with pytest.raises(JournalWriteError):
        journal.fail = True
        journal.last += 1
        job.keep()


async def _batch_done(job: RetentionJob) -> None:
    batch = job._batch
    assert batch is not None
    await asyncio.wait_for(batch, timeout=10)


async def test_retention_goes_a_batch_at_a_time_and_says_the_total() -> None:
    batches = [3, 2, 0]
    closed: list[bool] = []
    pruner = SimpleNamespace(
        find=lambda now: batches.pop(0),
        delete=lambda batch: batch,
        close=lambda: closed.append(True),
    )
    journal = SimpleNamespace(pruner=lambda retention: pruner)
    parts = _parts(journal=journal)
    job = RetentionJob(parts)
    job.started(1000.0)
    await _batch_done(job)
    scheduler = cast(_Scheduler, parts.scheduler)
    assert [(name, delay) for name, delay, _ in scheduler.after_calls] == [
        ("retention batch", RETENTION_PAUSE_S)
    ]
    scheduler.after_calls[-1][2](1000.1)
    await _batch_done(job)
    scheduler.after_calls[-1][2](1000.2)
    await _batch_done(job)
    assert len(scheduler.after_calls) == 2, "the last, empty batch sets no next"
    assert cast(RecordingLog, parts.log).lines == [
        ("info", "journal retention", {"deleted_rows": 5})
    ]
    await job.stopping()
    assert closed == [True]


async def test_a_retention_batch_runs_off_the_loop_and_a_stop_waits_for_it() -> None:
    """The loop goes on while a batch is found (in a worker thread); a tick meanwhile starts
    no second one; a stop lets it end, sets no next, then closes the pruner's connection."""
    import threading

    running, release = threading.Event(), threading.Event()
    steps: list[str] = []
    closed: list[bool] = []

    deleted: list[str] = []

    def find(now: float) -> int:
        steps.append(threading.current_thread().name)
        running.set()
        release.wait(10)
        return 7

    def delete(batch: int) -> int:
        deleted.append(threading.current_thread().name)
        return batch

    pruner = SimpleNamespace(find=find, delete=delete, close=lambda: closed.append(True))
    parts = _parts(journal=SimpleNamespace(pruner=lambda retention: pruner))
    job = RetentionJob(parts)
    job.tick(1000.0)
    assert await asyncio.to_thread(running.wait, 10)
    ticks = 0
    for _ in range(5):  # the loop turns while the batch holds its thread
        await asyncio.sleep(0)
        ticks += 1
    job.tick(1000.5)  # the hour came round meanwhile: no second batch at once
    stopping = asyncio.get_running_loop().create_task(job.stopping())
    await asyncio.sleep(0.05)
    assert not stopping.done() and closed == [], "the stop waits for the batch"
    release.set()
    await asyncio.wait_for(stopping, timeout=10)
    assert ticks == 5 and len(steps) == 1 and steps[0] != threading.current_thread().name
    assert deleted == [], "found before the stop: deleted at the next start"
    assert cast(_Scheduler, parts.scheduler).after_calls == [], "no batch after a stop"
    assert closed == [True]


async def test_retention_and_the_checkpoint_are_postponed_when_the_journal_cannot_write() -> None:
    def fail(*args: Any) -> Any:
        raise JournalWriteError("disk full")

    journal = SimpleNamespace(pruner=lambda retention: SimpleNamespace(find=fail), checkpoint=fail)
    parts = _parts(journal=journal)
    job = RetentionJob(parts)
    job.tick(1000.0)
    await _batch_done(job)
    CheckpointJob(parts).tick(1000.0)
    assert [line[1] for line in cast(RecordingLog, parts.log).lines] == [
        "journal retention postponed",
        "journal checkpoint postponed",
    ]


async def test_the_write_ahead_log_is_checkpointed_one_at_a_time_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wheeld.shell.jobs import wal

    release, begun = asyncio.Event(), asyncio.Event()
    started: list[str] = []
    elsewhere: list[bool] = []

    async def checkpoint(self: WalCheckpointJob) -> None:
        started.append("checkpoint")
        begun.set()
        await release.wait()

    monkeypatch.setattr(wal.WalCheckpointJob, "_checkpoint", checkpoint)
    journal = SimpleNamespace(
        checkpoint_elsewhere=lambda: elsewhere.append(True), file=SimpleNamespace(lost=lambda: None)
    )
    job = WalCheckpointJob(_parts(journal=journal))
    job.running()
    assert elsewhere == [True], "commits on the loop never checkpoint"
    job.tick(1000.0)
    job.tick(1030.0)  # the first still at it: no second
    await asyncio.wait_for(begun.wait(), timeout=10)
    release.set()
    await asyncio.wait_for(job.stopping(), timeout=10)
    assert started == ["checkpoint"]


async def test_a_checkpoint_under_a_file_size_limit_says_the_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found under `ulimit -f`: `journal checkpoint failed` said only
    `OperationalError('disk I/O error')`."""
    import sqlite3

    from wheeld.shell.journal import errors

    def refused() -> int:
        error = sqlite3.OperationalError("disk I/O error")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR_WRITE
        raise error

    monkeypatch.setattr(errors, "file_size_limit", lambda: "no file past 300 KiB (ulimit -f)")
    journal = SimpleNamespace(
        path=tmp_path / "journal.sqlite3",
        file=SimpleNamespace(lost=lambda: None),
        checkpoint_log=refused,
    )
    parts = _parts(journal=journal)
    job = WalCheckpointJob(parts)
    job.tick(1000.0)
    await asyncio.wait_for(job.stopping(), timeout=10)
    ((level, event, fields),) = cast(RecordingLog, parts.log).lines
    assert (level, event) == ("warning", "journal checkpoint failed")
    assert fields["error"].startswith("no file past 300 KiB (ulimit -f): journal.sqlite3 or")


def test_the_watchdog_is_pinged_only_while_healthy_and_only_when_asked_for() -> None:
    pings: list[bool] = []
    notifier = SimpleNamespace(watchdog_interval=None, watchdog=lambda: pings.append(True))
    health = {"ok": True}
    condition = SimpleNamespace(healthy=lambda: health["ok"])
    parts = _parts(notifier=notifier, condition=condition)
    job = WatchdogJob(parts)
    assert job.period_s() is None
    notifier.watchdog_interval = 20.0
    assert job.period_s() == 10.0
    job.tick(1000.0)
    health["ok"] = False
    job.tick(1010.0)
    assert pings == [True]
    assert cast(RecordingLog, parts.log).lines[-1][:2] == (
        "error",
        "unhealthy: withholding watchdog ping",
    )


def test_the_statistics_kept_count_every_game_the_journal_keeps() -> None:
    """A derived step still waiting is run first: the snapshot and its row agree."""
    journal = _Journal()
    order: list[str] = []
    pipeline = SimpleNamespace(statistics=SimpleNamespace(snapshot=lambda: order.append("snap")))
    parts = _parts(journal=journal, pipeline=pipeline, settle=lambda: order.append("settle"))
    journal.last = 5
    StatisticsJob(parts).keep()
    assert order == ["settle", "snap"] and journal.saved == [5]
