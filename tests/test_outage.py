"""A broker outage is loud: health ``fault`` while no broker was ever reached, a log
line at a bounded back-off that names the next try, reasons in words, and
``wheeld status`` saying what is reachable now."""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiomqtt
import pytest
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from tests.test_publisher import Log, config, no_command, until
from tests.test_publisher import running as publishing
from wheeld.core.health import Condition
from wheeld.core.messages import iso_utc
from wheeld.followers import status
from wheeld.shell import outage as outage_module
from wheeld.shell.clock import HostClock
from wheeld.shell.journal import Journal
from wheeld.shell.mqtt_client import in_words
from wheeld.shell.outage import Outage
from wheeld.shell.publisher import Publisher
from wheeld.testing.rig import Broker, DaemonProcess, PtyWheel, running, wait_for, write_config


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port the kernel gave us and we hold, bound but not listening: connections are
    refused, and no other test can take it meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


# -- reasons in words -----------------------------------------------------------------


def _lost(code: int) -> aiomqtt.MqttError:
    try:
        try:
            raise aiomqtt.MqttCodeError(ReasonCode(PacketTypes.DISCONNECT, identifier=code))
        except aiomqtt.MqttCodeError as inner:
            raise aiomqtt.MqttError("Disconnected during message iteration") from inner
    except aiomqtt.MqttError as outer:
        return outer


def _wrapped(cause: BaseException) -> aiomqtt.MqttError:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise aiomqtt.MqttError(str(inner)) from inner
    except aiomqtt.MqttError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (_lost(0x80), "the connection was lost (the broker closed it, or the network dropped it)"),
        (_lost(0x8B), "the broker is shutting down"),
        (_lost(0x8E), "session taken over: another client connected with the same client id"),
        (_wrapped(ConnectionRefusedError(111, "Connection refused")), "connection refused"),
        (_wrapped(socket.gaierror(-2, "Name or service not known")), "does not resolve"),
        (_wrapped(ssl.SSLError(1, "boom")), "TLS: "),
        (aiomqtt.MqttError("Operation timed out"), "no answer from the broker in time"),
        (MqttConnectError(5), "refused: not authorized by the broker"),
    ],
)
def test_broker_errors_are_said_in_words(error: Exception, words: str) -> None:
    said = in_words(ExceptionGroup("serve", [error]))
    assert words in said
    assert "[code:" not in said and "Disconnected during message iteration" not in said


# -- when the outage is said --------------------------------------------------------------


class _StillClock(HostClock):
    """The daemon's clock, stopped: wall 1 000 000 s, monotonic 40 s."""

    def wall(self) -> float:
        return 1_000_000.0

    def monotonic(self) -> float:
        return 40.0


def test_an_outage_reads_the_daemons_clock_not_its_own() -> None:
    outage = Outage(_StillClock())
    assert outage.failed("b:1883", "connection refused", 10.0)
    figures = outage.said("b:1883", "connection refused", 10.0, 5.0)
    assert figures["retry_at"] == iso_utc(1_000_005.0)
    assert outage.ended() == {"down_s": 30.0, "attempts": 1}


def test_an_outage_is_said_at_once_then_ever_less_often_but_at_least_each_minute() -> None:
    outage = Outage()
    said_at = []
    now = 0.0
    while now < 600:
        if outage.failed("b:1883", "connection refused", now):
            figures = outage.said("b:1883", "connection refused", now, 5.0)
            said_at.append(now)
            assert figures["retry_in_s"] == 5.0 and figures["down_s"] == now
        now += 5.0  # a try every 5 s: the Failover's longest pause
    gaps = [b - a for a, b in itertools.pairwise(said_at)]
    assert said_at[0] == 0.0
    assert gaps[:4] == [5.0, 10.0, 20.0, 40.0]
    assert max(gaps) <= 60.0, "never silent for more than a minute"
    assert len(said_at) < 20, "not a line a try"
    # Another reason is news at once.
    assert outage.failed("b:1883", "the broker's host name does not resolve", now)


def test_a_broker_never_reached_is_a_fault_once_reached_only_degraded() -> None:
    never = Condition(link="up", broker="disconnected", faults=("broker_unreachable",))
    assert never.state == "fault"
    assert Condition(link="up", broker="disconnected", faults=()).state == "degraded"


