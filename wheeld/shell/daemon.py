"""``wheeld run``: the daemon's life cycle — build, start, run, stop — and nothing else.

link → pipeline → journal → publisher. The pipeline (``wheeld.table.pipeline``)
decides everything; the shell's units move bytes and effects: ``inputs.py``
hands the world's news to the pipeline, ``applier.py`` journals its effects
(durably) before the publisher may send them, ``command_desk.py`` rates and
carries out operator commands, ``journal_fault.py`` says when the journal
cannot write, and the periodic jobs (``jobs/``) publish health, info and the
wheel state and keep the journal. Every timer is on one ``Scheduler``, and
every callback is handed one clock (``HostClock``, which notices a stepped
wall clock). This module builds them, starts them in order, handles the
signals and stops them in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld import logs
from wheeld.config import Config, driver_settings
from wheeld.core.health import Readings
from wheeld.core.signing import Signer, SigningError
from wheeld.core.stats import Statistics
from wheeld.drivers import driver_named
from wheeld.shell import identity
from wheeld.shell.applier import EffectsApplier
from wheeld.shell.broker_memory import BrokerMemory, read_broker_memory
from wheeld.shell.capture_writer import CaptureWriter
from wheeld.shell.clock import HostClock
from wheeld.shell.command_desk import CommandDesk
from wheeld.shell.command_rate import CommandGate
from wheeld.shell.condition import TableCondition
from wheeld.shell.inputs import TableInputs
from wheeld.shell.jobs import Jobs, Parts
from wheeld.shell.jobs.statistics import STATISTICS_EVERY
from wheeld.shell.journal import JOURNAL_FILE, Journal, JournalError, JournalWriteError
from wheeld.shell.journal_fault import JournalFault
from wheeld.shell.link import LinkOpenError, WheelLink
from wheeld.shell.notify import Notifier
from wheeld.shell.presence import RivalDaemon, rival_error
from wheeld.shell.publisher import Publisher
from wheeld.shell.readiness import KEY_NOT_SET
from wheeld.shell.recall_desk import RecallDesk
from wheeld.shell.scheduler import Scheduler
from wheeld.shell.stop import stop_tasks
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings

if TYPE_CHECKING:
    from wheeld.shell.metrics import MetricsEndpoint, TableMetrics

#: On a failed start, how long the start-up check may still take to end cleanly.
PREFLIGHT_PATIENCE_S = 7.0
#: A shell task that failed is started again after this long.
RESTART_AFTER_S = 1.0
#: At a stop, how long the publisher's task may take to end once cancelled.
PUBLISHER_PATIENCE_S = 5.0


def load_signer(config: Config) -> Signer | None:
    """The table's signing key, or None when ``signing.required = false`` and none is set.

    Raises SigningError with one line naming ``signing.key_file``; the key itself
    is never in a message.
    """
    signing = config.signing
    if signing.key_file is None:
        if signing.required:
            raise SigningError(KEY_NOT_SET)
        return None
    try:
        return Signer.from_file(signing.key_file)
    except SigningError as exc:
        raise SigningError(f"signing.key_file: {exc}") from None


def build_pipeline(
    config: Config,
    journal: Journal,
    signer: Signer | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> TablePipeline:
    """The table's pipeline, resumed from what the journal keeps (the chain included)."""
    driver = driver_named(config.wheel.driver)
    section = driver_settings(config)
    decoder = driver.new_decoder(section)
    session = None
    if driver.session is not None:
        session = driver.session(decoder, section)
    settings = TableSettings(
        table=config.table.id,
        base_topic=config.base_topic,
        driver=config.wheel.driver,
        port=config.wheel.port,
        pockets=config.wheel.pockets,
        pocket_order=config.wheel.order,
        history_length=config.mqtt.history_length,
        rules=config.rules,
        epoch=journal.epoch,
        after_commit=True,
        alerts=config.alerts,
    )
    return TablePipeline(
        settings,
        decoder,
        session,
        state=journal.load_state(),
        history=journal.history(config.mqtt.history_length),
        table_state=journal.table_state(),
        signer=signer,
        chain=journal.load_chain(),
        statistics=resume_statistics(config, journal, on_progress),
        set_alerts=journal.set_alerts(),
        taken_from=journal.taken_from(),
    )


