"""What building the daemon costs on its way to READY: modules and file reads it does not need."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from wheeld.testing.rig import Broker, PtyWheel, free_port, write_config

_BUILT = """
import json, sys
from pathlib import Path
from wheeld.config import load
from wheeld.shell import identity
from wheeld.shell.daemon import Daemon
daemon = Daemon(load(Path(sys.argv[1])))
daemon.journal.close()
later = ("multiprocessing", "concurrent.futures.process", "wheeld.shell.journal.recall", "difflib")
print(json.dumps({
    "modules": sorted(m for m in later if m in sys.modules),
    "digests_read": identity._installed_digest.cache_info().currsize,
}))
"""


def _last_json(code: str, config: Path) -> Any:
    """The last line ``code`` prints, run in a fresh interpreter with ``config``."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_building_the_daemon_neither_reads_the_package_nor_imports_an_exports_pool(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "nope", broker=free_port(), state=tmp_path / "state"
    )
    built = _last_json(_BUILT, config)
    # multiprocessing is for `wheeld export`'s worker processes (a recall reads in a
    # thread), the recall's module for the first recall, difflib for a mistake's "did you
    # mean": none of them on the way to READY.
    assert built["modules"] == []
    # The package's digest is read for <base>/info, after READY (tests/test_jobs.py).
    assert built["digests_read"] == 0


_COLLECTOR = """
import asyncio, gc, json, os, signal, sys
from wheeld import cli
from wheeld.shell import notify

seen = {}
said = notify.Notifier.ready


def ready(self, status):
    seen["building"] = gc.isenabled()
    said(self, status)

    def after():
        seen["after_ready"] = [gc.isenabled(), gc.get_freeze_count()]
        os.kill(os.getpid(), signal.SIGTERM)

    asyncio.get_running_loop().call_later(0.2, after)


notify.Notifier.ready = ready
status = cli.main(["run", "--config", sys.argv[1]])
seen["after_exit"] = gc.isenabled()
print(json.dumps(seen))
"""


def test_the_cyclic_collector_is_paused_until_ready_then_start_up_is_frozen(
    tmp_path: Path, broker: Broker
) -> None:
    wheel = PtyWheel(tmp_path / "wheel")  # noqa: F841 (kept open while the daemon runs)
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "wheel", broker=broker.port, state=tmp_path / "s"
    )
    seen = _last_json(_COLLECTOR, config)
    assert seen["building"] is False
    enabled, frozen = seen["after_ready"]
    assert enabled is True
    assert frozen > 10_000  # the modules, the models, the pipeline: never walked again
    assert seen["after_exit"] is True


def test_a_notify_socket_nobody_reads_never_holds_the_caller(tmp_path: Path) -> None:
    """The datagram queue fills (systemd stuck, a test's socket undrained): a send waits
    a moment at most, where a blocking one froze the loop that decides games; a READY=1
    that could not go is said again with the next message, so systemd still hears it."""
    import socket
    import time

    from wheeld.shell import notify
    from wheeld.shell.notify import SEND_TIMEOUT_S, Notifier

    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(path))
        notifier = Notifier({"NOTIFY_SOCKET": str(path)})
        started = time.monotonic()
        for index in range(40):  # more than the queue holds (10 here, 512 at most)
            notifier.status(f"line {index}")
        full = time.monotonic() - started
        assert full < 40 * SEND_TIMEOUT_S + 1.0
        monkeypatched = notify.ONCE_TIMEOUT_S
        notify.ONCE_TIMEOUT_S = 0.0  # systemd stuck past READY's own wait
        try:
            notifier.ready("idle")  # the queue full: not sent
        finally:
            notify.ONCE_TIMEOUT_S = monkeypatched
        systemd.settimeout(0.5)
        heard = []
        with contextlib.suppress(TimeoutError):
            while True:
                heard.append(systemd.recv(4096).decode())
        assert not any("READY=1" in message for message in heard)
        notifier.status("online")  # room again: READY=1 goes with it
        assert systemd.recv(4096).decode() == "READY=1\nSTATUS=online"
        notifier.status("idle")
        assert systemd.recv(4096).decode() == "STATUS=idle"


def test_ready_waits_a_moment_for_room_in_a_full_queue(tmp_path: Path) -> None:
    """systemd waits for READY=1 and takes it once: a queue full for a moment (a test's
    socket read now and then, systemd at boot) delays it rather than losing it."""
    import socket
    import threading

    from wheeld.shell.notify import Notifier

    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(path))
        notifier = Notifier({"NOTIFY_SOCKET": str(path)})
        for index in range(40):
            notifier.status(f"line {index}")  # the queue full, the rest dropped
        heard: list[str] = []

        def drain_later() -> None:
            systemd.settimeout(2.0)
            threading.Event().wait(0.3)
            with contextlib.suppress(TimeoutError):
                while True:
                    heard.append(systemd.recv(4096).decode())

        reader = threading.Thread(target=drain_later)
        reader.start()
        notifier.ready("idle")
        reader.join()
        assert heard[-1] == "READY=1\nSTATUS=idle"


def test_run_leaves_pydantics_plugin_scan_out_unless_asked_for(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """pydantic reads every installed distribution's entry points for its plugins at the
    first model it builds: ``wheeld run`` turns that off (READY waited for it), unless
    the environment says otherwise."""
    import os

    from wheeld.cli import main

    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) != 0
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "")
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) != 0
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == ""
