"""Real parts for daemon tests: a mosquitto, a pseudo-terminal wheel, the daemon
process, an MQTT subscriber and a systemd notify socket. Every wait has a timeout.

Public: a driver's distribution tests its driver in a real daemon with these,
from an installed wheeld, as wheeld's own tests do."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tty
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


#: Where a test run's port reservations are: one lock file a port, held (flock) by the
#: process that reserved it for as long as it lives, honoured by every run of the suite
#: on the machine (two copies side by side, a demo, another checkout's).
PORT_LOCKS = Path(tempfile.gettempdir()) / "wheeld-test-ports"
_reserved: dict[int, int] = {}


def _server_ports() -> range:
    """Ports no outgoing connection is given: below the kernel's ephemeral range.

    A port picked there and released can be taken by any process's next outgoing
    connection before the server the test starts binds it (found: ``eaddrinuse``
    under load); below the range only a server asking for that very port can.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, low) if low > 12000 else range(1024, 10000)


def free_port() -> int:
    """A port for a server another process starts (mosquitto, a daemon's metrics, ...).

    Such a server cannot be handed a socket the test holds, so the port is held
    another way: reserved by a lock file for this whole test process (no other
    test of any run on the machine is given it), outside the kernel's ephemeral
    range (no outgoing connection takes it meanwhile), and bindable when handed
    out. A server that still finds it taken (a program outside the suite) is
    started again on another one: ``Broker.start``. In-process servers bind port
    0 and keep their socket instead.
    """
    PORT_LOCKS.mkdir(mode=0o777, exist_ok=True)
    ports = _server_ports()
    pick = random.Random(os.urandom(8))
    for _ in range(2000):
        port = pick.choice(ports)
        if port in _reserved:
            continue
        fd = os.open(PORT_LOCKS / str(port), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            os.close(fd)  # reserved by another run, or in use: another one
            continue
        _reserved[port] = fd
        return port
    raise RuntimeError(f"no free port to reserve in {ports.start}-{ports.stop - 1}")


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it is truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Broker:
    """A mosquitto of the test's own, on a free port, that can be stopped and started."""

    def __init__(self, workdir: Path, *, persistent: bool = False) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.conf = workdir / "mosquitto.conf"
        # set_tcp_nodelay: as the shipped example, so a small message is not held behind
        # a large one's unacknowledged tail.
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "set_tcp_nodelay true"]
        if persistent:
            lines += ["persistence true", f"persistence_location {workdir}/"]
            if os.geteuid() == 0:
                # Started as root, mosquitto becomes user "mosquitto", who cannot write
                # its database into a test's private directory (and says so only at exit).
                lines.append("user root")
        else:
            lines += ["persistence false"]
        self.conf.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None
        #: Started once: a restart must come back on the same port.
        self.started = False

    def start(self) -> None:
        """Start mosquitto and wait until it says it runs (its own word, not a port that
        answers: that could be someone else's). A port found in use after all is
        given up for another one, unless the broker was started on it before (a
        restart: the test's clients know that port)."""
        log = self.workdir / "mosquitto.log"
        for _ in range(5):
            said_before = log.stat().st_size if log.exists() else 0
            self.process = subprocess.Popen(
                [MOSQUITTO, "-c", str(self.conf)],
                stdout=subprocess.DEVNULL,
                stderr=log.open("ab"),
            )
            process = self.process

            def said(since: int = said_before) -> str:
                with log.open("rb") as handle:
                    handle.seek(since)
                    return handle.read().decode(errors="replace")

            def up_or_gone(process: subprocess.Popen[bytes] = process) -> bool:
                return " running" in said() or process.poll() is not None

            wait_for(up_or_gone, 20, f"mosquitto on port {self.port}")
            if process.poll() is None:
                self.started = True
                return
            self.process = None
            if "Address already in use" not in said() or self.started:
                raise AssertionError(f"mosquitto stopped: {said().strip()[-300:]}")
            old = self.port
            self.port = free_port()
            self.conf.write_text(
                self.conf.read_text().replace(f"listener {old} ", f"listener {self.port} ")
            )
        raise AssertionError("mosquitto found every port it was given in use")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