def resume_statistics(
    config: Config, journal: Journal, on_progress: Callable[[str], None] | None = None
) -> Statistics:
    """The statistics as the journal left them: its snapshot and the decisions after it.

    Without a snapshot it can use (an older wheeld's journal, another wheel,
    other arcs) they are counted once from every decision kept, and kept.
    """
    snapshot, after = journal.statistics()
    arcs = config.alerts.sector_arcs
    statistics = None
    if snapshot is not None:
        try:
            statistics = Statistics.restore(
                snapshot, pockets=config.wheel.pockets, arcs=arcs, order=config.wheel.order
            )
        except ValueError:
            statistics = None
    counted = 0
    if statistics is None:
        pockets, order = config.wheel.pockets or 37, config.wheel.order
        statistics, after = Statistics(pockets, arcs=arcs, order=order), 0
        if (
            config.wheel.pockets is None
            and order is None
            and any('"00"' in payload for _, _, payload in journal.decisions_after(0))
        ):
            statistics = Statistics(38, arcs=arcs)
    for counted, payload in enumerate(_payloads(journal.decisions_after(after)), 1):
        statistics.add(payload)
        if on_progress is not None and counted % 1000 == 0:
            on_progress(f"counting the statistics: {counted} decisions")
    if counted > STATISTICS_EVERY:
        # Counted from afar (an older journal, other arcs): kept now, not counted again.
        journal.save_statistics(statistics.snapshot(), journal.last_decision_id())
    return statistics


def _payloads(decisions: Iterator[tuple[int, str, str]]) -> Iterator[dict[str, Any]]:
    """The journal's game payloads, for the statistics to be rebuilt from."""
    for _, _, payload in decisions:
        with contextlib.suppress(ValueError):
            value = json.loads(payload)
            if isinstance(value, dict):
                yield value


def _metrics(
    config: Config,
    pipeline: TablePipeline,
    readings: Callable[[], Readings],
    log: Any,
    scheduler: Scheduler,
) -> tuple[TableMetrics | None, MetricsEndpoint | None]:
    """``[metrics] listen``'s endpoint; prometheus_client is imported only when one is asked for."""
    if not config.metrics.listen:
        return None, None
    from wheeld.shell.metrics import MetricsEndpoint, TableMetrics

    metrics = TableMetrics(
        pipeline,
        readings,
        info={
            "version": identity.software_version(),
            "table": config.table.id,
            "driver": config.wheel.driver,
        },
    )
    endpoint = MetricsEndpoint(config.metrics.listen, metrics, log=log, scheduler=scheduler)
    return metrics, endpoint


