"""What ``wheeld run`` needs of this machine, judged before anything starts.

``wheeld run`` and ``wheeld check-config`` read a configuration through
``load_for_run``: the file and the environment (``wheeld.config``), then the
signing key loaded as the daemon loads it, the wheel's port there, the state
directory usable (and not another table's journal), the metrics address free.
Every problem at once, one ``dotted key: message`` line each, in the same
words for both: what check-config accepts, run does not refuse for its
configuration. ``check-config`` (``live``) also asks the network whether each
broker's host resolves, which ``run`` does not wait for (it retries).

The daemon keeps its own checks as they are: a port unplugged, a directory
taken between this look and the start are still one line naming the key.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from wheeld.config import (
    SIGNING_CREDENTIAL,
    Config,
    MetricsConfig,
    MqttConfig,
    SigningConfig,
    StateConfig,
    TableConfig,
    WheelConfig,
    load,
    split_listen,
    split_server,
)
from wheeld.core.signing import Signer, SigningError
from wheeld.shell.journal import JOURNAL_FILE
from wheeld.shell.journal.errors import another_table
from wheeld.shell.link import NOT_A_TERMINAL, PORT_HELD

#: How long a wheel's ``socket://`` port may take to accept a connection.
CONNECT_TIMEOUT_S = 3.0

#: Why ``wheeld run`` refuses a configuration without a signing key.
KEY_NOT_SET = (
    "signing.key_file: not set; every game message is signed "
    "(wheeld keygen --out DIR makes a key; signing.required = false runs unsigned)"
)


def load_for_run(
    path: Path, environ: Mapping[str, str] | None = None, *, live: bool = False
) -> Config:
    """The configuration ``wheeld run`` would start with; ConfigError with every problem,
    the machine's included. ``live``: each broker's host must resolve too."""
    return load(path, environ, checks=lambda sections: machine_problems(sections, live=live))


def machine_problems(sections: Mapping[str, BaseModel], *, live: bool = False) -> list[str]:
    """What the valid ``sections`` (their secret files found) ask of this machine."""
    problems: list[str] = []
    signing = sections.get("signing")
    if isinstance(signing, SigningConfig):
        problems += signing_problems(signing)
    state, table = sections.get("state"), sections.get("table")
    # A running wheeld holds its own port and metrics address: the journal's lock says so.
    held = isinstance(state, StateConfig) and state_dir_holder(state.dir) is not None
    wheel = sections.get("wheel")
    if isinstance(wheel, WheelConfig):
        problems += port_problems(wheel, live=live, opened=not held)
    if isinstance(state, StateConfig):
        problems += state_problems(state, table if isinstance(table, TableConfig) else None)
    metrics = sections.get("metrics")
    if isinstance(metrics, MetricsConfig) and metrics.listen and not held:
        problem = listen_problem(metrics.listen)
        if problem is not None:
            problems.append(problem)
    mqtt = sections.get("mqtt")
    if live and isinstance(mqtt, MqttConfig):
        problems += broker_problems(mqtt)
    return problems


def signing_problems(signing: SigningConfig) -> list[str]:
    """The key must be set (unless not required) and load as the daemon loads it: a PEM
    private key, never its public half. A file not found is said where it was looked for."""
    if signing.key_file is None:
        return [KEY_NOT_SET] if signing.required else []
    try:
        found = signing.key_file.is_file()
    except OSError:  # a name too long, a directory it may not enter
        found = False
    if not found:
        return []  # not found, or not to be looked at: said already, with where and why
    try:
        Signer.from_file(signing.key_file)
    except SigningError as exc:
        return [f"signing.key_file: {exc}"]
    return []


def port_problems(wheel: WheelConfig, *, live: bool = False, opened: bool = True) -> list[str]:
    """A device path must be there (unless waited for) and be a serial device this user
    may read and write, and (``opened``: no wheeld of this table runs, holding it) open as
    the daemon opens it: a terminal no other program holds. A ``socket://`` host must
    resolve (``live``), and, unless waited for (and ``opened``), take a connection: run
    opens it at once, and refused it in pyserial's words (found: ``[Errno 111] Connect
    call failed``, after check-config had said ok)."""
    port = wheel.port
    scheme, sep, _ = port.partition("://")
    if sep:
        if scheme.lower() == "socket":
            from urllib.parse import urlsplit

            host, number = urlsplit(port).hostname or "", urlsplit(port).port or 0
            why = _unresolved(host, number) if live else None
            if why is not None:
                return [f"wheel.port: {port}: {host!r} does not resolve ({why})"]
            why = None if wheel.wait_for_device or not opened else _unreachable(host, number)
            if why is not None:
                return [f"wheel.port: {port}: {why} (wheel.wait_for_device = true waits for it)"]
        elif scheme.lower() == "hwgrep" and not wheel.wait_for_device:
            from serial.tools.list_ports import grep

            from wheeld.config import hwgrep_pattern

            # The n-th match with &n=N (pyserial's option), else the first.
            wanted = next((int(o[2:]) for o in port.split("&")[1:] if o.startswith("n=")), 1)
            if sum(1 for _ in grep(hwgrep_pattern(port))) < wanted:
                return [
                    f"wheel.port: {port}: no serial device matches"
                    + (f" {wanted} times" if wanted > 1 else "")
                    + " (the wheel's adapter unplugged? wheel.wait_for_device = true waits for it)"
                ]
        return []
    try:
        mode = os.stat(port).st_mode
    except FileNotFoundError:
        if wheel.wait_for_device:
            return []
        return [
            f"wheel.port: {port}: no such device (the wheel's adapter unplugged? "
            "wheel.wait_for_device = true waits for it)"
        ]
    except OSError as exc:
        return [f"wheel.port: {port}: {(exc.strerror or str(exc)).lower()}"]
    if not stat.S_ISCHR(mode):
        return [f"wheel.port: {port}: not a serial device (a character device)"]
    if not os.access(port, os.R_OK | os.W_OK):
        return [
            f"wheel.port: {port}: this user may not read and write it "
            "(the units run wheeld in the dialout group)"
        ]
    refusal = open_problem(port) if opened else None
    if refusal == PORT_HELD and wheel.wait_for_device:
        return []  # run waits for it, as for a port not there yet
    return [f"wheel.port: {port}: {refusal}"] if refusal is not None else []


def open_problem(port: str) -> str | None:
    """Open the device as the daemon will (pyserial: read and write, its lock taken), for a
    moment and without waiting for a carrier: why it cannot be the wheel's, or None.

    Found: ``/dev/null`` (a character device, no terminal) and a port another wheeld held
    passed check-config, and run refused them in pyserial's words.
    """
    try:
        fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.EBUSY:  # TIOCEXCL: another program opened it exclusively
            return PORT_HELD
        return (exc.strerror or str(exc)).lower()
    try:
        if not os.isatty(fd):
            return NOT_A_TERMINAL
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return PORT_HELD
    finally:
        os.close(fd)  # closing releases a lock taken
    return None


def state_problems(state: StateConfig, table: TableConfig | None) -> list[str]:
    """The state directory must be writable, or makeable, by this user, and its journal
    (if any) this table's."""
    directory = state.dir
    if not directory.exists():
        parent = next((p for p in directory.parents if p.exists()), Path("/"))
        if not os.access(parent, os.W_OK | os.X_OK):
            return [f"state.dir: {directory}: cannot be made: this user may not write in {parent}"]
        return []
    if not os.access(directory, os.W_OK | os.X_OK):
        return [f"state.dir: {directory}: this user may not write in it"]
    journal = directory / JOURNAL_FILE
    if table is not None and journal.is_file():
        owner = journal_table(journal)
        if owner is not None and owner != table.id:
            return [f"state.dir: {another_table(journal, owner, table.id)}"]
    return []


