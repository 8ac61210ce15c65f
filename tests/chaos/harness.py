"""The chaos rig: a real broker, a simulated wheel, the daemon, and a subscriber
that remembers everything, so faults can be thrown at the daemon and the
journal checked against what the casino's systems actually received.

- mosquitto on a free port, persistent, saving its database on every change,
  so a SIGKILLed broker comes back with the sessions and queued messages;
- ``wheeld simulate`` on a pty, playing games forever at ``speed``;
- ``wheeld run`` as a subprocess;
- a persistent MQTT subscriber (clean session off, QoS 1) on ``<base>/#``.

``ChaosRig.finish`` stops the wheel (its open game ends as a lost link), waits
until the subscriber has every journalled decision, stops the daemon and
returns ``check``'s verdict on the journal against what was received.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wheeld.core.signing import load_public_key, signature_problem
from wheeld.shell.journal import JOURNAL_FILE, Journal
from wheeld.shell.journal.codec import unpack_payload
from wheeld.testing.rig import (
    Broker,
    DaemonProcess,
    Subscriber,
    kill_process,
    make_signing_key,
    simulated_wheel,
    wait_for,
)

TABLE = "CHAOS"
BASE = f"wheeld/{TABLE}"
GAME_TOPIC = f"{BASE}/game"
ALARM_TOPIC = f"{BASE}/alarm"
STATUS_TOPIC = f"{BASE}/status"
RESULT_TOPIC = f"{BASE}/result"
HISTORY_TOPIC = f"{BASE}/history"
TABLE_TOPIC = f"{BASE}/table"
_PROBE_TOPIC = f"{BASE}/chaos/probe"
#: Where the operator's console asks for command replies (under mqtt.reply_prefix).
REPLY_TOPIC = "wheeld-replies/chaos"
#: The daemon's broker user: the ACL can take its write on <base>/game away.
DAEMON_USER = f"wheeld-{TABLE}"
_DAEMON_PASSWORD = "chaos"
#: Big enough for a long run's journal and write-ahead log, small enough to fill at once.
STATE_TMPFS_SIZE = "16m"
#: Debian's libfaketime (package faketime), the thread-safe build: the daemon has threads.
LIBFAKETIME = next(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"), None)
_ENDS = ("result", "no_spin")
#: Game messages per game at the most (spinning, no_more_bets, its end).
_MESSAGES_PER_GAME = 3
_subscriber_ids = itertools.count(1)


class ChaosBroker(Broker):
    """A persistent mosquitto that writes its database on every change, with an ACL.

    mosquitto saves only at exit by default: killed, it would forget the
    subscriber's session and the messages queued for it, a loss that is the
    broker's and not the daemon's.

    The daemon logs in as ``DAEMON_USER``; everyone else (the subscriber, the
    operator's console) is anonymous and may do anything. ``refuse_game``
    takes the daemon's write on ``<base>/game`` away, live (SIGHUP reloads the
    ACL), so its PUBACKs there say 0x87 Not authorized.
    """

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, persistent=True)
        self.acl = workdir / "mosquitto.acl"
        self.passwords = workdir / "mosquitto.passwd"
        self.refusing = False
        self._write_acl()
        subprocess.run(
            ["mosquitto_passwd", "-b", "-c", str(self.passwords), DAEMON_USER, _DAEMON_PASSWORD],
            check=True,
            capture_output=True,
        )
        with self.conf.open("a") as conf:
            conf.write("autosave_on_changes true\nautosave_interval 1\n")
            conf.write(f"password_file {self.passwords}\nacl_file {self.acl}\n")

    def _write_acl(self) -> None:
        deny = f"topic deny {GAME_TOPIC}\n" if self.refusing else ""
        self.acl.write_text(
            "topic readwrite #\n"  # anonymous clients: the subscriber and the operator
            f"user {DAEMON_USER}\n"
            f"topic readwrite {BASE}/#\n"
            f"{deny}"
            "topic write wheeld-replies/#\n"
        )

    def refuse_game(self, refusing: bool) -> None:
        """Take the daemon's write on ``<base>/game`` away, or give it back, and reload."""
        self.refusing = refusing
        self._write_acl()
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        """SIGKILL: no goodbye to clients, nothing saved beyond the last autosave."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


@dataclass(slots=True)
class Verdict:
    """What ``check`` found: ``problems`` is empty when the run was clean."""

    problems: list[str] = field(default_factory=list)
    journalled: int = 0
    received: int = 0
    duplicates: int = 0
    games: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = (
            f"{self.games} games, {self.journalled} decisions journalled, "
            f"{self.received} messages received ({self.duplicates} duplicates)"
        )
        return "\n".join([head, *self.problems])


def _canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def check(
    journal: list[tuple[int, str, str]],
    received: list[Any],
    public_key: Ed25519PublicKey | None = None,
) -> Verdict:
    """The journal against what the persistent subscriber received on ``<base>/game``.

    Nothing lost (every journalled decision received), nothing invented (every
    message received is journalled), each game id opened once, in increasing
    order, ended exactly once, and ``spinning`` before everything else of its
    game, in the journal and in the order of arrival. A message received twice
    is a duplicate (QoS 1 allows it), not a problem.
    """
    verdict = Verdict(journalled=len(journal), received=len(received))
    problems = verdict.problems
    journalled = [json.loads(payload) for _, _, payload in journal]
    events: dict[int, list[str]] = defaultdict(list)
    last_opened = 0
    for (game_id, _, _), payload in zip(journal, journalled, strict=True):
        event = payload.get("event")
        if payload.get("game_id") != game_id:
            problems.append(f"journal: game {game_id} holds a payload of {payload.get('game_id')}")
        if event == "spinning":
            if game_id <= last_opened:
                problems.append(f"journal: game id {game_id} opened after {last_opened}")
            last_opened = max(last_opened, game_id)
        elif not events[game_id] and _unrecorded_void(payload):
            pass  # the journal could not keep its start: its void is all there is of it
        elif not events[game_id] or events[game_id][0] != "spinning":
            problems.append(f"journal: {event} of game {game_id} before its spinning")
        events[game_id].append(event)
    for game_id, seen in sorted(events.items()):
        ends = sum(event in _ENDS for event in seen)
        if ends != 1:
            problems.append(f"journal: game {game_id} ended {ends} times ({', '.join(seen)})")
        elif seen[-1] not in _ENDS:
            problems.append(f"journal: game {game_id} went on after its end ({', '.join(seen)})")
    verdict.games = len(events)

    wanted = {_canonical(payload) for payload in journalled}
    arrivals = Counter(_canonical(payload) for payload in received)
    verdict.duplicates = sum(count - 1 for count in arrivals.values())
    problems += [f"lost: {text}" for text in sorted(wanted - arrivals.keys())]
    problems += [f"invented: {text}" for text in sorted(arrivals.keys() - wanted)]
    first_seen: dict[int, list[str]] = defaultdict(list)
    for text in dict.fromkeys(_canonical(payload) for payload in received):
        payload = json.loads(text)
        if isinstance(payload, dict) and isinstance(payload.get("game_id"), int):
            first_seen[payload["game_id"]].append(str(payload.get("event")))
    for game_id, seen in sorted(first_seen.items()):
        if seen[0] != "spinning" and "spinning" in seen:
            problems.append(f"received: game {game_id} arrived as {', '.join(seen)}")
        if sum(event in _ENDS for event in seen) > 1:
            problems.append(f"received: game {game_id} ended twice ({', '.join(seen)})")
    if public_key is not None:
        problems += _signatures_and_seqs(received, public_key)
    return verdict


def _signatures_and_seqs(received: list[Any], public_key: Ed25519PublicKey) -> list[str]:
    """Every message genuine, and no seq ever carried by two different messages."""
    problems = []
    by_seq: dict[Any, str] = {}
    for payload in received:
        if not isinstance(payload, dict):
            continue
        why = signature_problem(payload, public_key)
        if why is not None:
            problems.append(f"received: seq {payload.get('seq')}: {why}")
        text = _canonical(payload)
        if by_seq.setdefault(payload.get("seq"), text) != text:
            problems.append(f"received: seq {payload.get('seq')} carried two different messages")
    return problems


def _unrecorded_void(payload: Any) -> bool:
    """A game the journal could not keep, voided once it could (docs/architecture.md)."""
    return bool(payload.get("event") == "no_spin" and payload.get("reason") == "controller_restart")


def _live_journal(path: Path) -> list[tuple[int, str, str]]:
    """The decisions of a journal a running daemon holds (read-only, beside its lock)."""
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
        rows = db.execute("SELECT game_id, event, payload FROM decisions ORDER BY id").fetchall()
    return [(int(row[0]), str(row[1]), unpack_payload(row[2])) for row in rows]


class ChaosRig:
    """Broker, wheel, daemon and subscriber in ``workdir``; faults are thrown at them."""

    def __init__(self, workdir: Path, *, seed: int, speed: float = 20.0) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.speed = speed
        self.broker = ChaosBroker(workdir)
        self.link = workdir / "wheel"
        self.state = workdir / "state"
        self.journal_path = self.state / JOURNAL_FILE
        self.config = workdir / "wheeld.toml"
        self.daemon = DaemonProcess(self.config, workdir)
        self.wheel: subprocess.Popen[bytes] | None = None
        self.subscriber: Subscriber | None = None
        self.operator: paho.Client | None = None
        self._replies: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._replies_seen: list[tuple[str, Any]] = []
        #: How many replies each command had before the last one of its kind was sent.
        self._asked: dict[str, int] = {}
        self.wheels_started = 0
        #: Decisions of journals a fault moved aside or deleted, oldest first.
        self.retired: list[tuple[int, str, str]] = []
        #: The daemon's wall clock, ahead of the host's by this much (libfaketime).
        self.clock_offset_s = 0
        self._faketime = workdir / "faketime"
        self._tmpfs = False
        #: What each optional part could not have, by name (empty when it is there).
        self.missing: dict[str, str] = {}
        if LIBFAKETIME is not None:
            self._faketime.write_text("+0\n")
            self.daemon.env.update(
                LD_PRELOAD=str(LIBFAKETIME),
                FAKETIME_TIMESTAMP_FILE=str(self._faketime),
                FAKETIME_NO_CACHE="1",
                # A clock step moves the wall clock only, as NTP's does.
                FAKETIME_DONT_FAKE_MONOTONIC="1",
            )
        else:
            self.missing["clock"] = "libfaketime not found (apt-get install faketime)"

    # -- the parts -------------------------------------------------------------

    def start(self) -> None:
        """Everything up, and one game seen through to the subscriber."""
        self._mount_state()
        self.broker.start()
        write_chaos_config(self.config, link=self.link, broker=self.broker.port, state=self.state)
        client_id = f"chaos-{os.getpid()}-{next(_subscriber_ids)}"
        self.subscriber = Subscriber(self.broker.port, f"{BASE}/#", client_id=client_id)
        # Its own probe coming back proves the subscription (and so the session) exists;
        # retained, so it comes back even when it reaches the broker before the SUBSCRIBE.
        self.subscriber.client.publish(_PROBE_TOPIC, b"{}", qos=1, retain=True)
        wait_for(lambda: self.on_topic(_PROBE_TOPIC), 10, "the subscriber's probe")
        self.operator = paho.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=paho.MQTTv5)
        replies = f"{REPLY_TOPIC}/#"
        self.operator.on_connect = lambda c, u, f, rc, p=None: c.subscribe(replies, qos=1)
        self.operator.reconnect_delay_set(1, 2)
        self.operator.on_message = lambda c, u, m: self._replies.put(
            (m.topic, json.loads(m.payload))
        )
        self.operator.connect("127.0.0.1", self.broker.port, keepalive=5)
        self.operator.loop_start()
        self.start_wheel()
        self.daemon.start()
        self.wait_game_ends(1)

    def _mount_state(self) -> None:
        """The state directory on a small tmpfs of its own, so a fault can fill it."""
        self.state.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0 or shutil.which("mount") is None:
            self.missing["disk"] = "mounting a tmpfs needs root"
            return
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={STATE_TMPFS_SIZE}", "tmpfs", str(self.state)],
            check=False,
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            self.missing["disk"] = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
            return
        self._tmpfs = True

    def step_clock(self, seconds: int) -> None:
        """Step the daemon's wall clock (only the daemon's) by ``seconds``, at once."""
        assert "clock" not in self.missing
        self.clock_offset_s += seconds
        temporary = self._faketime.with_suffix(".new")
        temporary.write_text(f"{self.clock_offset_s:+d}\n")
        temporary.replace(self._faketime)  # libfaketime must never read half a file

    def command(self, name: str, payload: bytes, *, retain: bool = False) -> None:
        """Publish on ``<base>/command/<name>``; a reply is asked for unless retained."""
        operator = self.operator
        assert operator is not None
        # Back from a broker restart first (paho reconnects on its own, a second later).
        self._wait_playing(operator.is_connected, 15, "the operator's console to reconnect")
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        if not retain:
            properties.ResponseTopic = f"{REPLY_TOPIC}/{name}"
            # Counted before it goes: its reply may come before anyone waits for it.
            self._asked[name] = len(self.replies(name))
        info = operator.publish(
            f"{BASE}/command/{name}", payload, qos=1, retain=retain, properties=properties
        )
        info.wait_for_publish(10)

    def replies(self, name: str) -> list[Any]:
        """Every reply to command ``name`` so far, oldest first."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._replies_seen.append(self._replies.get_nowait())
        return [body for topic, body in self._replies_seen if topic == f"{REPLY_TOPIC}/{name}"]

    def wait_reply(self, name: str, timeout: float = 10) -> Any:
        """The reply to the last command ``name`` sent."""
        count = self._asked.get(name, 0)
        wait_for(lambda: len(self.replies(name)) > count, timeout, f"a reply to {name}")
        return self.replies(name)[count]

    def subscriber_wait(
        self,
        topic: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        mark: int = 0,
        timeout: float = 20,
    ) -> dict[str, Any]:
        """The first JSON object on ``topic``, from its ``mark``-th message on, that matches."""

        def found() -> dict[str, Any] | None:
            return next(
                (p for p in self.on_topic(topic)[mark:] if isinstance(p, dict) and predicate(p)),
                None,
            )

        found_it: dict[str, Any] = self._wait_for_value(found, timeout, f"a message on {topic}")
        return found_it

    def _wait_for_value(self, find: Callable[[], Any], timeout: float, what: str) -> Any:
        """``wait_for`` returning what ``find`` found, failing early if a part died."""

        def met() -> Any:
            self._assert_running()
            return find()

        return wait_for(met, timeout, what)

    def wait_connected_for(self, seconds: float, timeout: float = 30) -> None:
        """Wait until the daemon's broker connection has held for ``seconds``."""

        def held() -> bool:
            connected = [
                line for line in self.daemon.log_lines() if line.get("event") == "broker connected"
            ]
            if not connected:
                return False
            # The daemon's log stamps its own (possibly stepped) wall clock.
            stamp = datetime.fromisoformat(connected[-1]["timestamp"]).timestamp()
            return time.time() + self.clock_offset_s - stamp >= seconds

        self._wait_playing(held, timeout, f"a broker connection {seconds} s old")

    def wait_spinning(self, timeout: float = 30) -> int:
        """Wait for the next game to start at the subscriber; returns its game id."""
        count = len(self._spinning())
        self._wait_playing(lambda: len(self._spinning()) > count, timeout, "a game starting")
        return int(self._spinning()[count]["game_id"])

    def _spinning(self) -> list[Any]:
        return [p for p in self.received() if isinstance(p, dict) and p.get("event") == "spinning"]

    def end_of(self, game_id: int, timeout: float = 30) -> Any:
        """Wait for game ``game_id`` to end at the subscriber; returns its end."""

        def ended() -> Any:
            return next(
                (
                    p
                    for p in self.received()
                    if isinstance(p, dict)
                    and p.get("game_id") == game_id
                    and p.get("event") in _ENDS
                ),
                None,
            )

        return wait_for(ended, timeout, f"the end of game {game_id}")

    def start_wheel(self) -> None:
        """A fresh simulated wheel on the link (a new seed each time, drawn from the rig's)."""
        self.wheels_started += 1
        self.wheel = simulated_wheel(
            self.link,
            speed=self.speed,
            seed=self.rng.randrange(2**31),
            log=self.workdir / "simulate.log",
        )

    def kill_wheel(self) -> None:
        """The wheel's end of the link vanishes: SIGKILL, its pty closes under the daemon."""
        kill_process(self.wheel)
        self.wheel = None

    def kill_daemon(self) -> None:
        """SIGKILL the daemon: no clean stop, whatever it was doing is cut short."""
        self.daemon.kill()
        self.daemon.process = None

    def _assert_running(self) -> None:
        """Fail at once, naming it, when a part died that nobody killed."""
        parts = (
            ("wheeld run", self.daemon.process, self.daemon.log),
            ("wheeld simulate", self.wheel, self.workdir / "simulate.log"),
            ("mosquitto", self.broker.process, self.workdir / "mosquitto.log"),
        )
        for name, process, log in parts:
            if process is not None and process.poll() is not None:
                lines = log.read_text(errors="replace").splitlines() if log.exists() else []
                last = lines[-1] if lines else "(no output)"
                raise AssertionError(f"{name} exited with status {process.returncode}: {last}")

    def _wait_playing(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """``wait_for``, failing early if a part of the rig died."""
        self._wait_for_value(condition, timeout, what)

    def on_topic(self, topic: str) -> list[Any]:
        assert self.subscriber is not None
        return self.subscriber.on(topic)

    def received(self) -> list[Any]:
        """Every ``<base>/game`` payload received so far, duplicates included."""
        return self.on_topic(GAME_TOPIC)

    def _ends(self) -> int:
        return sum(
            1
            for payload in self.received()
            if isinstance(payload, dict) and payload.get("event") in _ENDS
        )

    def wait_game_ends(self, count: int, timeout: float | None = None) -> None:
        """Wait until ``count`` more games have ended at the subscriber."""
        target = self._ends() + count
        # A limit, not a duration: a machine shared with other suites plays slower.
        limit = timeout if timeout is not None else 60.0 + 15.0 * count
        self._wait_playing(lambda: self._ends() >= target, limit, f"{count} more game ends")

    def random_point(self) -> None:
        """Wait for an arbitrary instant of play: a few game messages on, then a jitter."""
        target = len(self.received()) + self.rng.randint(1, 2 * _MESSAGES_PER_GAME)
        self._wait_playing(lambda: len(self.received()) >= target, 30, "game messages")
        # Not a wait for anything: the fault must also land between two messages.
        time.sleep(self.rng.uniform(0.0, 1.0))

    def outage(self, longest: float = 1.5) -> None:
        """A part stays down for a random while before it is brought back."""
        # Not a wait for anything: how long the fault lasts is part of the fault.
        time.sleep(self.rng.uniform(0.0, longest))

    # -- the end ---------------------------------------------------------------

    def journalled(self) -> list[tuple[int, str, str]]:
        """Every decision journalled so far: retired journals first, then the live one."""
        return self.retired + _live_journal(self.journal_path)

    def wait_drained(self, timeout: float = 30.0) -> None:
        """Wait until the subscriber has every decision the journals hold."""

        def drained() -> bool:
            wanted = {_canonical(json.loads(p)) for _, _, p in self.journalled()}
            return wanted <= {_canonical(payload) for payload in self.received()}

        wait_for(drained, timeout, "every journalled decision at the subscriber")

    def stop_daemon_drained(self) -> None:
        """Stop the wheel (its game ends as a lost link), deliver everything, stop cleanly.

        What a fault that replaces the journal needs first: anything still in
        the outbox would go with the old journal.
        """
        self.kill_wheel()
        self.wait_drained()
        status = self.daemon.terminate()
        self.daemon.process = None
        assert status == 0, f"wheeld run stopped with status {status}"

    def keep_decisions(self) -> None:
        """Keep the stopped daemon's decisions for the check: its journal is about to go."""
        self.retired += _live_journal(self.journal_path)

    def retire_journal(self, how: Callable[[Path], object]) -> None:
        """Do ``how`` (move aside, delete) to the journal's files, once ``keep_decisions``."""
        for suffix in ("", "-wal", "-shm"):
            path = self.journal_path.with_name(self.journal_path.name + suffix)
            if path.exists():
                how(path)

    def fill_disk(self) -> Path:
        """Fill the state directory's tmpfs to the last byte; returns the filler to delete."""
        assert self._tmpfs, self.missing.get("disk")
        filler = self.state / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # Past what statvfs says is free: the last partial block must go as well.
            for size in (1 << 20, 4096, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, bytes(size)):
                        pass
        finally:
            os.close(fd)
        return filler

    def finish(self, drain_timeout: float = 30.0) -> Verdict:
        """Stop the wheel, let the daemon publish all it journalled, stop it, judge."""
        self.kill_wheel()

        # What is still missing after the timeout is reported as lost by check().
        with contextlib.suppress(AssertionError):
            self.wait_drained(drain_timeout)
        if self.daemon.process is not None and self.daemon.process.poll() is None:
            self.daemon.terminate()
        journal = Journal(self.journal_path)
        try:
            rows = self.retired + journal.decisions()
        finally:
            journal.close()
        public_key = load_public_key(self.config.parent / "signing.pub")
        verdict = check(rows, self.received(), public_key)
        broker_log = (self.workdir / "mosquitto.log").read_text(errors="replace")
        if "Error saving" in broker_log:
            # Then a killed broker forgets sessions: a loss the daemon is not to blame for.
            verdict.problems.append("broker: could not save its database (see mosquitto.log)")
        return verdict

    def close(self) -> None:
        """Stop whatever is still running; safe after any failure."""
        self.kill_wheel()
        self.daemon.ensure_stopped()
        if self.subscriber is not None:
            self.subscriber.close()
            self.subscriber = None
        if self.operator is not None:
            self.operator.loop_stop()
            self.operator.disconnect()
            self.operator = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.broker.stop()
        if self._tmpfs:
            # Lazily: a process the rig lost track of must not keep the mount forever.
            subprocess.run(["umount", "-l", str(self.state)], check=False, capture_output=True)
            self._tmpfs = False


def write_chaos_config(path: Path, *, link: Path, broker: int, state: Path) -> None:
    """A daemon for table ``TABLE``, logging in as ``DAEMON_USER``, signing with a key
    beside the configuration (never in the state directory the faults attack)."""
    key = make_signing_key(path.parent)
    path.write_text(
        f'[table]\nid = "{TABLE}"\n'
        f'[wheel]\ndriver = "wrp"\nport = "{link}"\nwait_for_device = true\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker}\nkeepalive_s = 5\n'
        f'username = "{DAEMON_USER}"\npassword = "{_DAEMON_PASSWORD}"\n'
        f'[state]\ndir = "{state}"\n'
        f'[log]\nformat = "json"\nlevel = "debug"\n'
        f"[signing]\nkey_file = {json.dumps(str(key))}\n"
    )


@contextlib.contextmanager
def chaos_rig(workdir: Path, *, seed: int, speed: float = 20.0) -> Iterator[ChaosRig]:
    """A started rig, closed however the block ends."""
    rig = ChaosRig(workdir, seed=seed, speed=speed)
    try:
        rig.start()
        yield rig
    finally:
        rig.close()
