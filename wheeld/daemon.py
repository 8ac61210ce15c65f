"""``wheeld run``: the serial link, the engine, the journal and the publisher, wired.

The shell is thin: bytes from the port go through the driver into the engine;
every decision goes into the journal (durably) and only then to the publisher,
which drains the journal's outbox to the broker. No task holds game state but
the engine, and nothing here polls: timers are set for the moments that matter.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld import logs
from wheeld.config import Config
from wheeld.drivers import WheelDecoder, decoder_for, default_baudrate
from wheeld.engine import EngineState, GameEngine
from wheeld.events import WheelHello
from wheeld.game import Alarm, Decision, GameEvent, NoMoreBets, NoSpin, Result, Spinning
from wheeld.journal import GameRecord, Journal, Outgoing
from wheeld.link import CaptureWriter, LinkOpenError, WheelLink
from wheeld.messages import game_payload, iso_utc
from wheeld.notify import Notifier
from wheeld.publisher import Publisher

if TYPE_CHECKING:
    from wheeld.drivers.cammegh_control import SS2Controller

JOURNAL_FILE = "journal.sqlite3"
#: How often the retained wheel state (with its counters) is refreshed.
WHEEL_STATE_EVERY_S = 60.0
_EVENT_NAMES = {Spinning: "spinning", NoMoreBets: "no more bets"}


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
        self._capture_path = capture
        self.notifier = notifier or Notifier()
        self.log = logs.get().bind(table=config.table.id)
        self.base = config.base_topic
        self.journal: Journal | None = None
        self.engine: GameEngine | None = None
        self.decoder: WheelDecoder = decoder_for(config.wheel.driver)
        self._history: deque[str] = deque(maxlen=config.mqtt.history_length)
        self._saved_state: EngineState | None = None
        self._link_timer: asyncio.TimerHandle | None = None
        self._wheel_info: dict[str, Any] = {}
        self._last_status_seen: object = None
        self._stop = asyncio.Event()
        self.publisher: Publisher | None = None
        self.link: WheelLink | None = None
        self._control_timer: asyncio.TimerHandle | None = None
        self.controller: SS2Controller | None = None
        control = config.wheel.control
        if config.wheel.driver == "cammegh-ss2" and control.enabled:
            from wheeld.drivers.cammegh_control import ControlSettings, SS2Controller

            self.controller = SS2Controller(
                ControlSettings(
                    operating_mode=control.operating_mode,
                    start_games=control.start_games,
                    bets_open_s=control.bets_open_s,
                    sensor_events=control.sensor_events,
                    poll_s=control.poll_s,
                )
            )

    # -- life cycle ----------------------------------------------------------

    async def run(self) -> int:
        config = self.config
        journal = Journal(config.state.dir / JOURNAL_FILE)
        self.journal = journal
        state = journal.load_state()
        self.engine = GameEngine(config.rules, pockets=config.wheel.pockets, state=state)
        self._history.extend(journal.history(config.mqtt.history_length))
        self._saved_state = replace(self.engine.state)
        self._decide(self.engine.resume(time.time()))

        capture = (
            CaptureWriter(self._capture_path, config.wheel.driver)
            if self._capture_path is not None
            else None
        )
        link_timeout_s = config.rules.link_timeout_ms / 1000
        self.link = WheelLink(
            config.wheel.port,
            config.wheel.baudrate or default_baudrate(config.wheel.driver),
            on_data=self._on_data,
            on_up=self._on_link_up,
            on_down=self._on_link_down,
            silence_s=max(5.0, 3 * link_timeout_s),
            capture=capture,
            log=self.log,
        )
        self.publisher = Publisher(config, journal, on_command=self._on_command, log=self.log)
        try:
            await self.link.open()
        except LinkOpenError as exc:
            if not config.wheel.wait_for_device:
                raise
            self.log.warning("wheel port unavailable, waiting for it", error=str(exc))
            self._publish_wheel_state()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        tasks = [
            asyncio.create_task(self._supervise("link", self.link.run), name="link"),
            asyncio.create_task(self._supervise("publisher", self.publisher.run), name="publisher"),
        ]
        self._schedule_wheel_state()
        self._watchdog()
        self.notifier.ready(self._status_line())
        self.log.info(
            "wheeld ready", base_topic=self.base, port=config.wheel.port, driver=config.wheel.driver
        )
        stopper = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception() is not None:
                self.log.error("task failed", task=task.get_name(), error=repr(task.exception()))
        self.notifier.stopping()
        self.log.info("wheeld stopping")
        link_task, publisher_task = tasks
        stopper.cancel()
        link_task.cancel()  # first, so the port is not reopened behind our back
        await asyncio.gather(link_task, stopper, return_exceptions=True)
        self.link.close()
        self.log.debug("stopping: link closed")
        await self.publisher.stop()
        self.log.debug("stopping: offline published")
        publisher_task.cancel()
        await asyncio.gather(publisher_task, return_exceptions=True)
        self.log.debug("stopping: publisher done")
        if capture is not None:
            capture.close()
        journal.close()
        self.notifier.close()
        return 0

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

    # -- the wheel -------------------------------------------------------------

    def _on_data(self, data: bytes, now: float) -> None:
        engine = self.engine
        assert engine is not None
        decisions: list[Decision] = []
        for event in self.decoder.feed(data, now):
            decisions += engine.on_event(event, now)
            if self.controller is not None:
                self._control(self.controller.on_event(event, now))
            if isinstance(event, WheelHello):
                self._wheel_info.update(
                    model=event.model,
                    firmware=event.firmware,
                    serial=event.serial,
                    wheel_pockets=event.pockets,
                )
                self._publish_wheel_state()
        if decisions:
            self._decide(decisions)
        elif engine.state != self._saved_state:
            self._save_state()
        self._arm_link_timer()
        if self.controller is not None:
            self._control_after(decisions, now)

    # -- live control (Cammegh SS2) -------------------------------------------------

    def _control_after(self, decisions: list[Decision], now: float) -> None:
        controller = self.controller
        status = getattr(self.decoder, "last_status", None)
        assert controller is not None
        if status is not None and status is not self._last_status_seen:
            self._last_status_seen = status
            self._control(controller.on_status(status, now))
        voided = any(isinstance(d, NoSpin) for d in decisions)
        if voided and status is not None and status.state in (3, 4):
            self._control(controller.void(now))  # acknowledge: the wheel re-spins

    def _control(self, commands: list[bytes]) -> None:
        controller = self.controller
        assert controller is not None
        if self.link is not None:
            for command in commands:
                self.link.write(command)
        while controller.unanswered:
            silent = controller.unanswered.pop(0)
            self._decide([Alarm(time.time(), "wheel_not_answering", {"command": silent})])
        self._control_timer = _rearm(
            self._control_timer, controller.next_deadline(), self._control_fired
        )

    def _control_fired(self) -> None:
        assert self.controller is not None
        self._control_timer = None
        self._control(self.controller.on_timer(time.time()))

    def _on_link_up(self) -> None:
        if self.config.wheel.driver == "wrp" and self.link is not None:
            from wheeld.drivers.wrp import encode_query

            self.link.write(encode_query())  # learn pockets, model and firmware
        if self.controller is not None:
            self._control(self.controller.on_connect(time.time()))
        self._publish_wheel_state()
        self.notifier.status(self._status_line())

    def _on_link_down(self, why: str) -> None:
        assert self.engine is not None
        if self._control_timer is not None:
            self._control_timer.cancel()
            self._control_timer = None
        self._decide(self.engine.on_link_down(time.time()))
        self._publish_wheel_state()
        self.notifier.status(self._status_line())

    def _arm_link_timer(self) -> None:
        assert self.engine is not None
        self._link_timer = _rearm(
            self._link_timer, self.engine.link_deadline(), self._link_timer_fired
        )

    def _link_timer_fired(self) -> None:
        assert self.engine is not None
        self._link_timer = None
        self._decide(self.engine.on_host_time(time.time()))

    # -- decisions ----------------------------------------------------------------

    def _decide(self, decisions: list[Decision]) -> None:
        """Journal the decisions durably, then let the publisher send them."""
        engine, journal = self.engine, self.journal
        assert engine is not None and journal is not None
        if not decisions:
            return
        games: list[GameRecord] = []
        messages: list[Outgoing] = []
        table = self.config.table.id
        for decision in decisions:
            if isinstance(decision, Alarm):
                self.log.warning("alarm", alarm=decision.code, **decision.detail)
                payload = {
                    "alarm": decision.code,
                    "table": table,
                    "ts": iso_utc(decision.at),
                    **decision.detail,
                }
                messages.append(Outgoing(f"{self.base}/alarm", json.dumps(payload)))
                continue
            body = game_payload(decision, table, engine.layout).to_json()
            number = decision.number if isinstance(decision, Result) else None
            games.append(GameRecord(decision.game_id, type(decision).__name__, body, number))
            messages.append(Outgoing(f"{self.base}/game", body))
            self._log_decision(decision)
            if number is not None:
                self._history.appendleft(number)
                messages.append(Outgoing(f"{self.base}/result", body, retain=True))
                messages.append(self._history_message())
        journal.record(games, messages, engine.state)
        self._saved_state = replace(engine.state)
        if self.publisher is not None:
            self.publisher.wake()

    def _log_decision(self, decision: GameEvent) -> None:
        if isinstance(decision, Result):
            self.log.info(
                "result",
                game_id=decision.game_id,
                number=decision.number,
                revolutions=decision.revolutions,
            )
        elif isinstance(decision, NoSpin):
            self.log.warning(
                "no spin",
                game_id=decision.game_id,
                reason=decision.reason,
                reasons=list(decision.reasons),
            )
        else:
            self.log.info(_EVENT_NAMES[type(decision)], game_id=decision.game_id)

    def _history_message(self) -> Outgoing:
        body = json.dumps({"numbers": list(self._history)})
        return Outgoing(f"{self.base}/history", body, retain=True)

    def _save_state(self) -> None:
        assert self.engine is not None and self.journal is not None
        self.journal.save_state(self.engine.state)
        self._saved_state = replace(self.engine.state)

    # -- wheel state ----------------------------------------------------------------

    def _publish_wheel_state(self) -> None:
        if self.journal is None:
            return
        link = self.link
        state = {
            "link": "up" if link is not None and link.connected else "down",
            "driver": self.config.wheel.driver,
            "port": self.config.wheel.port,
            "model": self._wheel_info.get("model"),
            "firmware": self._wheel_info.get("firmware"),
            "serial": self._wheel_info.get("serial"),
            "pockets": self.engine.layout.pockets if self.engine else None,
            "counters": self.decoder.counters.as_dict(),
            "ts": iso_utc(time.time()),
        }
        self.journal.enqueue([Outgoing(f"{self.base}/wheel", json.dumps(state), retain=True)])
        if self.publisher is not None:
            self.publisher.wake()

    def _schedule_wheel_state(self) -> None:
        loop = asyncio.get_running_loop()

        def refresh() -> None:
            self._publish_wheel_state()
            loop.call_later(WHEEL_STATE_EVERY_S, refresh)

        loop.call_later(WHEEL_STATE_EVERY_S, refresh)

    def _status_line(self) -> str:
        link = "wheel up" if self.link is not None and self.link.connected else "wheel down"
        game = self.engine.game_in_progress if self.engine else None
        return f"{link}; game {game} in progress" if game else f"{link}; idle"

    # -- systemd watchdog ---------------------------------------------------------------

    def healthy(self) -> bool:
        """Frames arriving or the port being retried, and the publisher task alive."""
        link = self.link
        if link is None:
            return False
        link_ok = link.retrying or link.hearing()
        publisher_alive = any(
            t.get_name() == "publisher" and not t.done() for t in asyncio.all_tasks()
        )
        return link_ok and publisher_alive

    def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval
        if interval is None:
            return
        loop = asyncio.get_running_loop()

        def ping() -> None:
            if self.healthy():
                self.notifier.watchdog()
            else:
                self.log.error("unhealthy: withholding watchdog ping")
            loop.call_later(interval / 2, ping)

        loop.call_later(interval / 2, ping)

    # -- commands ------------------------------------------------------------------------

    async def _on_command(self, name: str, payload: bytes) -> dict[str, Any]:
        try:
            return self._command(name, payload)
        except Exception as exc:  # a command must never take the daemon down
            self.log.error("command failed", command=name, error=repr(exc))
            return {"ok": False, "error": "internal error"}

    def _command(self, name: str, payload: bytes) -> dict[str, Any]:
        from wheeld.commands import CommandError, handle

        try:
            return handle(self, name, payload)
        except CommandError as exc:
            self.log.warning("command refused", command=name, error=str(exc))
            return {"ok": False, "error": str(exc)}


def _rearm(
    handle: asyncio.TimerHandle | None, deadline: float | None, callback: Callable[[], None]
) -> asyncio.TimerHandle | None:
    """Cancel ``handle`` and, if there is a ``deadline`` (host time), set a new timer."""
    if handle is not None:
        handle.cancel()
    if deadline is None:
        return None
    loop = asyncio.get_running_loop()
    return loop.call_at(loop.time() + max(0.0, deadline - time.time()), callback)