async def test_no_broker_reached_is_loud_and_names_the_next_try(
    tmp_path: Path, refusing_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outage_module, "OUTAGE_SAY_FIRST_S", 0.5)
    journal = Journal(tmp_path / "journal.sqlite")
    log = Log()
    publisher = Publisher(config(refusing_port), journal, on_command=no_command, log=log)
    try:
        async with publishing(publisher):
            await until(
                lambda: len(log.at("error", "no broker reached since start")) >= 2, "said twice"
            )
            said = log.at("error", "no broker reached since start")
            assert publisher.unreachable and not publisher.reached
    finally:
        journal.close()
    first = said[0]
    assert first["error"].startswith("connection refused")
    assert first["server"] == f"127.0.0.1:{refusing_port}"
    assert first["retry_in_s"] >= 0 and first["retry_at"].endswith("Z")
    assert said[1]["attempts"] > first["attempts"]


# -- wheeld status -------------------------------------------------------------------------


def _status(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wheeld", "status", "--config", str(config_path), "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_status_says_what_is_unreachable_one_line_each(tmp_path: Path, refusing_port: int) -> None:
    config_path = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "no-wheel",
        broker=refusing_port,
        state=tmp_path / "no-state",
    )
    done = _status(config_path)
    assert done.returncode == 1, done
    assert done.stderr == ""
    broker, wheel, journal = done.stdout.splitlines()
    assert broker.startswith(f"broker: UNREACHABLE: 127.0.0.1:{refusing_port}: connection refused")
    assert wheel == f"wheel: UNREACHABLE: {tmp_path / 'no-wheel'}: no such device"
    assert journal.startswith("journal: UNREACHABLE: ") and "no such directory" in journal


def test_status_says_why_a_port_is_no_wheel_in_runs_words(tmp_path: Path) -> None:
    """Found on the first day: `/dev/null` was pyserial's `Could not configure port: (25,
    'Inappropriate ioctl for device')`; a held port `[Errno 11] Could not exclusively lock
    port ...`. They are said as run and check-config say them."""
    from wheeld.config import load
    from wheeld.shell.link import NOT_A_TERMINAL, PORT_HELD

    null = write_config(tmp_path / "null.toml", port="/dev/null", broker=1, state=tmp_path)
    assert status._wheel_listened(load(null), 0.1).line() == (
        f"wheel: UNREACHABLE: /dev/null: {NOT_A_TERMINAL}"
    )
    pty = PtyWheel(tmp_path / "wheel0")
    held = open(pty.link, "rb", buffering=0)  # noqa: SIM115
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        config = write_config(tmp_path / "held.toml", port=pty.link, broker=1, state=tmp_path)
        assert status._wheel_listened(load(config), 0.1).line() == (
            f"wheel: UNREACHABLE: {pty.link}: {PORT_HELD}"
        )
    finally:
        held.close()
        pty.close()


def test_status_beside_a_running_daemon_says_all_three_reachable(
    tmp_path: Path, broker: Broker
) -> None:
    pty = PtyWheel(tmp_path / "wheel0")
    config_path = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
        metrics="[metrics]\nhealth_interval_s = 5",
    )
    daemon = DaemonProcess(config_path, tmp_path)
    talking = threading.Event()

    def wheel_talks() -> None:  # a wheel says something several times a second
        while not talking.wait(0.1):
            pty.write(b"noise\r\n")  # any line: the link is judged by what arrives

    talker = threading.Thread(target=wheel_talks, daemon=True)
    talker.start()
    try:
        with running(daemon):
            wait_for(lambda: "wheeld ready" in daemon.logs(), 30, "the daemon ready")
            # Asked until the daemon's health says the link is up (it is said on a change).
            done = wait_for(
                lambda: (answer := _status(config_path)).returncode == 0 and answer,
                30,
                "status: all three reachable",
            )
    finally:
        talking.set()
        talker.join(5)
        pty.close()
    broker_line, wheel, journal = done.stdout.splitlines()
    assert broker_line.startswith(f"broker: reachable: 127.0.0.1:{broker.port} (MQTT 5)")
    assert "the daemon says online" in broker_line
    assert wheel.startswith(f"wheel: reachable: {tmp_path / 'wheel0'}: link up (said by wheeld")
    assert journal.startswith(f"journal: reachable: {tmp_path / 'state'}/journal.sqlite3")


def _journal_check(tmp_path: Path, daemon: Any, retained: dict[str, Any]) -> status.Check:
    """The journal's line of ``wheeld status`` for a journal of one game in tmp_path."""
    from wheeld.config import load

    state = tmp_path / "state"
    journal = Journal(state / "journal.sqlite3")
    journal.close()
    config_path = write_config(tmp_path / "c.toml", port="/dev/null", broker=1, state=state)
    return status._journal(load(config_path), daemon, retained)


