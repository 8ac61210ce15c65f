"""``wheeld status``: whether the broker, the wheel and the journal are reachable right now.

One line each, asked afresh (nothing cached), each within a bounded time, and
an exit status that is not 0 when one of them is not. It runs beside the
daemon or without it, as the service's user or root:

- **broker**: each of ``mqtt.servers`` (or ``mqtt.host``) in turn, with a
  throwaway clean-session client (never the daemon's client id, whose session
  it would take over); the first that answers is reachable, and what it
  retains for the table says whether the daemon is online and its health.
- **wheel**: with the daemon running it holds the port exclusively, so the
  daemon's own word is taken (its retained ``<base>/health``: the link and
  when the wheel last spoke). Without it, the port is opened as the daemon
  opens it and listened to: a wheel talks several times a second.
- **journal**: the state directory, the journal read (read-only, no lock) and
  whether it can be written: the directory's permissions, free space on its file
  system, and the running daemon's own word (its ``journal_unwritable`` fault).
  Found: with the disk full the table decided nothing, in fault, and status said
  the journal was reachable and exited 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wheeld.config import Config

#: How long each broker may take to answer, and the wheel to say anything.
DEFAULT_TIMEOUT_S = 3.0
#: Free space under which the state directory's file system is full to the journal: a
#: commit needs a few pages (4 KiB each) of write-ahead log.
FULL_BELOW_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Check:
    """One part's answer: its name, whether it is reachable, and the line's words;
    ``known``: False when nothing could be asked (not reachable either, for the exit)."""

    part: str
    ok: bool
    text: str
    known: bool = True

    def line(self) -> str:
        word = "reachable" if self.ok else "UNREACHABLE" if self.known else "UNKNOWN"
        return f"{self.part}: {word}: {self.text}"


@dataclass(frozen=True, slots=True)
class Daemon:
    """The wheeld holding the state directory, if one runs."""

    pid: int


def running_daemon(state_dir: Path) -> Daemon | None:
    """The wheeld whose pid the state directory's lock names, if it runs.

    Read, never locked: taking the lock, even for a moment, could refuse a
    daemon starting at that instant.
    """
    from wheeld.shell.journal.marks import LOCK_FILE

    try:
        owner = (state_dir / LOCK_FILE).read_text("ascii").strip()
        pid = int(owner)
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if any(b"wheeld" in part for part in command) and b"run" in command:
        return Daemon(pid)
    return None


async def _broker(config: Config, timeout_s: float) -> tuple[Check, dict[str, Any]]:
    """The first broker that answers, and the table's retained status and health on it."""
    import aiomqtt

    from wheeld.shell.mqtt_client import in_words, make_client

    base = config.base_topic
    failures = []
    for server in config.mqtt.brokers:
        client = make_client(
            config,
            client_id=f"wheeld-status-{secrets.token_hex(3)}",  # 20 characters: 3.1.1's limit
            server=server,
            timeout=timeout_s,
        )
        held: dict[str, Any] = {}
        try:
            async with asyncio.timeout(timeout_s + 1.0), client:
                for name in ("status", "health"):
                    await client.subscribe(f"{base}/{name}", qos=1)
                # A barrier: what the broker retains comes before this one's SUBACK.
                await client.subscribe(f"{base}/status/wheeld-status", qos=0)
                try:
                    async with asyncio.timeout(0.3):
                        async for message in client.messages:
                            name = message.topic.value.rpartition("/")[2]
                            if isinstance(message.payload, bytes) and message.payload:
                                try:
                                    held[name] = json.loads(message.payload)
                                except (ValueError, RecursionError):
                                    held[name] = None
                            if len(held) == 2:
                                break
                except TimeoutError:
                    pass
        except (aiomqtt.MqttError, TimeoutError, OSError) as exc:
            failures.append(f"{server}: {in_words(exc)}")
            continue
        said = _daemon_said(held.get("status"))
        return Check("broker", True, f"{server} (MQTT {config.mqtt.protocol}); {said}"), held
    return Check("broker", False, "; ".join(failures) or "no broker configured"), {}


def _daemon_said(status: Any) -> str:
    if not isinstance(status, dict):
        return "the daemon has said nothing there yet"
    state = status.get("state")
    who = status.get("instance")
    words = f"the daemon says {state}" + (f" ({who})" if isinstance(who, str) else "")
    if status.get("fault"):
        words += f", fault {status['fault']}"
    return words