def journal_table(journal: Path) -> str | None:
    """The table a journal was first opened for, read-only; None when it cannot say."""
    try:
        db = sqlite3.connect(f"{journal.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = db.execute("SELECT value FROM state WHERE key = 'table_id'").fetchone()
    except sqlite3.Error:
        return None  # not a journal, or damaged: the daemon's open says which
    finally:
        db.close()
    return str(row[0]) if row is not None else None


def state_dir_holder(directory: Path) -> str | None:
    """Who holds the state directory now (``another wheeld (pid N)``), or None.

    The directory's lock is tried and let go at once, never kept.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        owner = ""
        with contextlib.suppress(OSError, UnicodeDecodeError):
            owner = (directory / "lock").read_text(encoding="ascii").strip()
        return f"another wheeld (pid {owner})" if owner.isdigit() else "another wheeld"
    finally:
        os.close(fd)  # closing releases a lock taken
    return None


def listen_refusal(code: int | None, text: str) -> str:
    """Why an address cannot be listened on, in words: shared with the metrics endpoint."""
    if code == errno.EADDRINUSE:
        return "the port is in use (another wheeld? each needs its own metrics.listen)"
    return text.lower()


def listen_problem(listen: str) -> str | None:
    """``metrics.listen`` must be an address of this machine with its port free: each
    address it names is bound for a moment, as the endpoint will, and let go."""
    host, port = split_listen(listen)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"metrics.listen: {listen}: {listen_refusal(None, exc.strerror or str(exc))}"
    for family, kind, proto, _, address in dict.fromkeys(found):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                why = listen_refusal(exc.errno, exc.strerror or str(exc))
                return f"metrics.listen: {listen}: {why}"
    return None


def _unresolved(host: str, port: int) -> str | None:
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return exc.strerror or str(exc)
    except UnicodeError:
        return "not a valid host name"
    return None


def _unreachable(host: str, port: int) -> str | None:
    """Why a TCP connection to a wheel's ``socket://`` port is not taken now, or None; the
    connection made is closed at once."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except ConnectionRefusedError:
        return "connection refused: nothing listens there"
    except TimeoutError:
        return f"no answer in {CONNECT_TIMEOUT_S:g} s"
    except socket.gaierror as exc:
        return f"{host!r} does not resolve ({exc.strerror or exc})"
    except (OSError, UnicodeError) as exc:
        return str(getattr(exc, "strerror", None) or exc).lower()


def broker_problems(mqtt: MqttConfig) -> list[str]:
    """Each broker's host must resolve: a mistyped name is otherwise only a retry, for ever."""
    problems = []
    for number, server in enumerate(mqtt.brokers, 1):
        host, port = split_server(server)
        why = _unresolved(host, port)
        if why is None:
            continue
        where = f"mqtt.servers: entry {number}" if mqtt.servers else "mqtt.host"
        problems.append(
            f"{where}: {host!r} does not resolve ({why}): wheeld run would retry it for ever"
        )
    return problems


def config_warnings(config: Config) -> list[str]:
    """What is allowed but likely a mistake, as ``dotted key: message``."""
    warnings = []
    key = config.signing.key_file
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if key is not None and credentials and not key.is_relative_to(credentials):
        # Found beside the file, not among the credentials: not what the units pass.
        warnings.append(
            f"signing.key_file: {key} is not in $CREDENTIALS_DIRECTORY ({credentials}): the "
            f"units pass the key as the credential {SIGNING_CREDENTIAL!r} "
            f'(key_file = "{SIGNING_CREDENTIAL}")'
        )
    base = config.mqtt.base_topic
    if base is not None and config.table.id not in base.split("/"):
        warnings.append(
            f"mqtt.base_topic: {base!r} does not name table.id {config.table.id!r}: "
            f"another table's topics? (left out, it is wheeld/{config.table.id})"
        )
    return warnings
