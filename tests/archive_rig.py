"""Real parts for the archive's tests: a PostgreSQL of the tests' own, a scripted table that
signs, chains, publishes and answers ``recall``, and ``wheeld archive`` as a process.

The PostgreSQL cluster is started by the tests on a free port, in a directory of
their own (``initdb`` and ``pg_ctl`` of the Debian package, as the ``postgres``
user when the tests run as root: PostgreSQL refuses to run as root). Where no
cluster can be started, a database of its own on the machine's server on
127.0.0.1:5432 stands in (dropped after); where neither can be had, the tests skip.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import psycopg
from paho.mqtt.enums import CallbackAPIVersion

from wheeld.core.signing import ChainState, Signer, chain
from wheeld.testing.rig import free_port, wait_for

PG_ROOTS = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)


def _as_postgres() -> list[str]:
    """The prefix that runs a command as the postgres user, when we are root."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root without runuser: cannot start PostgreSQL")
    return [runuser, "-u", "postgres", "--"]


#: Free room a cluster's directory in memory leaves (a worker's cluster grows to a few
#: hundred MiB: a database a test, some 300 files each, and their WAL).
IN_MEMORY_ROOM = 2 << 30


def _in_memory() -> str | None:
    """/dev/shm when it has ``IN_MEMORY_ROOM`` free, else None (the usual temporary
    directory). On disk, deleting a worker's cluster (some 6,000 files) took 9 s of a
    loaded machine, in the teardown of the last test a worker ran, as its other files
    (initdb, a database a test) took their part of each test; nothing there needs to
    outlive the machine's power (the cluster runs with fsync off already)."""
    try:
        room = os.statvfs("/dev/shm")
    except OSError:
        return None
    free = room.f_bavail * room.f_frsize
    return "/dev/shm" if free >= IN_MEMORY_ROOM and os.access("/dev/shm", os.W_OK) else None


class PgCluster:
    """A PostgreSQL cluster of the tests' own, on a free port; stop() and start() at will."""

    def __init__(self) -> None:
        if not PG_ROOTS:
            raise RuntimeError("no initdb (Debian package postgresql)")
        self.bin = PG_ROOTS[0].parent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="wheeld-pg-", dir=_in_memory()))
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.data = self.dir / "data"
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*_as_postgres(), str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            cwd=self.dir,
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off -c max_connections=40"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def destroy(self) -> None:
        # Immediate: its files are deleted next, so a shutdown checkpoint (seconds
        # under load, in the teardown of whichever test a worker ran last) buys nothing.
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def own_cluster() -> PgCluster | None:
    """A cluster of the tests' own, or None where none can be started (no initdb)."""
    try:
        return PgCluster()
    except (RuntimeError, KeyError, OSError, subprocess.CalledProcessError):
        return None


class Databases:
    """Fresh databases, one a test, on a cluster (or the machine's server)."""

    def __init__(self, admin_dsn: str, dsn_of: Any) -> None:
        self.admin_dsn = admin_dsn
        self.dsn_of = dsn_of
        self.made: list[str] = []

    def new(self) -> str:
        name = f"archive_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return str(self.dsn_of(name))

    def drop_all(self) -> None:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self.admin_dsn, autocommit=True) as conn,
        ):
            for name in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def machine_server() -> Databases | None:
    """The machine's PostgreSQL on 127.0.0.1:5432, when it answers."""
    for user in ("postgres", "root"):
        admin = f"host=127.0.0.1 port=5432 user={user} dbname=postgres connect_timeout=3"
        try:
            with psycopg.connect(admin):
                pass
        except psycopg.Error:
            continue
        return Databases(
            admin, lambda name, u=user: f"host=127.0.0.1 port=5432 user={u} dbname={name}"
        )
    return None


def query(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql, params).fetchall())


# -- a table --------------------------------------------------------------------------------


@dataclass
class Published:
    game_id: int
    payload: dict[str, Any]


