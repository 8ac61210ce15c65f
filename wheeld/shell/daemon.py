"""``wheeld run``: the I/O around one table pipeline, and nothing else.

link → pipeline → journal → publisher. The pipeline (``wheeld.table.pipeline``)
decides everything; this module moves bytes and effects: it writes the
pipeline's records to the journal (durably) before the publisher may send
them, writes commands to the wheel, keeps one timer for the pipeline's next
deadline, and speaks to systemd. Timers are set for the moments that matter;
the only repeating ones refresh the retained wheel state, ping the watchdog,
apply journal retention, and try an unwritable journal again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld import logs
from wheeld.config import Config, driver_settings
from wheeld.core.commands import (
    CommandError,
    OperatorCommand,
    Recall,
    claimed_operator,
    named_operator,
    parse,
)
from wheeld.core.health import (
    BROKER_UNREACHABLE,
    Condition,
    Heartbeat,
    LinkState,
    Readings,
    health_payload,
)
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.core.ratelimit import RATE_PER_S, CommandRate, Refusals
from wheeld.core.signing import Signer, SigningError
from wheeld.core.stats import Statistics
from wheeld.drivers import driver_named
from wheeld.shell import identity
from wheeld.shell.journal import (
    JOURNAL_FILE,
    UNHURRIED_EVENTS,
    Journal,
    JournalError,
    JournalView,
    JournalWriteError,
    Retention,
)
from wheeld.shell.journal.recall import recall
from wheeld.shell.journal.store import checkpoint_wal
from wheeld.shell.link import CaptureWriter, LinkOpenError, WheelLink
from wheeld.shell.notify import Notifier
from wheeld.shell.publisher import BrokerMemory, Publisher, RawJSON, RivalDaemon, read_broker_memory
from wheeld.shell.readiness import KEY_NOT_SET
from wheeld.table.effects import CommandRecord, Effects, FrameRecord, Outgoing
from wheeld.table.pipeline import TablePipeline, TableSettings

if TYPE_CHECKING:
    from wheeld.shell.metrics import MetricsEndpoint, TableMetrics

#: How often the retained wheel state (with its counters) is refreshed.
WHEEL_STATE_EVERY_S = 60.0
#: A wall clock that moves this much unlike the monotonic clock has been stepped.
CLOCK_STEP_S = 1.0
#: How often an unwritable journal is tried again.
JOURNAL_RETRY_S = 1.0
#: Lines from the wheel are journaled in batches: with the next decision, at this
#: many, or this long after the first (one SQLite commit a second, not one a frame).
FRAME_BATCH = 64
FRAME_FLUSH_S = 1.0
#: Lines kept while the journal cannot write (the oldest go first).
FRAME_BUFFER_MAX = 10_000
#: How often journal retention ([state] decisions_days, frames_days, keep_games) runs.
RETENTION_EVERY_S = 3600.0
#: Between two retention batches the loop is left this long to the table.
RETENTION_PAUSE_S = 0.05
#: How often the write-ahead log is checkpointed, in a worker thread (never by a commit
#: on the event loop): it stays a few hundred KiB.
WAL_CHECKPOINT_S = 30.0
#: How often the chains' heads become the journal's ``checked`` mark: a start
#: after a crash walks at most this much of them.
CHECKPOINT_EVERY_S = 600.0
#: What a journal another went on past lets go of (``Effects.superseded``).
SUPERSEDED_TOPICS = ("sequence", "game", "result", "history", "stats")
#: Recalls the table answers, every sender together; at most this many read at once.
RECALLS_PER_S = 2.0
RECALL_BURST = 5
RECALLS_AT_ONCE = 2
#: Commands of one kind the table takes, every sender together.
TABLE_RATE_PER_S = 20.0
TABLE_BURST = 60
#: Commands refused over their sender's rate are journaled as a count this often.
RATE_SUMMARY_S = 60.0
#: The statistics' running aggregates are kept every this many decisions (and at
#: a clean stop): a start replays at most that many.
STATISTICS_EVERY = 200
#: How often the health's condition is looked at: a change is published within this.
HEALTH_CHECK_S = 1.0
#: On a failed start, how long the start-up check may still take to end cleanly.
PREFLIGHT_PATIENCE_S = 7.0


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
            statistics = Statistics.restore(snapshot, pockets=config.wheel.pockets, arcs=arcs)
        except ValueError:
            statistics = None
    counted = 0
    if statistics is None:
        statistics, after = Statistics(config.wheel.pockets or 37, arcs=arcs), 0
        if config.wheel.pockets is None and any(
            '"00"' in payload for _, _, payload in journal.decisions_after(0)
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
        self.notifier = notifier or Notifier()
        self.log = logs.get().bind(table=config.table.id)
        # The key first: without one (when required) nothing else is touched.
        signer = load_signer(config)
        self.signer = signer
        if signer is None:
            self.log.warning("signing.required = false and no signing.key_file: messages unsigned")
        self.journal = Journal(config.state.dir / JOURNAL_FILE, on_progress=self.notifier.starting)
        try:
            self.journal.claim_table(config.table.id)
        except JournalError:
            self.journal.close()
            raise
        self.pipeline = build_pipeline(config, self.journal, signer, self.notifier.starting)
        self.capture = CaptureWriter(capture, config.wheel.driver) if capture is not None else None
        self._wall, self._mono = time.time(), time.monotonic()
        link_timeout_s = config.rules.link_timeout_ms / 1000
        self.link = WheelLink(
            config.wheel.port,
            config.wheel.baudrate or driver_named(config.wheel.driver).default_baudrate,
            on_data=self._on_data,
            on_up=self._on_link_up,
            on_down=self._on_link_down,
            silence_s=max(5.0, 3 * link_timeout_s),
            capture=self.capture,
            usb_reset=config.wheel.usb_reset,
            clock=self._now,
            log=self.log,
        )
        # [metrics] listen: prometheus_client is imported only when an endpoint is asked for.
        self.metrics: TableMetrics | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        publisher_hooks: dict[str, Any] = {}
        if config.metrics.listen:
            from wheeld.shell.metrics import MetricsEndpoint, TableMetrics

            self.metrics = TableMetrics(
                self.pipeline,
                self.readings,
                info={
                    "version": identity.software_version(),
                    "table": config.table.id,
                    "driver": config.wheel.driver,
                },
            )
            self._metrics_endpoint = MetricsEndpoint(
                config.metrics.listen, self.metrics, log=self.log
            )
            publisher_hooks["on_acknowledged"] = self.metrics.acknowledged
        self.publisher = Publisher(
            config,
            self.journal,
            on_command=self._on_command,
            log=self.log,
            instance=f"{socket.gethostname()}:{config.state.dir.resolve()}",
            on_retained_result=self._on_retained_result,
            on_rival=self._stand_down,
            alarm_message=self.pipeline.unjournaled_alarm,
            **publisher_hooks,
        )
        self._heartbeat = Heartbeat(config.metrics.health_interval_s)
        #: When the wheel last sent anything (monotonic), None before it ever has.
        self._heard_at: float | None = None
        #: When the daemon started (monotonic): the wheel's silence counts from here at first.
        self._started_at = time.monotonic()
        self._stop = asyncio.Event()
        #: Another wheeld found online for the table at start: why this one stops.
        self._rival: RivalDaemon | None = None
        #: What the wheel said before the broker's memory was read: decided after it.
        self._held: list[Callable[[], None]] | None = []
        self._timer: asyncio.TimerHandle | None = None
        self._journal_retry: asyncio.TimerHandle | None = None
        self._repeating: list[asyncio.TimerHandle] = []
        self._pruner = self.journal.pruner(
            Retention(
                decisions_days=config.state.decisions_days,
                frames_days=config.state.frames_days,
                keep_games=config.state.keep_games,
            )
        )
        self._pruning: asyncio.TimerHandle | None = None
        self._wal_task: asyncio.Task[None] | None = None
        self._command_rate = CommandRate()
        self._table_rate = CommandRate(TABLE_RATE_PER_S, TABLE_BURST)
        # A recall reads the journal (tens of milliseconds): fewer, and two at a time.
        self._recall_rate = CommandRate(RECALLS_PER_S, RECALL_BURST)
        self._recalls = asyncio.Semaphore(RECALLS_AT_ONCE)
        #: Commands within their sender's rate refused over every sender's together.
        self._shared_refused = Refusals()
        self._rate_summary: asyncio.TimerHandle | None = None
        self._pruned = 0
        #: The last decision row the kept statistics count.
        self._statistics_kept = self.journal.statistics()[1]
        self._frames: list[FrameRecord] = []
        self._frames_timer: asyncio.TimerHandle | None = None
        self._commands: list[CommandRecord] = []
        self._commands_flush: asyncio.Handle | None = None
        self._publisher_task: asyncio.Task[None] | None = None
        # What <base>/info last said of the wheel: republished when the wheel's hello differs.
        self._identity: tuple[Any, ...] | None = None
        # Computed once, before anything runs: the digest describes the code loaded.
        identity.package_digest()
        identity.installed_drivers()

    # -- life cycle ----------------------------------------------------------

    async def run(self) -> int:
        config = self.config
        # A worker thread (a recall, a checkpoint) gives the GIL back to the event loop
        # within a millisecond, not the default five: a launch is never kept waiting.
        sys.setswitchinterval(0.001)
        if self._metrics_endpoint is not None:
            # First: a port in use is a configuration problem, said before the broker is asked.
            try:
                await self._metrics_endpoint.start()
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
            self._apply(Effects(messages=[self.pipeline.wheel_message(time.time())]))
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
        self._publisher_task = tasks[1]
        self._every(WHEEL_STATE_EVERY_S, self._refresh_wheel_state)
        self._every(RETENTION_EVERY_S, self._prune_journal)
        self._every(CHECKPOINT_EVERY_S, self._checkpoint)
        self.journal.checkpoint_elsewhere()
        self._every(WAL_CHECKPOINT_S, self._checkpoint_wal)
        if self.notifier.watchdog_interval is not None:
            self._every(self.notifier.watchdog_interval / 2, self._watchdog)
        self._every(HEALTH_CHECK_S, self._check_health)
        stopper = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = False
        for task in done:
            if task is not stopper and task.exception() is not None:
                failed = True
                self.log.error("task failed", task=task.get_name(), error=repr(task.exception()))
        self.notifier.stopping()
        self.log.info("wheeld stopping")
        if self._rate_summary is not None:
            self._journal_rate_refusals()  # what was refused is said before the journal closes
        for handle in (*self._repeating, self._timer, self._journal_retry, self._pruning):
            if handle is not None:
                handle.cancel()
        link_task, publisher_task = tasks
        stopper.cancel()
        link_task.cancel()  # first, so the port is not reopened behind our back
        await asyncio.gather(link_task, stopper, return_exceptions=True)
        self.link.close()
        if self._metrics_endpoint is not None:
            await self._metrics_endpoint.close()
        await self.publisher.stop()
        publisher_task.cancel()
        # Bounded: a task that swallowed its cancellation must not keep the daemon up.
        await asyncio.wait([publisher_task], timeout=5)
        await _cancelled(preflight)
        if self.capture is not None:
            self.capture.close()
            if self.capture.cut_lines or self.capture.dropped_bytes:
                self.log.warning(
                    "capture: over-long lines cut, or a crashed run's last line dropped",
                    cut_lines=self.capture.cut_lines,
                    dropped_bytes=self.capture.dropped_bytes,
                )
        if self._wal_task is not None:
            await asyncio.wait([self._wal_task], timeout=5)  # its connection, before ours closes
        with contextlib.suppress(JournalWriteError):
            self._flush_commands()
            self._flush_frames()  # the last lines heard, before the journal closes
            self._keep_statistics()
        self.journal.close()
        self.notifier.close()
        if self._rival is not None:
            raise self._rival
        # A task that failed stopped the daemon: not a clean stop, so systemd restarts it.
        return 1 if failed else 0

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
            self._rival = self._rival_error(memory.rival)
            self._stop.set()
            return
        # Ready only now: a second daemon for a running table never says it is.
        self.notifier.ready(self.status_line())
        self.log.info(
            "wheeld ready",
            base_topic=self.config.base_topic,
            port=self.config.wheel.port,
            driver=self.config.wheel.driver,
        )
        now = time.time()
        started = Effects()
        if memory.sequence is not None:
            started.extend(self.pipeline.on_broker_sequence(memory.sequence, now))
        if memory.result is not None:
            started.extend(self.pipeline.on_broker_result(memory.result, now))
        started.extend(self.pipeline.start(now))
        for warning in self.journal.warnings:
            started.extend(self.pipeline.alarm(now, "journal_lost", problem=warning))
        if self.journal.chain_problem is not None:
            # Never repaired: the journal goes on in a new, anchored segment.
            started.extend(
                self.pipeline.alarm(
                    now,
                    "journal_chain_broken",
                    severity="critical",
                    problem=self.journal.chain_problem,
                )
            )
        self._apply(started)
        self._prune_journal()
        held, self._held = self._held or [], None
        for heard in held:
            heard()
        await self._supervise("publisher", self.publisher.run)

    def _stand_down(self, other: str) -> None:
        """Another wheeld runs the table: stop deciding and publishing (exit 78)."""
        if self._rival is None:
            self._rival = self._rival_error(other)
            self._stop.set()

    def _rival_error(self, other: str) -> RivalDaemon:
        """What the daemon says, and exits 78 with, when another wheeld runs the table."""
        config = self.config
        return RivalDaemon(
            f"another wheeld ({other}) is online for table {config.table.id} "
            f"(retained {config.base_topic}/status): only one may run per table id; "
            "stop that one, or give this one its own table.id. If it is gone, its last will "
            f"clears this within about {2 * config.mqtt.keepalive_s:g} s (1.5 x mqtt.keepalive_s "
            "and the broker's own check): "
            "start again then"
        )

    async def _supervise(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run a shell task forever; restart it after an unexpected failure."""
        while True:
            try:
                await run()
            except Exception as exc:  # a bug must cost a restart of the task, not the game
                self.log.exception("task failed, restarting it", task=name, error=repr(exc))
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        """Ask the daemon to stop (what SIGTERM does)."""
        self._stop.set()

    def _every(self, interval: float, action: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        slot = len(self._repeating)

        def tick() -> None:
            action()
            self._repeating[slot] = loop.call_later(interval, tick)

        self._repeating.append(loop.call_later(interval, tick))

    def _prune_journal(self) -> None:
        """Journal retention: one batch now, the next once the loop has had its turn."""
        self._pruning = None
        try:
            deleted = self._pruner.step(time.time())
        except JournalError as exc:  # cannot write, or cannot read (a damaged old page)
            self.log.warning("journal retention postponed", error=str(exc))
            return
        self._pruned += deleted
        if deleted:
            loop = asyncio.get_running_loop()
            self._pruning = loop.call_later(RETENTION_PAUSE_S, self._prune_journal)
        elif self._pruned:
            self.log.info("journal retention", deleted_rows=self._pruned)
            self._pruned = 0

    def _checkpoint(self) -> None:
        """What the chains hold so far needs no walk at the next start; the statistics kept."""
        try:
            self.journal.checkpoint()
            self._keep_statistics()
        except JournalWriteError as exc:
            self.log.warning("journal checkpoint postponed", error=str(exc))

    def _checkpoint_wal(self) -> None:
        if self._wal_task is not None and not self._wal_task.done():
            return  # the last one is still at it (a slow disk)
        self._wal_task = asyncio.get_running_loop().create_task(self._checkpoint_wal_now())

    async def _checkpoint_wal_now(self) -> None:
        try:
            await asyncio.to_thread(checkpoint_wal, self.journal.path)
        except Exception as exc:  # a full disk, say: the log waits, the journal says so itself
            self.log.warning("journal checkpoint failed", error=repr(exc))

    def _keep_statistics(self) -> None:
        """The statistics' running aggregates, for the next start to go on from."""
        statistics = self.pipeline.statistics
        last = self.journal.last_decision_id()
        if statistics is not None and last != self._statistics_kept:
            self.journal.save_statistics(statistics.snapshot(), last)
            self._statistics_kept = last

    def _info_message(self) -> Outgoing:
        """The retained <base>/info: software, drivers, wheel, key and configuration identity."""
        pipeline = self.pipeline
        signer = self.signer
        payload = identity.info_payload(
            self.config,
            wheel=self._wheel_identity(),
            kid=signer.kid if signer is not None else None,
            public_key_pem=signer.public_pem().decode("ascii") if signer is not None else None,
            now=time.time(),
            epoch=self.journal.epoch,
        )
        if signer is not None:
            payload = signer.sign(payload)
        return Outgoing(f"{pipeline.settings.base_topic}/info", json.dumps(payload), retain=True)

    def _wheel_identity(self) -> dict[str, Any]:
        info = self.pipeline.wheel_info
        return {
            "model": info.get("model"),
            "firmware": info.get("firmware"),
            "serial": info.get("serial"),
            "pockets": self.pipeline.engine.layout.pockets,
        }

    # -- inputs to the pipeline ----------------------------------------------------

    def _now(self) -> float:
        """Host time, after telling the pipeline (and the capture) of any step of the wall clock.

        A step shows as wall time moving unlike the monotonic clock; without this
        a forward step would read as silence and void the game in progress.
        """
        wall, mono = time.time(), time.monotonic()
        step = (wall - self._wall) - (mono - self._mono)
        self._wall, self._mono = wall, mono
        if abs(step) >= CLOCK_STEP_S:
            if self.capture is not None:
                self.capture.clock_step(step)
            self._apply(self.pipeline.on_clock_step(step, wall))
        return wall

    def _on_data(self, data: bytes, now: float) -> None:
        self._heard_at = self.link.last_data
        if self._held is not None:  # before the broker's answer: kept, in order, with its time
            self._held.append(lambda: self._apply(self.pipeline.on_bytes(data, now)))
            return
        self._apply(self.pipeline.on_bytes(data, now))

    def _on_link_up(self) -> None:
        now = self._now()
        if self._held is not None:
            self._held.append(lambda: self._link_changed(self.pipeline.on_link_up(now)))
            return
        self._link_changed(self.pipeline.on_link_up(now))

    def _on_link_down(self, why: str) -> None:
        now = self._now()
        if self._held is not None:
            self._held.append(lambda: self._link_changed(self.pipeline.on_link_down(why, now)))
            return
        self._link_changed(self.pipeline.on_link_down(why, now))

    def _link_changed(self, effects: Effects) -> None:
        self._apply(effects)
        self.notifier.status(self.status_line())

    def _timer_fired(self) -> None:
        self._timer = None
        self._apply(self.pipeline.on_timer(self._now()))

    def _refresh_wheel_state(self) -> None:
        self._apply(Effects(messages=[self.pipeline.wheel_message(time.time())]))
        self.notifier.status(self.status_line())

    def status_line(self) -> str:
        """The table's state, and what stands in the way of delivery, for sd_notify STATUS."""
        parts = [self.pipeline.status_line()]
        publisher = self.publisher
        if publisher.rival is not None:
            parts.append(f"another wheeld publishes for this table: {publisher.rival}")
        elif publisher.session_taken_over:
            parts.append(f"MQTT client id {self.config.client_id} taken by another client")
        if publisher.stuck_since is not None:
            parts.append(f"broker refusing messages ({publisher.refusals} refusals)")
        elif publisher.unreachable:
            parts.append("no broker reached since start")
        elif not publisher.connected:
            parts.append("broker unreachable")
        return "; ".join(parts)

    async def _on_command(self, command: OperatorCommand) -> dict[str, Any] | None:
        now = time.time()
        sender = claimed_operator(command)
        # Each sender its own bucket, and every sender together one more: a flood under
        # a new name each time costs no more (a close is another command: never held).
        recall = command.name == "recall"
        within = self._command_rate.allow(sender, command.name, now)
        if within and not (
            self._table_rate.allow("", command.name, now)
            and (not recall or self._recall_rate.allow("", "recall", now))
        ):
            # Counted as this sender's too: the table's own buckets count no one.
            self._shared_refused.count(sender, command.name)
            within = False
        if not within:
            # Past the rate: no parsing, no reply, no record of its own (a count
            # is journaled each minute): a flood costs nothing later.
            if self._rate_summary is None:
                loop = asyncio.get_running_loop()
                self._rate_summary = loop.call_later(RATE_SUMMARY_S, self._journal_rate_refusals)
            return None
        if command.name == "recall":
            return await self._recall(command)
        try:
            reply, effects = self.pipeline.on_command(command, now)
        except Exception as exc:  # a command must never take the daemon down
            self.log.error("command failed", command=command.name, error=repr(exc))
            return {"ok": False, "error": "internal error", "schema_version": SCHEMA_VERSION}
        self._apply(effects)
        return {**reply, "schema_version": SCHEMA_VERSION}

    def _journal_rate_refusals(self) -> None:
        """Commands refused over their sender's rate this past while: one record each kind."""
        self._rate_summary = None
        now = time.time()
        self._table_rate.take_refused()  # counted by sender in _shared_refused
        self._recall_rate.take_refused()
        records = [
            CommandRecord(
                now,
                command,
                sender or None,
                f"{count} {command} command(s) refused over the rate",
                False,
                f"rate limited: more than {RATE_PER_S:g} a second",
            )
            for (sender, command), count in sorted(self._command_rate.take_refused().items())
        ] + [
            CommandRecord(
                now,
                command,
                sender or None,
                f"{count} {command} command(s) refused over the table's rate",
                False,
                "rate limited: more than "
                f"{RECALLS_PER_S if command == 'recall' else TABLE_RATE_PER_S:g}"
                " a second from every sender together",
            )
            for (sender, command), count in sorted(self._shared_refused.take_refused().items())
        ]
        for record in records:
            self.log.warning(
                "commands refused over the rate",
                sender=record.sender,
                command=record.name,
                refused=record.payload,
            )
        if records:
            self._apply(Effects(commands=records))

    def _on_retained_result(self, name: str, payload: bytes) -> None:
        """The broker's retained ``result`` or ``sequence``, at a (re)connect."""
        if name == "sequence":
            self._apply(self.pipeline.on_broker_sequence(payload, time.time()))
        else:
            self._apply(self.pipeline.on_broker_result(payload, time.time()))

    async def _recall(self, command: OperatorCommand) -> dict[str, Any]:
        """``recall``: the last games with their events and frames, read from the journal.

        Read in a worker thread with a connection of its own (indexed, a few
        games): the loop that decides games goes on meanwhile.
        """
        now = time.time()
        text = command.payload[:2000].decode("utf-8", "replace")
        try:
            asked = parse(command)
            assert isinstance(asked, Recall)
            async with self._recalls:
                games = await asyncio.to_thread(self._read_games, asked)
            reply: dict[str, Any] = {"ok": True, "games": games}
            record = CommandRecord(now, command.name, asked.operator, text, True, "recalled")
        except (CommandError, JournalError) as exc:
            reply = {"ok": False, "error": str(exc)}
            sender = named_operator(command)
            record = CommandRecord(now, command.name, sender, text, False, str(exc))
            self.log.warning("command refused", command=command.name, sender=sender, error=str(exc))
        self._apply(Effects(commands=[record]))
        return {**reply, "schema_version": SCHEMA_VERSION}

    def _read_games(self, asked: Recall) -> RawJSON:
        """The games asked for, as the reply's JSON array, written here in the worker
        thread a game at a time (the loop takes the GIL back between them)."""
        with JournalView(self.journal.path) as view:
            games = recall(view, asked.last, asked.game_id)
        return RawJSON("[" + ",".join(json.dumps(game.to_json()) for game in games) + "]")

    # -- effects -------------------------------------------------------------------

    def _apply(self, effects: Effects) -> None:
        """Journal, then write to the wheel, log, wake the publisher and re-arm the timer."""
        journal = self.journal
        try:
            # Decisions last: when a write fails, exactly the games whose records
            # did not reach the journal are the ones the pipeline will void. The
            # frames first, without an fsync: the decisions' commit makes them durable.
            self._frames += effects.frames
            # With a commit that is fsync'd (a game's end, an alarm, a command): the lines
            # that led to it become durable with it. A game's start is not fsync'd, and
            # its lines wait for the timer: hashing them is not on the launch's path.
            fsynced = effects.alarmed or any(g.event not in UNHURRIED_EVENTS for g in effects.games)
            if self._frames and (fsynced or effects.commands or len(self._frames) >= FRAME_BATCH):
                self._flush_frames()
            elif self._frames and self._frames_timer is None:
                loop = asyncio.get_running_loop()
                self._frames_timer = loop.call_later(FRAME_FLUSH_S, self._flush_frames_later)
            if effects.commands:
                # Commands are group-committed: those of one turn of the loop in one
                # commit, without an fsync; with what an accepted one did, at once.
                self._commands += effects.commands
                if effects.durable or effects.table_state is not None:
                    self._flush_commands()
                elif self._commands_flush is None:
                    loop = asyncio.get_running_loop()
                    self._commands_flush = loop.call_soon(self._flush_commands_later)
            if effects.table_state is not None:
                journal.save_table_state(effects.table_state)
            if effects.superseded:
                base = self.config.base_topic
                topics = [f"{base}/{name}" for name in SUPERSEDED_TOPICS]
                dropped = journal.supersede(topics)
                if dropped:
                    self.log.warning(
                        "game messages never published dropped: another wheeld went on past them",
                        dropped=dropped,
                    )
            if effects.chain_floor is not None:
                journal.record_floor(*effects.chain_floor)
            if effects.taken_from is not None:
                journal.record_takeover(effects.taken_from)
            if effects.alarms or effects.set_alerts is not None:
                # Before the decisions: their durable commit makes these durable too.
                journal.record_alarms(effects.alarms, effects.set_alerts)
            if effects.durable:
                state = effects.state or self.pipeline.engine.state
                # The chain as it stands after this batch, kept in the same commit.
                pipeline = self.pipeline
                chain = pipeline.chain if pipeline.signer is not None else None
                # An alarm is fsync'd with what it came with; a game's start alone is not.
                durable = True if effects.alarmed else None
                ids = journal.record(
                    effects.games, effects.messages, state, chain=chain, durable=durable
                )
                if self.metrics is not None:
                    self.metrics.decided(effects.games, effects.messages, ids)
                if effects.games:
                    # Kept: now the history, the statistics and the alerts follow from them.
                    self._apply(self.pipeline.committed())
                if journal.last_decision_id() - self._statistics_kept >= STATISTICS_EVERY:
                    self._keep_statistics()
            else:
                if effects.state is not None:
                    journal.save_state(effects.state)
                if effects.messages:
                    journal.enqueue(effects.messages)
        except JournalWriteError as exc:
            self._journal_failed(effects, str(exc))
        for data in effects.writes:
            self.link.write(data)
        for record in effects.logs:
            getattr(self.log, record.level)(record.event, **record.fields)
        wheel = tuple(self._wheel_identity().values())
        if wheel != self._identity:
            self._identity = wheel
            self._enqueue_best_effort(self._info_message())
        self.publisher.wake()
        self._rearm()

    def _flush_commands(self) -> None:
        """Journal the commands buffered; JournalWriteError keeps them for the next try."""
        if self._commands_flush is not None:
            self._commands_flush.cancel()
            self._commands_flush = None
        if self._commands:
            self.journal.record_commands(self._commands)
            self._commands = []

    def _flush_commands_later(self) -> None:
        self._commands_flush = None
        try:
            self._flush_commands()
        except JournalWriteError as exc:
            del self._commands[: max(0, len(self._commands) - FRAME_BUFFER_MAX)]
            self._journal_failed(Effects(), str(exc))

    def _flush_frames(self) -> None:
        """Journal the buffered lines; JournalWriteError keeps them for the next try."""
        if self._frames_timer is not None:
            self._frames_timer.cancel()
            self._frames_timer = None
        self.journal.record_frames(self._frames)
        self._frames = []

    def _flush_frames_later(self) -> None:
        self._frames_timer = None
        try:
            self._flush_frames()
        except JournalWriteError as exc:
            if len(self._frames) > FRAME_BUFFER_MAX:
                del self._frames[: len(self._frames) - FRAME_BUFFER_MAX]
            self._journal_failed(Effects(), str(exc))

    def _enqueue_best_effort(self, message: Outgoing) -> None:
        try:
            self.journal.enqueue([message])
        except JournalWriteError:
            self.publisher.publish_unjournaled(message)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.pipeline.next_deadline()
        if deadline is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, deadline - time.time())
            self._timer = loop.call_at(loop.time() + delay, self._timer_fired)

    # -- an unwritable journal ---------------------------------------------------------

    def _journal_failed(self, failed: Effects, error: str) -> None:
        """Say so everywhere, decide nothing new, and try the journal again every second."""
        effects = self.pipeline.journal_write_failed(failed, error, time.time())
        for message in effects.messages:
            self.publisher.publish_unjournaled(message)
        for record in effects.logs:
            getattr(self.log, record.level)(record.event, **record.fields)
        self.notifier.status(self.status_line())
        if self._journal_retry is None:
            loop = asyncio.get_running_loop()
            self._journal_retry = loop.call_later(JOURNAL_RETRY_S, self._retry_journal)

    def _retry_journal(self) -> None:
        self._journal_retry = None
        if not self.journal.writable():
            loop = asyncio.get_running_loop()
            self._journal_retry = loop.call_later(JOURNAL_RETRY_S, self._retry_journal)
            return
        self._apply(self.pipeline.journal_recovered(time.time()))
        if not self.pipeline.journal_failed:
            self.publisher.publish_unjournaled(self.pipeline.status_message())
        self.notifier.status(self.status_line())

    # -- systemd watchdog ---------------------------------------------------------------

    def healthy(self) -> bool:
        """Frames arriving or the port being retried, the journal writable, the publisher alive."""
        link_ok = self.link.retrying or self.link.hearing()
        task = self._publisher_task
        publisher_alive = task is not None and not task.done()
        return link_ok and publisher_alive and not self.pipeline.journal_failed

    def _watchdog(self) -> None:
        if self.healthy():
            self.notifier.watchdog()
        else:
            self.log.error(
                "unhealthy: withholding watchdog ping", status=self.pipeline.status_line()
            )

    # -- health ---------------------------------------------------------------------------

    def _condition(self, now: float) -> Condition:
        """The link, the broker and the faults set, as ``<base>/health`` judges them."""
        publisher = self.publisher
        faults = self.pipeline.set_codes()
        if publisher.stuck_since is not None:
            faults.add("broker_refused")
        if publisher.session_taken_over:
            faults.add("session_taken_over")
        if publisher.unreachable:
            faults.add(BROKER_UNREACHABLE)
        return Condition(
            link=self._link_state(now),
            broker="connected" if publisher.connected else "disconnected",
            faults=tuple(sorted(faults)),
        )

    def _link_state(self, now: float) -> LinkState:
        link = self.link
        if not link.connected:
            return "down"
        # Silent for longer than the rule that voids a game for it. Counted from the
        # wheel's last word, not from the port's last (re)opening: a port reopened
        # because the wheel went quiet is no sign of the wheel.
        heard = self._heard_at if self._heard_at is not None else self._started_at
        if now - heard > self.config.rules.link_timeout_ms / 1000:
            return "silent"
        return "up"

    def readings(self) -> Readings:
        """The table's condition and figures now: for ``<base>/health`` and the metrics."""
        now = time.monotonic()
        try:
            outbox: int | None = self.journal.pending_count()
        except JournalError:
            outbox = None
        heard = self._heard_at
        return Readings(
            condition=self._condition(now),
            outbox=outbox,
            journal_bytes=self.journal.disk_bytes(),
            last_frame_age_s=None if heard is None else round(max(0.0, now - heard), 3),
        )

    def _check_health(self) -> None:
        """Publish ``<base>/health`` when its condition changed, or as the heartbeat.

        Best effort and outside the journal, like the status: a heartbeat must
        not fill the outbox while the broker is away, and is said again anyway.
        """
        now = time.monotonic()
        if not self.publisher.connected:
            # Nobody to tell; said again on its return (a broker restarted
            # without persistence has forgotten what it retained).
            self._heartbeat.forget()
            return
        condition = self._condition(now)
        if not self._heartbeat.due(condition, now):
            return
        readings = self.readings()
        payload = health_payload(readings, table=self.config.table.id, now=time.time())
        topic = f"{self.config.base_topic}/health"
        self.publisher.publish_unjournaled(Outgoing(topic, payload.to_json(), retain=True))
        self._heartbeat.said(readings.condition, now)


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