def _health_age_s(health: dict[str, Any]) -> float | None:
    from datetime import datetime

    try:
        said = datetime.fromisoformat(str(health["ts"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return max(0.0, time.time() - said.timestamp())


def _wheel_from_daemon(
    config: Config, daemon: Daemon, broker: Check, held: dict[str, Any]
) -> Check:
    """The running daemon holds the port: what its retained health says of the link."""
    port = config.wheel.port
    health = held.get("health")
    if not broker.ok or not isinstance(health, dict):
        # Found: with the broker down, a wheel the daemon heard every second was called
        # UNREACHABLE; only the daemon knows, and it could not be asked.
        why = "no broker to ask it" if not broker.ok else "it has published no health yet"
        words = f"{port}: held by wheeld (pid {daemon.pid}), which alone can say; {why}"
        return Check("wheel", False, words, known=False)
    link = health.get("link")
    age = _health_age_s(health)
    heard = health.get("last_frame_age_s")
    words = f"{port}: link {link} (said by wheeld pid {daemon.pid}"
    words += f", {age:.0f} s ago)" if age is not None else ")"
    if isinstance(heard, int | float):
        words += f"; the wheel last spoke {heard:.1f} s before that"
    # A health older than two heartbeats: the daemon is no longer heard, nor the wheel.
    stale = age is None or age > 2 * config.metrics.health_interval_s + 5
    if stale:
        words += "; that health is stale"
    return Check("wheel", link == "up" and not stale, words)


def _wheel_listened(config: Config, timeout_s: float) -> Check:
    """No daemon runs: open the port as it would, and wait for the wheel to say anything."""
    import serial

    from wheeld.drivers import UnknownDriver, driver_named

    port = config.wheel.port
    try:
        baudrate = config.wheel.baudrate or driver_named(config.wheel.driver).default_baudrate
    except UnknownDriver as exc:
        return Check("wheel", False, f"wheel.driver: {exc}")
    url = "://" in port
    if not url and not Path(port).exists():
        return Check("wheel", False, f"{port}: no such device")
    options: dict[str, Any] = {} if url else {"exclusive": True}
    try:
        link = serial.serial_for_url(port, baudrate=baudrate, timeout=0.2, **options)
    except (serial.SerialException, OSError, ValueError) as exc:
        from wheeld.shell.link import open_refusal

        return Check("wheel", False, f"{port}: {open_refusal(exc)}")  # run's own words
    got = b""
    started = time.monotonic()
    try:
        while not got and time.monotonic() - started < timeout_s:
            got = link.read(256)
    except (serial.SerialException, OSError) as exc:
        return Check("wheel", False, f"{port}: opened, then {exc}")
    finally:
        link.close()
    if not got:
        return Check(
            "wheel", False, f"{port}: opens, but the wheel said nothing in {timeout_s:g} s"
        )
    took = time.monotonic() - started
    return Check("wheel", True, f"{port}: the wheel spoke within {took:.1f} s (no daemon running)")


def _unwritable(state: Path, daemon: Daemon | None, held: dict[str, Any]) -> str | None:
    """Why the journal cannot be written now, though the directory may be: None if it can."""
    from wheeld.core.health import STOPPING_FAULTS

    said, health = held.get("status"), held.get("health")
    faults = [said.get("fault")] if isinstance(said, dict) else []
    if isinstance(health, dict) and isinstance(health.get("faults"), list):
        faults += health["faults"]
    stopping = sorted({fault for fault in faults if fault in STOPPING_FAULTS})
    if daemon is not None and stopping:
        said_by = ", ".join(stopping)
        return f"the daemon cannot write it ({said_by}: it decides no game until it can)"
    try:
        disk = os.statvfs(state)
    except OSError:
        return None
    free = disk.f_bavail * disk.f_frsize
    if free < FULL_BELOW_BYTES:
        return f"its file system is full ({free} bytes free): no game can be journalled"
    return None


def _journal(
    config: Config, daemon: Daemon | None, retained: dict[str, Any] | None = None
) -> Check:
    """The journal read now; ``retained``: what the broker retains of the daemon (its
    status and health), whose word on writing it counts."""
    from wheeld.shell.journal import JOURNAL_FILE, JournalError, JournalView

    state = config.state.dir
    path = state / JOURNAL_FILE
    if not state.is_dir():
        return Check("journal", False, f"{state}: no such directory (state.dir)")
    writable = os.access(state, os.W_OK | os.X_OK)
    held = f"; in use by wheeld (pid {daemon.pid})" if daemon is not None else ""
    if not path.exists():
        if writable:
            return Check("journal", True, f"{path}: none yet; the daemon makes it at its start")
        return Check("journal", False, f"{state}: cannot be written by this user, and no journal")
    try:
        with JournalView(path) as view:
            games = view.game_ids(1)
    except JournalError as exc:
        return Check("journal", False, str(exc))
    last = f"last game {games[-1]}" if games else "no game yet"
    if not writable and daemon is None:
        return Check("journal", False, f"{path}: {last}; the directory cannot be written")
    why = _unwritable(state, daemon, retained or {})
    if why is not None:
        return Check("journal", False, f"{path}: readable, {last}, but {why}{held}")
    return Check("journal", True, f"{path}: readable, {last}{held}")


async def check(config: Config, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Check]:
    """The broker, the wheel and the journal, each asked now."""
    daemon = running_daemon(config.state.dir)
    if daemon is not None:
        broker, held = await _broker(config, timeout_s)
        wheel = _wheel_from_daemon(config, daemon, broker, held)
    else:
        # Listened to while the broker is asked.
        listened = asyncio.to_thread(_wheel_listened, config, timeout_s)
        (broker, held), wheel = await asyncio.gather(_broker(config, timeout_s), listened)
    return [broker, wheel, _journal(config, daemon, held)]


def main(config: Config, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Print one line a part; 0 when all three are reachable, else 1."""
    checks = asyncio.run(check(config, timeout_s))
    for found in checks:
        print(found.line(), flush=True)
    return 0 if all(found.ok for found in checks) else 1