@dataclass
class ScriptedTable:
    """A table that signs and chains its games as wheeld does, publishes them (or not: a
    message lost on the way), and answers ``recall`` from what it published."""

    port: int
    table: str = "T1"
    signer: Signer = field(default_factory=Signer.generate)
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    #: Answer recall with the messages (False: a journal that no longer holds them).
    remembers: bool = True
    answers: bool = True
    #: Answer recall with its messages altered (a number changed): forgeries.
    forges: bool = False

    def __post_init__(self) -> None:
        self.base = f"wheeld/{self.table}"
        self.state = ChainState()
        self.game = 0
        self.journal: list[Published] = []
        self.recalls: list[dict[str, Any]] = []
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"table-{uuid.uuid4().hex[:8]}",
            protocol=paho.MQTTv5,
        )
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(0.1, 1)  # type: ignore[arg-type]
        self._connected = threading.Event()
        self.client.on_connect = lambda c, u, f, rc, p=None: self._on_connect()
        self.client.connect("127.0.0.1", self.port, keepalive=5)
        self.client.loop_start()
        wait_for(self._connected.is_set, 10, "the table's connection")

    def _on_connect(self) -> None:
        self.client.subscribe(f"{self.base}/command/recall", qos=1)
        self._connected.set()

    def move_to(self, port: int) -> None:
        """Another broker (the first one went down)."""
        self.client.loop_stop()
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self._connected.clear()
        self.port = port
        self.client.connect("127.0.0.1", port, keepalive=5)
        self.client.loop_start()
        wait_for(self._connected.is_set, 10, "the table's connection to the other broker")

    def info(self) -> dict[str, Any]:
        body = {
            "table": self.table,
            "epoch": self.epoch,
            "signing": {"kid": self.signer.kid, "public_key": self.signer.public_pem().decode()},
            "ts": "2026-01-02T10:00:00.000Z",
            "schema_version": 1,
        }
        return self.signer.sign(body)

    def publish_info(self) -> None:
        self.client.publish(f"{self.base}/info", json.dumps(self.info()), qos=1, retain=True)

    def make(self, event: str, **members: Any) -> dict[str, Any]:
        if event == "spinning":
            self.game += 1
        body = {
            "event": event,
            "game_id": self.game,
            "table": self.table,
            "ts": f"2026-01-02T10:{self.game // 60 % 60:02d}:{self.game % 60:02d}.000Z",
            "schema_version": 1,
            "epoch": self.epoch,
            **members,
        }
        signed, self.state = chain(body, self.state, self.signer)
        self.journal.append(Published(self.game, signed))
        return signed

    def send(self, payload: dict[str, Any] | bytes, topic: str | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":"))
        info = self.client.publish(topic or f"{self.base}/game", data, qos=1)
        info.wait_for_publish(10)

    def play(self, number: str = "17", *, publish: bool = True) -> list[dict[str, Any]]:
        """One game: spinning, no_more_bets, result; published unless ``publish`` is False."""
        made = [
            self.make("spinning"),
            self.make("no_more_bets"),
            self.make("result", number=number, color="black"),
        ]
        if publish:
            for message in made:
                self.send(message)
        return made

    def void(self, reason: str = "ball_out") -> dict[str, Any]:
        made = [self.make("spinning"), self.make("no_spin", reason=reason, reasons=[reason])]
        for message in made:
            self.send(message)
        return made[-1]

    def _on_message(self, _c: paho.Client, _u: Any, message: paho.MQTTMessage) -> None:
        command = json.loads(message.payload)
        self.recalls.append(command)
        if self.answers:
            props = getattr(message, "properties", None)
            self.answer(command, getattr(props, "ResponseTopic", None))

    def answer(self, command: dict[str, Any], topic: str | None = None) -> None:
        """Answer a recall from what was published (to ``reply_to`` unless ``topic``)."""
        topic = topic or str(command.get("reply_to"))
        last, upto = command.get("last", 10), command.get("game_id", self.game)
        ids = sorted({p.game_id for p in self.journal if p.game_id <= upto})[-last:]

        def said(payload: dict[str, Any]) -> dict[str, Any]:
            return {**payload, "number": "0"} if self.forges else payload

        games = [
            {
                "game_id": gid,
                "events": [p.payload for p in self.journal if p.game_id == gid],
                "messages": [said(p.payload) for p in self.journal if p.game_id == gid]
                if self.remembers
                else [],
                "frames": [],
            }
            for gid in ids
        ]
        reply = {"ok": True, "games": games, "schema_version": 1}
        if "correlation_id" in command:
            reply["correlation_id"] = command["correlation_id"]
        self.client.publish(topic, json.dumps(reply), qos=1)

    def close(self) -> None:
        self.client.loop_stop()
        with contextlib.suppress(Exception):
            self.client.disconnect()


