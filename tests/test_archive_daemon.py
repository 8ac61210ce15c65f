"""The archive against a real table: ``wheeld run`` on a scripted wheel, whose ``recall``
reply (its ``messages``) fills what the archive missed while the broker forgot its session."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.archive_rig import ArchiveProcess, archiving, query
from tests.test_archive_service import kept
from wheeld.testing.rig import Broker, DaemonProcess, NotifySocket, PtyWheel, Subscriber, wait_for
from wheeld.testing.rig import write_config as write_daemon_config
from wheeld_simulators.scripted import ScriptedWheel

pytestmark = pytest.mark.timeout(240)


class Wheel:
    """A scripted WRP/1 wheel on a pty, talking in real time."""

    def __init__(self, link: Path) -> None:
        self.pty = PtyWheel(link)
        self.script = ScriptedWheel(start=time.time())
        self.sent = 0
        self.streamed_at = time.monotonic()

    def flush(self) -> None:
        for _, frame in self.script.lines[self.sent :]:
            self.pty.write(frame + b"\r\n")
        self.sent = len(self.script.lines)
        self.streamed_at = time.monotonic()

    def keep_talking(self) -> None:
        elapsed_ms = int((time.monotonic() - self.streamed_at) * 1000)
        if elapsed_ms >= 200:
            self.script.advance(elapsed_ms)
            self.flush()

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        def talking() -> Any:
            self.keep_talking()
            return condition()

        return wait_for(talking, timeout, what)

    def play(self, *numbers: str) -> None:
        for number in numbers:
            self.script.game(number)
            self.script.reverse_rotor()
        self.flush()


def test_a_real_table_fills_what_the_archive_missed(
    tmp_path: Path,
    broker: Broker,
    dsn: str,
) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    config = write_daemon_config(
        tmp_path / "wheeld.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
    )
    wheel = Wheel(tmp_path / "wheel0")
    daemon = DaemonProcess(config, tmp_path, env={"NOTIFY_SOCKET": str(notify.path)})
    games = Subscriber(broker.port, "wheeld/T9/game")
    archive = ArchiveProcess(
        tmp_path,
        dsn=dsn,
        brokers=[broker.port],
        trusted_keys={"T9": tmp_path / "signing.pub"},
    )
    try:
        daemon.start()
        wheel.wait(lambda: any("READY=1" in m for m in notify.messages()), 60, "READY=1")
        wheel.script.hello()
        wheel.script.advance(3000)
        wheel.flush()
        with archiving(archive):
            wheel.wait(lambda: archive.said("broker connected"), 30, "the archive's connection")
            wheel.play("17")
            wheel.wait(lambda: kept(dsn) == [1, 2, 3], 30, "game 1 kept")
        # The broker restarts without its sessions: what comes meanwhile is not kept for
        # the archive, which finds the hole at the next game and asks the table for it.
        broker.stop()
        broker.start()
        wheel.wait(games.client.is_connected, 30, "the subscriber back")
        wheel.play("4", "32")
        wheel.wait(
            lambda: any(
                m["game_id"] == 3 and m["event"] == "result" for m in games.on("wheeld/T9/game")
            ),
            60,
            "game 3 published",
        )
        with archiving(archive):
            wheel.wait(lambda: len(archive.said("broker connected")) == 2, 30, "the archive back")
            wheel.play("0")
            wheel.wait(lambda: kept(dsn) == list(range(1, 13)), 90, "the gap filled by recall")
        sources = query(dsn, "SELECT seq, source FROM messages WHERE seq BETWEEN 4 AND 9")
        assert {source for _, source in sources} == {"recall"}
        assert query(dsn, "SELECT count(*) FROM gaps") == [(0,)]
        numbers = query(dsn, "SELECT number FROM results ORDER BY game_id")
        assert numbers == [("17",), ("4",), ("32",), ("0",)]
    finally:
        archive.stop()
        daemon.ensure_stopped()
        games.close()
        wheel.pty.close()
        notify.close()