def test_status_says_a_journal_the_daemon_cannot_write_is_not_reachable(tmp_path: Path) -> None:
    """Found on the first day: the disk full, the daemon in fault deciding nothing, and
    status said the journal was reachable, exit 0. The daemon's own word counts."""
    daemon = status.Daemon(pid=os.getpid())
    said = {"status": {"state": "fault", "fault": "journal_unwritable"}}
    check = _journal_check(tmp_path, daemon, said)
    assert not check.ok
    assert check.line().startswith("journal: UNREACHABLE: ")
    assert "the daemon cannot write it (journal_unwritable" in check.line()
    healthy = _journal_check(tmp_path / "again", daemon, {"status": {"state": "online"}})
    assert healthy.ok, healthy.line()


def test_status_says_a_full_file_system_is_not_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No daemon to ask: the state directory's free space says it."""
    real = os.statvfs

    def full(path: Any) -> Any:
        found = real(path)
        return SimpleNamespace(f_bavail=0, f_frsize=found.f_frsize)

    monkeypatch.setattr(os, "statvfs", full)
    check = _journal_check(tmp_path, None, {})
    assert not check.ok
    assert "its file system is full (0 bytes free)" in check.line()


def test_status_without_a_broker_does_not_call_the_daemons_wheel_unreachable(
    tmp_path: Path,
) -> None:
    """Found on the first day: the broker down, the daemon hearing its wheel every second,
    and status said `wheel: UNREACHABLE`: only the daemon knows, and it could not be asked."""
    from wheeld.config import load

    config_path = write_config(tmp_path / "c.toml", port="/dev/wheel-T9", broker=1, state=tmp_path)
    broker = status.Check("broker", False, "127.0.0.1:1: connection refused")
    check = status._wheel_from_daemon(load(config_path), status.Daemon(pid=812), broker, {})
    assert not check.ok  # status still exits 1: the wheel is not known to be reachable
    assert check.line() == (
        "wheel: UNKNOWN: /dev/wheel-T9: held by wheeld (pid 812), which alone can say; "
        "no broker to ask it"
    )


# -- Ctrl-C at any moment -------------------------------------------------------------------

#: ``wheeld run`` as the console script starts it (its name is ``wheeld``), saying "go"
#: once the package is imported: the moment from which wheeld can keep Ctrl-C to one line
#: (before it, the interpreter itself is still starting).
_CONSOLE = (
    # SIGINT as a terminal gives it (a test run in the background would have it ignored).
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "import sys; sys.argv[0] = 'wheeld'; import wheeld; print('go', flush=True); "
    # Every thread's stack on SIGUSR2: what a daemon that does not stop is waiting for.
    "import faulthandler; faulthandler.register(signal.SIGUSR2, all_threads=True); "
    "from wheeld.cli import main; sys.exit(main())"
)


@pytest.mark.parametrize("after_s", [0.0, 0.03, 0.1, 0.3, 1.0, 2.5])
def test_ctrl_c_at_any_moment_of_run_is_one_line_never_a_traceback(
    tmp_path: Path, refusing_port: int, after_s: float
) -> None:
    config_path = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "no-wheel",
        broker=refusing_port,
        state=tmp_path / "state",
        signing="[signing]\nrequired = false",
    )
    # No wheel yet: the daemon waits for it, so every moment of a start can be reached.
    text = config_path.read_text()
    config_path.write_text(text.replace('driver = "wrp"', 'driver = "wrp"\nwait_for_device = true'))
    daemon = subprocess.Popen(
        [sys.executable, "-c", _CONSOLE, "run", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        assert daemon.stdout.readline() == "go\n"
        time.sleep(after_s)  # the moment of the Ctrl-C is what is tested, not a wait
        daemon.send_signal(signal.SIGINT)
        try:
            _, err = daemon.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            # Seen once in CI (1.0 s, four workers): still running 30 s after the Ctrl-C,
            # not reproduced since. What it waits for, to say so, rather than a bare timeout.
            daemon.send_signal(signal.SIGUSR2)
            time.sleep(1.0)
            daemon.kill()
            _, err = daemon.communicate()
            pytest.fail(f"still running 30 s after Ctrl-C; its threads:\n{err[-6000:]}")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert daemon.returncode in (0, 130), err
    last = err.strip().splitlines()[-1]
    assert last in ("wheeld: interrupted", "wheeld run: interrupted") or (
        '"event": "wheeld stopping"' in last
    ), err