# -- the archive as a process ------------------------------------------------------------------


class ArchiveProcess:
    """``wheeld archive --config FILE`` as a real process."""

    def __init__(
        self, workdir: Path, *, dsn: str, brokers: list[int], protocol: str = "5", **archive: Any
    ) -> None:
        self.workdir = workdir
        self.alarm_topic = f"wheeld-archive-{uuid.uuid4().hex[:6]}/alarm"
        self.client_id = f"archive-{uuid.uuid4().hex[:8]}"
        settings = {
            "dsn": dsn,
            "tables": ["wheeld/+"],
            "alarm_topic": self.alarm_topic,
            "client_id": self.client_id,
            "recall_timeout_s": 3.0,
            # Gaps asked for at once: the tests wait on the recall, not on its delay.
            "recall_delay_s": 0.5,
            **archive,
        }
        lines = ["[archive]"]
        keys = settings.pop("trusted_keys", None)
        for key, value in settings.items():
            lines.append(f"{key} = {json.dumps(value)}")
        if keys:
            lines.append("[archive.trusted_keys]")
            lines += [f"{table} = {json.dumps(str(path))}" for table, path in keys.items()]
        servers = ", ".join(f'"127.0.0.1:{port}"' for port in brokers)
        lines += ["[mqtt]", f"servers = [{servers}]", "keepalive_s = 5", f'protocol = "{protocol}"']
        lines += ["[log]", 'format = "json"', 'level = "debug"']
        self.config = workdir / "archive.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.log = workdir / "archive.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wheeld", "archive", "--config", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def said(self, event: str) -> list[dict[str, Any]]:
        records = []
        for line in self.logs().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == event:
                    records.append(record)
        return records

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wheeld", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``wheeld archive ACTION ...`` (an answer: verify, gaps, report, game) run by the
    command line's own ``main`` in this process, its status and both streams kept as
    ``run_cli``'s. An answer only reads the database and prints; a process of its own
    was mostly Python's start and wheeld's imports (2 to 7 s each on a loaded machine,
    some 30 of them in tests/test_archive_service.py). ``run_cli`` still runs the
    archive itself, and one answer in a real process (test_games_are_kept_verified_and_answered)."""
    from wheeld.cli import main

    argv = [str(arg) for arg in args]
    assert argv[:1] == ["archive"] and argv[1] in {"verify", "gaps", "report", "game"}, argv
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return subprocess.CompletedProcess(["wheeld", *argv], status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def archiving(archive: ArchiveProcess) -> Iterator[ArchiveProcess]:
    archive.start()
    try:
        yield archive
    finally:
        archive.stop()


def count(dsn: str, sql: str, *params: Any) -> int:
    rows = query(dsn, sql, *params)
    return int(rows[0][0]) if rows else 0


def settle(seconds: float) -> float:
    """A deadline ``seconds`` from now (for wait_for conditions that look at time)."""
    return time.monotonic() + seconds