class Subscriber:
    """Collects every message under a topic filter, in arrival order."""

    def __init__(self, port: int, topic: str, *, client_id: str | None = None) -> None:
        self.messages: queue.Queue[tuple[str, bytes, bool]] = queue.Queue()
        self.seen: list[tuple[str, Any, bool]] = []
        persistent = client_id is not None
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id or "",
            clean_session=not persistent,
        )
        # paho annotates whole seconds but computes with any number: a subscriber
        # back within 0.1 s of the broker misses nothing a test could wait on.
        self.client.reconnect_delay_set(0.1, 0.5)  # type: ignore[arg-type]
        self.topic = topic
        self.client.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.client.on_message = lambda c, u, m: self.messages.put(
            (m.topic, bytes(m.payload), m.retain)
        )
        self.client.connect("127.0.0.1", port, keepalive=5)
        self.client.loop_start()

    def _drain(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                topic, payload, retain = self.messages.get_nowait()
                try:
                    body: Any = json.loads(payload) if payload else None
                except (ValueError, RecursionError):  # garbage a test left there: as bytes
                    body = payload
                self.seen.append((topic, body, retain))

    def on(self, topic: str) -> list[Any]:
        """Every payload seen on ``topic`` so far."""
        self._drain()
        return [body for t, body, _ in self.seen if t == topic]

    def wait(self, topic: str, predicate: Callable[[Any], bool], timeout: float = 30) -> Any:
        """The first payload on ``topic`` that satisfies ``predicate``."""

        def found() -> Any:
            return next((b for b in self.on(topic) if predicate(b)), None)

        return wait_for(found, timeout, f"a matching message on {topic}")

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


class PtyWheel:
    """A wheel on a real pseudo-terminal, reached through a stable symlink."""

    def __init__(self, link: Path) -> None:
        self.link = link
        self.master = -1
        self.open()

    def open(self) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line discipline: bytes pass as they are
        os.set_blocking(master, False)
        name = os.ttyname(slave)
        os.close(slave)
        tmp = self.link.with_suffix(".new")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(name)
        tmp.replace(self.link)
        self.master = master

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + 10
        while view:
            try:
                written = os.write(self.master, view)
                view = view[written:]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
            self.read()

    def read(self) -> bytes:
        """What the daemon sent to the wheel (drained, so the pty never fills)."""
        try:
            return os.read(self.master, 4096)
        except (BlockingIOError, OSError):
            return b""

    def close(self) -> None:
        # The link goes first: the pty's number is soon another test's, and a
        # daemon reopening the link must not find that one (open() makes a new link).
        with contextlib.suppress(FileNotFoundError):
            self.link.unlink()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


class NotifySocket:
    """A unix datagram socket standing in for systemd's notify socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)
        self.received: list[str] = []

    def messages(self) -> list[str]:
        with contextlib.suppress(TimeoutError, BlockingIOError):
            while True:
                self.received.append(self.sock.recv(4096).decode())
        return self.received

    def ready_at(self, timeout: float) -> float:
        """Block until ``READY=1`` comes: the monotonic time it was received, taken as it
        arrived (``messages`` returns only after a quiet spell of the socket's timeout,
        which a start's timing must not include)."""
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                with contextlib.suppress(TimeoutError):
                    message = self.sock.recv(4096).decode()
                    arrived = time.monotonic()
                    self.received.append(message)
                    if "READY=1" in message:
                        return arrived
        finally:
            self.sock.settimeout(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for READY")

    def close(self) -> None:
        self.sock.close()


class DaemonProcess:
    """``wheeld run`` as a real process."""

    def __init__(self, config: Path, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.workdir = workdir
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "wheeld.log"

    def start(self, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wheeld", "run", "--config", str(self.config), *extra],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            env=self.env,
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> int:
        assert self.process is not None
        self.process.terminate()
        return self.process.wait(15)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON log records so far (``log.format = "json"``); other lines are skipped."""
        records: list[dict[str, Any]] = []
        for line in self.logs().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def ensure_stopped(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def make_signing_key(directory: Path) -> Path:
    """A fresh signing key pair for a test's daemon: ``signing.key`` (0600) and ``signing.pub``.

    Kept when already there, so a restarted daemon signs with the same key.
    """
    from wheeld.core.signing import Signer

    key = directory / "signing.key"
    if not key.exists():
        signer = Signer.generate()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(signer.private_pem())
        (directory / "signing.pub").write_bytes(signer.public_pem())
    return key


def write_config(
    path: Path,
    *,
    port: Path | str,
    broker: int,
    state: Path,
    driver: str = "wrp",
    **sections: str,
) -> Path:
    """A daemon's configuration for a wheel of ``driver`` (any installed driver's name);
    it signs with a key of its own beside the file (``signing.pub`` there) unless
    ``sections`` has a ``signing`` of its own."""
    if "signing" not in sections:
        key = make_signing_key(path.parent)
        sections = {"signing": f"[signing]\nkey_file = {json.dumps(str(key))}", **sections}
    extra = "\n".join(sections.values())
    path.write_text(
        f'[table]\nid = "T9"\n'
        f'[wheel]\ndriver = {json.dumps(driver)}\nport = "{port}"\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker}\nkeepalive_s = 5\n'
        f'[state]\ndir = "{state}"\n'
        f'[log]\nformat = "json"\nlevel = "debug"\n{extra}\n'
    )
    return path


@contextlib.contextmanager
def running(daemon: DaemonProcess, *extra: str) -> Iterator[DaemonProcess]:
    daemon.start(*extra)
    try:
        yield daemon
    finally:
        daemon.ensure_stopped()


def simulated_wheel(link: Path, *, speed: float, seed: int, log: Path) -> subprocess.Popen[bytes]:
    """``wheeld simulate`` playing forever on ``link`` (a pty it makes), its log appended to
    ``log``: the wheel of the rigs that kill and restart things around it."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "wheeld", "simulate", "--link", str(link)),
            *("--speed", str(speed), "--seed", str(seed), "--quiet"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def kill_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL ``process`` (if any) and reap it."""
    if process is not None:
        process.kill()
        process.wait(10)