class Daemon:
    """One wheel, one table: runs until SIGTERM or SIGINT."""

    def __init__(
        self,
        config: Config,
        *,
        capture: Path | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.notifier = notifier = notifier or Notifier()
        self.log = log = logs.get().bind(table=config.table.id)
        # The key first: without one (when required) nothing else is touched.
        self.signer = signer = load_signer(config)
        if signer is None:
            log.warning("signing.required = false and no signing.key_file: messages unsigned")
        self.clock = clock = HostClock()
        self.journal = journal = Journal(
            config.state.dir / JOURNAL_FILE, clock=clock.wall, on_progress=notifier.starting
        )
        try:
            journal.claim_table(config.table.id)
        except JournalError:
            journal.close()
            raise
        self.pipeline = pipeline = build_pipeline(config, journal, signer, notifier.starting)
        self.capture = CaptureWriter(capture, config.wheel.driver) if capture is not None else None
        self.scheduler = scheduler = Scheduler(clock)
        link_timeout_s = config.rules.link_timeout_ms / 1000
        # Callbacks late-bound (the lambdas): what they feed is built below, from these.
        self.link = WheelLink(
            config.wheel.port,
            config.wheel.baudrate or driver_named(config.wheel.driver).default_baudrate,
            on_data=lambda data, now: self.inputs.on_data(data, now),  # noqa: PLW0108
            on_up=lambda: self.inputs.on_link_up(),  # noqa: PLW0108
            on_down=lambda why: self.inputs.on_link_down(why),  # noqa: PLW0108
            silence_s=max(5.0, 3 * link_timeout_s),
            capture=self.capture,
            usb_reset=config.wheel.usb_reset,
            scheduler=scheduler,
            log=log,
        )
        self.metrics, self._scrapes = _metrics(config, pipeline, self.readings, log, scheduler)
        publisher_hooks: dict[str, Any] = {}
        if self.metrics is not None:
            publisher_hooks["on_acknowledged"] = self.metrics.acknowledged
        self.publisher = publisher = Publisher(
            config,
            journal,
            on_command=lambda command: self.commands(command),  # noqa: PLW0108
            log=log,
            instance=f"{socket.gethostname()}:{config.state.dir.resolve()}",
            on_retained_result=lambda name, payload: (  # noqa: PLW0108
                self.inputs.on_retained_result(name, payload)
            ),
            on_rival=self._stand_down,
            alarm_message=pipeline.unjournaled_alarm,
            clock=clock,
            **publisher_hooks,
        )
        self.condition = condition = TableCondition(
            config, clock, pipeline, journal, self.link, publisher
        )
        # What the units share; applying effects is late-bound (the applier is built
        # below, told of the journal's faults).
        parts = Parts(
            config=config,
            log=log,
            scheduler=scheduler,
            journal=journal,
            pipeline=pipeline,
            publisher=publisher,
            notifier=notifier,
            condition=condition,
            signer=signer,
            apply=lambda effects: self.effects.apply(effects),  # noqa: PLW0108
            enqueue=lambda message: self.effects.enqueue_best_effort(message),  # noqa: PLW0108
            settle=lambda: self.effects.settle(),  # noqa: PLW0108
            guard=lambda action: self.inputs.guarded_call(action),  # noqa: PLW0108
        )
        self.journal_fault = JournalFault(parts)
        self.effects = effects = EffectsApplier(
            base_topic=config.base_topic,
            log=log,
            scheduler=scheduler,
            journal=journal,
            pipeline=pipeline,
            link=self.link,
            publisher=publisher,
            metrics=self.metrics,
            on_journal_failed=self.journal_fault.failed,
        )
        apply = effects.apply
        self.inputs = TableInputs(
            clock=clock,
            pipeline=pipeline,
            condition=condition,
            notifier=notifier,
            capture=self.capture,
            apply=apply,
            settle=effects.settle,
            stop=self.stop,
            log=log,
        )
        self.rate = CommandGate(log=log, scheduler=scheduler, apply=apply)
        effects.guard = self.inputs.guarded_call
        self.commands = CommandDesk(
            log=log,
            clock=clock,
            inputs=self.inputs,
            gate=self.rate,
            recalls=RecallDesk(log=log, journal_path=journal.path, apply=apply),
        )
        self.jobs = effects.jobs = Jobs(parts)
        self._stop = asyncio.Event()
        #: Another wheeld found online for the table at start: why this one stops.
        self._rival: RivalDaemon | None = None

    def readings(self) -> Readings:
        """The table's condition and figures now: for ``<base>/health`` and the metrics."""
        return self.condition.readings()

    # -- life cycle ----------------------------------------------------------

    async def run(self) -> int:
        config = self.config
        # A worker thread (retention, a checkpoint) gives the loop the GIL in 1 ms, not 5.
        sys.setswitchinterval(0.001)
        if self._scrapes is not None:
            # First: a port in use is a configuration problem, said before the broker is asked.
            try:
                await self._scrapes.start()
            except OSError:
                self.journal.close()
                raise
        # One line, never a traceback, for what a callback of the loop's raises (paho's
        # socket callbacks after a connection died under a paused VM, say).
        asyncio.get_running_loop().set_exception_handler(self._loop_exception)
        # Asked of the broker while the wheel is opened, not before. Until the answer
        # is in (PREFLIGHT_TOTAL_S at most), nothing is decided (what the wheel says is
        # held, in order) and READY is not sent: the broker's memory of the table's
        # game ids and seqs, and whether another wheeld runs it, come first.
        preflight = asyncio.create_task(
            read_broker_memory(config, self.publisher.instance, self.log), name="preflight"
        )
        try:
            await self.link.open()
        except LinkOpenError as exc:
            if not config.wheel.wait_for_device:
                await _cancelled(preflight)
                raise
            self.log.warning("wheel port unavailable, waiting for it", error=str(exc))
            now = self.clock.now()
            self.effects.apply(Effects(messages=[self.pipeline.wheel_message(now)]))
        except BaseException:
            await _cancelled(preflight)
            raise

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        tasks = [
            asyncio.create_task(self._supervise("link", self.link.run), name="link"),
            asyncio.create_task(self._start_after(preflight), name="publisher"),
        ]
        self.condition.publisher_task = tasks[1]
        self.jobs.start()
        stopper = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = False
        for task in done:
            if task is not stopper and task.exception() is not None:
                failed = True
                self.log.error("task failed", task=task.get_name(), error=repr(task.exception()))
        self.notifier.stopping()
        self.log.info("wheeld stopping")
        self.rate.stopping(self.clock.now())  # what was refused, before the journal closes
        self.effects.settle()  # the last games' history and statistics, before the timers go
        self.scheduler.close()
        link_task, publisher_task = tasks
        await self._stop_tasks(link_task, publisher_task, stopper, preflight)
        await self.jobs.stopping()  # a checkpoint's connection, before ours closes
        with contextlib.suppress(JournalWriteError):
            self.effects.batches.flush()  # the last lines heard, before the journal closes
        said = functools.partial(self.log.error, "journal lost")  # deleted under the daemon
        self.journal.close(tell=lambda line: said(outcome=line), working=self.notifier.starting)
        self.notifier.close()
        if self._rival is not None:
            raise self._rival
        # A failed task or input stopped it: not a clean stop, so systemd restarts it.
        return 1 if failed or self.inputs.broken_by is not None else 0

    async def _stop_tasks(
        self,
        link_task: asyncio.Task[None],
        publisher_task: asyncio.Task[None],
        stopper: asyncio.Task[Any],
        preflight: asyncio.Task[BrokerMemory],
    ) -> None:
        """The link first (so the port is not reopened behind our back), then the rest."""
        stopper.cancel()
        link_task.cancel()
        await asyncio.gather(link_task, stopper, return_exceptions=True)
        self.link.close()
        if self._scrapes is not None:
            await self._scrapes.close()
        await self.publisher.stop()
        # Bounded: a task that swallowed every cancellation must not keep the daemon up.
        await stop_tasks(publisher_task, patience_s=PUBLISHER_PATIENCE_S)
        await _cancelled(preflight)
        self.commands.close()  # the recall process
        if self.capture is not None:
            self.capture.close()
            if self.capture.cut_lines or self.capture.dropped_bytes:
                self.log.warning(
                    "capture: over-long lines cut, or a crashed run's last line dropped",
                    cut_lines=self.capture.cut_lines,
                    dropped_bytes=self.capture.dropped_bytes,
                )

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        self.log.warning(
            "event loop callback failed",
            message=str(context.get("message", "")),
            error=f"{type(error).__name__}: {error}" if error is not None else None,
        )

    async def _start_after(self, preflight: asyncio.Task[BrokerMemory]) -> None:
        """Once the broker has said what it remembers: stop if another wheeld runs the
        table (connecting with our client id would take its session over: exit 78);
        else go on past its game ids and seqs, start deciding (what the wheel said
        meanwhile first), and publish."""
        try:
            # Shielded: stopping cancels this task, not the check, which run() lets end.
            memory = await asyncio.shield(preflight)
        except Exception as exc:  # no evidence either way: start, and watch at run time
            self.log.warning("start-up check failed", error=repr(exc))
            memory = BrokerMemory()
        if memory.rival is not None:
            self._rival = rival_error(self.config, memory.rival)
            self._stop.set()
            return
        # Ready only now: a second daemon for a running table never says it is.
        self.notifier.ready(self.condition.status_line())
        self.log.info(
            "wheeld ready",
            base_topic=self.config.base_topic,
            port=self.config.wheel.port,
            driver=self.config.wheel.driver,
        )
        now = self.clock.now()
        self.inputs.guarded_call(lambda: self.effects.apply_start(self._started(memory, now)))
        self.jobs.started(now)
        self.inputs.release()
        await self._supervise("publisher", self.publisher.run)

    def _started(self, memory: BrokerMemory, now: float) -> Effects:
        """What the pipeline makes of the broker's memory, of starting, and of the journal's
        own problems found on opening it."""
        pipeline, journal = self.pipeline, self.journal
        started = Effects()
        if memory.sequence is not None:
            started.extend(pipeline.on_broker_sequence(memory.sequence, now, memory.history))
        if memory.result is not None:
            started.extend(pipeline.on_broker_result(memory.result, now))
        started.extend(pipeline.start(now))
        for warning in journal.warnings:
            started.extend(pipeline.alarm(now, "journal_lost", problem=warning))
        if journal.chain_problem is not None:
            # Never repaired: the journal goes on in a new, anchored segment.
            started.extend(
                pipeline.alarm(
                    now,
                    "journal_chain_broken",
                    severity="critical",
                    problem=journal.chain_problem,
                )
            )
        return started

    def _stand_down(self, other: str) -> None:
        """Another wheeld runs the table: stop deciding and publishing (exit 78)."""
        if self._rival is None:
            self._rival = rival_error(self.config, other)
            self._stop.set()

    async def _supervise(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run a shell task forever; restart it after an unexpected failure."""
        while True:
            try:
                await run()
            except Exception as exc:  # a bug must cost a restart of the task, not the game
                self.log.exception("task failed, restarting it", task=name, error=repr(exc))
                await self.scheduler.sleep(RESTART_AFTER_S, f"restart {name}")

    def stop(self) -> None:
        """Ask the daemon to stop (what SIGTERM does)."""
        self._stop.set()


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Let ``task`` end before the loop does, cancelling it only if it takes long.

    The start-up check's MQTT client, cancelled while connecting, would be
    collected after the loop closed and print paho's traceback on the way out;
    left to finish (seconds at most), it closes cleanly.
    """
    await asyncio.wait([task], timeout=PREFLIGHT_PATIENCE_S)
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
