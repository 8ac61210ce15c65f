"""The takeover rig: daemons cut at a chosen publish, successors taking the table over.

From the chaos rig (``tests/chaos/harness.py``) it takes the persistent
mosquitto (saving on every change, with the daemon's user and ACL), the
simulated wheel on a pty playing forever, and a persistent QoS 1 subscriber on
``<base>/#`` that talks to the broker directly. The daemons reach the broker
through an ``MqttProxy``, which can SIGKILL the one in charge at any PUBLISH.

Daemons serve the table one at a time: ``primary`` first, then whoever takes
over, each with a state directory of its own, one table id and one signing key
(their configurations sit side by side). Each run of a daemon is a ``Segment``
(its connections carry the segment's label in the proxy), started after a
``CutRecord``: the cut that killed its predecessor, and who took over
(``Successor``: a fresh standby, the same daemon with its state directory
lost, or the daemon that ran before, back with its old journal).

``reference`` records the daemon's publishes for whole games (spinning, no
more bets, result) and turns the order found there into the boundaries to cut
at, before and after each PUBLISH; ``finish`` stops the wheel (its open game
ends as a lost link), lets the last daemon deliver everything, stops it,
reads what the broker retains and returns an ``Outcome`` to judge.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.chaos.harness import (
    BASE,
    GAME_TOPIC,
    RESULT_TOPIC,
    STATUS_TOPIC,
    ChaosBroker,
    write_chaos_config,
)
from tests.takeover.checks import (
    ENDS,
    Problem,
    canonical,
    judge,
    marker_seq,
    regressions,
    sequence_behind,
)
from tests.takeover.proxy import Cut, Mode, MqttProxy, Publish, Record
from wheeld.core.signing import load_public_key
from wheeld.shell.journal import JOURNAL_FILE
from wheeld.testing.rig import (
    DaemonProcess,
    Subscriber,
    kill_process,
    simulated_wheel,
    wait_for,
)

SEQUENCE_TOPIC = f"{BASE}/sequence"
WHEEL_TOPIC = f"{BASE}/wheel"
_PROBE_TOPIC = f"{BASE}/takeover/probe"
_BARRIER_TOPIC = f"{BASE}/takeover/barrier"
#: How a run that took over with the journal of its own last run says so.
KEPT = "its own journal, kept"
#: The simulated wheel plays this many times faster than real time: a game a second or so.
SPEED = 40.0
#: The shape of a game the boundaries are taken from, and cut in.
WHOLE_GAME = ("spinning", "no_more_bets", "result")

#: Who takes the table over after a cut: ``standby``, another wheeld with a fresh state
#: directory of its own; ``lost_disk``, the same wheeld, its state directory deleted;
#: ``returning``, the wheeld that ran before the one cut, with the journal it kept.
Successor = Literal["standby", "lost_disk", "returning"]


def _event(publish: Publish) -> str | None:
    if publish.topic != GAME_TOPIC:
        return None
    body = publish.json()
    return str(body.get("event")) if isinstance(body, dict) else None


@dataclass(frozen=True, slots=True)
class Boundary:
    """A place in a game to cut at: ``position`` in the reference game's publishes."""

    position: int
    cut: Cut

    @property
    def name(self) -> str:
        cut = self.cut
        topic = cut.topic.removeprefix(f"{BASE}/")
        return f"{cut.mode} {topic}#{cut.occurrence} in {cut.events[-1]}"


def game_windows(records: Iterable[Record]) -> list[list[Publish]]:
    """The publishes of each game, from its spinning message to the next game's
    (complete games only: the last, still open, is left out)."""
    windows: list[list[Publish]] = []
    current: list[Publish] | None = None
    for record in records:
        if _event(record.publish) == "spinning":
            if current is not None:
                windows.append(current)
            current = []
        if current is not None:
            current.append(record.publish)
    return windows


def boundaries_from(windows: list[list[Publish]]) -> list[Boundary]:
    """Every boundary of a game, from whole games the daemon published.

    Topics a game does not always publish the same number of times (the
    periodic health and wheel state, say) are left out; the order of the
    others must be the same in every game.
    """
    assert windows, "no whole game to take the boundaries from"
    counts = [Counter(p.topic for p in window) for window in windows]
    steady = {topic for topic in counts[0] if all(c[topic] == counts[0][topic] for c in counts)}
    orders = [[p for p in window if p.topic in steady] for window in windows]
    topics = [[p.topic for p in order] for order in orders]
    assert all(t == topics[0] for t in topics), f"a game's publishes change order: {topics}"
    boundaries: list[Boundary] = []
    seen: Counter[str] = Counter()
    events: list[str] = []
    for position, publish in enumerate(orders[0]):
        seen[publish.topic] += 1
        event = _event(publish)
        if event is not None:
            events.append(event)
        modes: tuple[Mode, ...] = ("before", "after")
        for mode in modes:
            cut = Cut(publish.topic, seen[publish.topic], tuple(events), mode)
            boundaries.append(Boundary(position, cut))
    return boundaries


@dataclass(slots=True)
class Daemon:
    """One of the table's two daemons: its configuration, state directory and process."""

    name: str
    config: Path
    state: Path
    process: DaemonProcess


@dataclass(slots=True)
class CutRecord:
    """A cut that went off: where, whom it killed, and how the table was taken over."""

    number: int
    boundary: Boundary
    successor: Successor
    victim: str
    #: The PUBLISH it went off at.
    at: Record
    #: Once it went off: the seq the broker's retained <base>/sequence named, and the
    #: highest seq of a game message the broker had (what consumers may have seen).
    marker_seq: int | None = None
    game_seq: int | None = None
    broker_forgot: bool = False

    @property
    def case(self) -> str:
        return f"{self.successor}: {self.boundary.name}"

    @property
    def marker_behind(self) -> bool:
        """The cut left the broker's <base>/sequence behind a game message it had."""
        if self.game_seq is None:
            return False
        return self.marker_seq is None or self.marker_seq < self.game_seq


@dataclass(slots=True)
class Segment:
    """One run of a daemon, between two cuts."""

    label: str
    daemon: str
    journal: str
    after: CutRecord | None
    #: When it was started (epoch seconds): a payload it publishes that was decided
    #: before then is replayed from its journal's outbox, decided by an earlier run.
    started_at: float = 0.0
    ended_by: CutRecord | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """A problem, the payloads' publishers, and the cut it is laid at (the one before the
    run that published the offending payload; for a game never ended, the one that cut
    the run which left it open), with the known defects that may explain it (``CAUSES``)."""

    problem: Problem
    publishers: tuple[str, ...]
    #: Per payload: replayed from the outbox of a journal that decided it in an earlier run.
    replayed: tuple[bool, ...]
    cut: CutRecord | None
    causes: tuple[str, ...]

    @property
    def case(self) -> str:
        return self.cut.case if self.cut is not None else "before any cut"

    def describe(self) -> str:
        causes = f" ({', '.join(self.causes)})" if self.causes else " (NO KNOWN CAUSE)"
        lines = [f"{self.problem.kind}: {self.problem.key}{causes}"]
        for text, who, replayed in zip(
            self.problem.payloads, self.publishers, self.replayed, strict=True
        ):
            tag = f"{who}, replayed from its journal's outbox" if replayed else who
            lines.append(f"    [{tag}] {text}")
        return "\n".join(lines)


#: The defects this rig was built to catch (each fixed: intent first, a journal gone
#: past let go of, the open game forgotten), by the name ``Violation.causes`` gives them:
#: a violation's likely cause, to start its diagnosis from.
CAUSES = {
    "marker behind": (
        "the cut left the broker's retained <base>/sequence behind a game message the "
        "broker had (<base>/game and <base>/sequence are separate publishes, the game "
        "first): the successor reuses that seq or game id, or voids a game that has its "
        "result"
    ),
    "outbox replayed": (
        "a daemon back with its old journal publishes outbox entries it decided before it "
        "was cut, under seqs and game ids its successor has used since"
    ),
    "open game voided again": (
        "a daemon back with its old journal voids (controller_restart) the game its "
        "journal left open, which its successor had already ended"
    ),
}


@dataclass(slots=True)
class Outcome:
    """Everything needed to judge a run."""

    #: Game payloads received on <base>/game and <base>/result, in arrival order,
    #: then the broker's retained result at the end.
    received: list[Any]
    #: What the broker retained under <base>/ at the end, by topic.
    retained: dict[str, Any]
    results: list[Any]
    sequences: list[Any]
    #: Who first published each payload (canonical text to segment label).
    publisher: dict[str, str]
    segments: list[Segment]
    cuts: list[CutRecord]
    boundaries: list[Boundary]
    public_key_path: Path
    per_epoch: bool = False
    exempt: set[tuple[Any, ...]] = field(default_factory=set)

    def violations(self) -> list[Violation]:
        key = load_public_key(self.public_key_path)
        problems = judge(self.received, key, per_epoch=self.per_epoch, exempt=self.exempt)
        behind = sequence_behind(self.retained.get(SEQUENCE_TOPIC), self.received)
        if behind is not None and not self.per_epoch:
            problems.append(behind)
        by_label = {segment.label: segment for segment in self.segments}
        found = []
        for problem in problems:
            publishers = tuple(self.publisher.get(text, "?") for text in problem.payloads)
            replayed = tuple(
                label in by_label and _decided_at(text) < by_label[label].started_at
                for text, label in zip(problem.payloads, publishers, strict=True)
            )
            segment = by_label.get(publishers[-1])
            if segment is None:
                cut = self.cuts[-1] if problem.kind == "retained sequence behind" else None
            elif problem.kind == "never ended":
                cut = segment.ended_by
            else:
                cut = segment.after
            causes = []
            if cut is not None and cut.marker_behind:
                causes.append("marker behind")
            if any(replayed):
                causes.append("outbox replayed")
            offending = json.loads(problem.payloads[-1])
            if (
                segment is not None
                and segment.journal == KEPT
                and self._voided_again(offending, segment.label)
            ):
                causes.append("open game voided again")
            found.append(Violation(problem, publishers, replayed, cut, tuple(causes)))
        return found

    def _voided_again(self, payload: Any, label: str) -> bool:
        """``payload`` is a void (controller_restart) of a game another run had ended
        before it arrived."""
        if not isinstance(payload, dict) or payload.get("reason") != "controller_restart":
            return False
        text = canonical(payload)
        for earlier in self.received:
            if canonical(earlier) == text:
                return False
            if (
                isinstance(earlier, dict)
                and earlier.get("game_id") == payload.get("game_id")
                and earlier.get("event") in ENDS
                and self.publisher.get(canonical(earlier)) != label
            ):
                return True
        return False

    def observations(self) -> list[str]:
        """What is worth knowing but not judged: retained topics going back in time."""
        said = []
        for topic, messages, field_ in (
            (RESULT_TOPIC, self.results, "game_id"),
            (SEQUENCE_TOPIC, self.sequences, "seq"),
        ):
            back = regressions(messages, field_)
            if back:
                highest, later = back[0]
                was = self.publisher.get(canonical(highest), "?")
                then = self.publisher.get(canonical(later), "?")
                times = "once" if len(back) == 1 else f"{len(back)} times"
                said.append(
                    f"retained {topic.removeprefix(BASE)} went back {times}, first "
                    f"from {field_} {highest.get(field_)} [{was}] to {later.get(field_)} [{then}]"
                )
        return said

    def report(self, violations: list[Violation] | None = None) -> str:
        found = self.violations() if violations is None else violations
        games = {p.get("game_id") for p in self.received if isinstance(p, dict)}
        lines = [
            f"{len(self.cuts)} cuts, {len(self.segments)} daemon runs, {len(games)} game ids, "
            f"{len(self.received)} game payloads received; "
            f"{len(found)} violations in {len({v.case for v in found})} cases",
        ]
        if self.boundaries:
            after = [b.name for b in self.boundaries if b.cut.mode == "after"]
            lines.append(f"boundaries (the publish order found): {', '.join(after)}")
        by_case: dict[str, list[Violation]] = {}
        for violation in found:
            by_case.setdefault(violation.case, []).append(violation)
        for each in self.cuts:
            listed = by_case.get(each.case, [])
            causes = sorted({c for v in listed for c in v.causes} or {"NO KNOWN CAUSE"})
            counted = f"{len(listed)} violation{'' if len(listed) == 1 else 's'}"
            verdict = f"{counted} ({', '.join(causes)})" if listed else "ok"
            lines.append(
                f"  cut #{each.number:<2} {each.case:<48} sequence/game seq "
                f"{each.marker_seq}/{each.game_seq}: {verdict}"
            )
        for case, listed in by_case.items():
            cut = listed[0].cut
            if cut is not None:
                successor = next(s for s in self.segments if s.after is cut)
                lines.append(
                    f"case {case!r} (cut #{cut.number}: {cut.victim} killed "
                    f"{cut.boundary.cut.mode} {_said(cut.at.publish)}, the broker's sequence "
                    f"at seq {cut.marker_seq}, its last game message at seq {cut.game_seq}; "
                    f"{successor.label} took over, {successor.journal}):"
                )
            else:
                lines.append(f"case {case!r}:")
            lines += [f"  {v.describe()}" for v in listed]
        lines += [f"observed: {line}" for line in self.observations()]
        return "\n".join(lines)


def _decided_at(text: str) -> float:
    """When a game payload was decided (its ``ts``), in epoch seconds; +inf if it says not."""
    payload = json.loads(text)
    stamp = payload.get("ts") if isinstance(payload, dict) else None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")


def _said(publish: Publish) -> str:
    body = publish.json()
    brief = ""
    if isinstance(body, dict):
        members = ("event", "game_id", "seq")
        brief = " " + json.dumps({k: body[k] for k in members if k in body})
    return f"{publish.topic.removeprefix(BASE + '/')}{brief}"


def _outbox(state: Path) -> int | None:
    """Entries the daemon's journal has not had acknowledged by the broker yet."""
    path = state / JOURNAL_FILE
    if not path.exists():
        return None
    uri = f"file:{path}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


def retained_now(port: int, topic_filter: str, timeout: float = 10) -> dict[str, Any]:
    """What the broker on ``port`` retains under ``topic_filter``, by topic (JSON parsed)."""
    held: dict[str, Any] = {}
    acknowledged: set[int] = set()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="", clean_session=True)

    def on_message(_c: paho.Client, _u: Any, message: paho.MQTTMessage) -> None:
        if message.retain:
            try:
                held[message.topic] = json.loads(message.payload)
            except ValueError:
                held[message.topic] = bytes(message.payload)

    client.on_message = on_message
    client.on_subscribe = lambda _c, _u, mid, _codes, _p: acknowledged.add(mid)
    client.connect("127.0.0.1", port, keepalive=5)
    client.loop_start()
    try:
        wait_for(client.is_connected, timeout, "a connection to read the retained messages")
        client.subscribe(topic_filter, qos=1)
        # A broker answers a subscription, sends what it retains, then reads the next
        # packet: once this second one is answered, every retained message is in.
        _, barrier = client.subscribe(_BARRIER_TOPIC, qos=0)
        wait_for(lambda: barrier in acknowledged, timeout, "the retained messages")
    finally:
        client.loop_stop()
        client.disconnect()
    return held


class TakeoverRig:
    """Broker, proxy, wheel, subscriber and two daemons in ``workdir``."""

    def __init__(self, workdir: Path, *, seed: int, speed: float = SPEED) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.speed = speed
        self.broker = ChaosBroker(workdir)
        self.proxy: MqttProxy | None = None
        self.link = workdir / "wheel"
        self.wheel: subprocess.Popen[bytes] | None = None
        self.subscriber: Subscriber | None = None
        self.daemons: dict[str, Daemon] = {}
        self.current: Daemon | None = None
        self.segments: list[Segment] = []
        self.cuts: list[CutRecord] = []
        self.boundaries: list[Boundary] = []
        #: Games left open when everything that knew them was lost (see ``cut``).
        self.exempt: set[tuple[Any, ...]] = set()
        self._probes = itertools.count(1)

    # -- the parts -------------------------------------------------------------------

    def start(self) -> None:
        """Everything up, the primary in charge, one whole game played."""
        self.broker.start()
        self.proxy = MqttProxy(self.broker.port, game_topic=GAME_TOPIC)
        client_id = f"takeover-{os.getpid()}-{id(self)}"
        self.subscriber = Subscriber(self.broker.port, f"{BASE}/#", client_id=client_id)
        self._probe()
        self.start_wheel()
        self.launch(self._daemon("primary"), journal="a fresh journal", after=None)

    def _daemon(self, name: str) -> Daemon:
        """A wheeld for the table, with a state directory of its own (made on first use)."""
        if name not in self.daemons:
            assert self.proxy is not None
            home = self.workdir / name
            home.mkdir()
            # Side by side: write_chaos_config makes one signing key beside them all.
            config = self.workdir / f"{name}.toml"
            state = self.workdir / f"state-{name}"
            write_chaos_config(config, link=self.link, broker=self.proxy.port, state=state)
            self.daemons[name] = Daemon(name, config, state, DaemonProcess(config, home))
        return self.daemons[name]

    def _probe(self) -> None:
        """The subscriber's own retained probe comes back: its subscription is there."""
        subscriber = self.subscriber
        assert subscriber is not None
        said = {"probe": next(self._probes)}
        subscriber.client.publish(_PROBE_TOPIC, json.dumps(said), qos=1, retain=True)
        wait_for(lambda: said in subscriber.on(_PROBE_TOPIC), 15, "the subscriber's probe")

    def start_wheel(self) -> None:
        """The simulated wheel on the link, playing forever."""
        self.wheel = simulated_wheel(
            self.link,
            speed=self.speed,
            seed=self.rng.randrange(2**31),
            log=self.workdir / "simulate.log",
        )

    def kill_wheel(self) -> None:
        kill_process(self.wheel)
        self.wheel = None

    def launch(self, daemon: Daemon, *, journal: str, after: CutRecord | None) -> Segment:
        """Start ``daemon`` as the next run, and wait until it has played a whole game."""
        assert self.proxy is not None
        label = f"{len(self.segments) + 1}:{daemon.name}"
        segment = Segment(label, daemon.name, journal, after, started_at=time.time())
        self.proxy.label = segment.label
        self.segments.append(segment)
        self.current = daemon
        daemon.process.start()
        self.wait_played(segment)
        return segment

    def wait_played(self, segment: Segment, timeout: float = 45) -> None:
        """Until ``segment`` has published a game from its spinning to its end."""
        proxy = self.proxy
        assert proxy is not None

        def played() -> bool:
            self._assert_running()
            opened = set()
            for record in proxy.forwarded(segment.label):
                body = record.publish.json() if record.publish.topic == GAME_TOPIC else None
                if not isinstance(body, dict):
                    continue
                if body.get("event") == "spinning":
                    # Decided by this run: not one replayed from its journal's outbox.
                    if _decided_at(canonical(body)) >= segment.started_at:
                        opened.add(body.get("game_id"))
                elif body.get("event") in ENDS and body.get("game_id") in opened:
                    return True
            return False

        wait_for(played, timeout, f"{segment.label} to play a whole game")

    def _assert_running(self, *, victim: Daemon | None = None) -> None:
        """Fail at once, naming it, when a part died that no cut killed."""
        parts: list[tuple[str, subprocess.Popen[bytes] | None, Path]] = [
            ("wheeld simulate", self.wheel, self.workdir / "simulate.log"),
            ("mosquitto", self.broker.process, self.workdir / "mosquitto.log"),
        ]
        if self.current is not None and self.current is not victim:
            run = self.current.process
            parts.append((f"wheeld run ({self.current.name})", run.process, run.log))
        for name, process, log in parts:
            if process is not None and process.poll() is not None:
                lines = log.read_text(errors="replace").splitlines() if log.exists() else []
                last = lines[-1] if lines else "(no output)"
                raise AssertionError(f"{name} exited with status {process.returncode}: {last}")

    # -- the reference game and the boundaries ---------------------------------------

    def reference(self, games: int = 3) -> list[Boundary]:
        """The boundaries, from the next ``games`` whole games the daemon in charge plays."""
        proxy = self.proxy
        assert proxy is not None
        label = self.segments[-1].label
        mark = len(proxy.records)

        def whole() -> list[list[Publish]]:
            records = [r for r in proxy.forwarded(label) if r.number >= mark]
            windows = game_windows(records)
            return [w for w in windows if tuple(filter(None, map(_event, w))) == WHOLE_GAME]

        def enough() -> bool:
            self._assert_running()
            return len(whole()) >= games

        wait_for(enough, 20 + 5 * games, f"{games} whole games for the reference")
        self.boundaries = boundaries_from(whole()[:games])
        return self.boundaries

    # -- cutting ------------------------------------------------------------------------

    def cut(self, boundary: Boundary, successor: Successor, *, forget: bool = False) -> CutRecord:
        """Kill the daemon in charge at ``boundary`` (in the next game with the reference's
        shape so far) and let ``successor`` take over; with ``forget``, the broker also
        loses everything it held (restarted without its database) before it does."""
        proxy, subscriber, victim = self.proxy, self.subscriber, self.current
        assert proxy is not None and subscriber is not None and victim is not None
        process = victim.process.process
        assert process is not None
        fired = len(proxy.fired)
        statuses = len(subscriber.on(STATUS_TOPIC))
        proxy.arm(boundary.cut, process.pid)

        def went_off() -> bool:
            dead = process.poll() is not None
            if len(proxy.fired) > fired:
                return True
            if dead:  # the proxy says why it kills before it does
                self._assert_running()
            self._assert_running(victim=victim)
            return False

        try:
            wait_for(went_off, 60, f"the cut {boundary.name}")
        finally:
            proxy.disarm()
        process.wait(15)
        victim.process.process = None
        victim_segment = self.segments[-1]
        marker, game = self._broker_seqs()
        record = CutRecord(
            len(self.cuts) + 1,
            boundary,
            successor,
            victim_segment.label,
            proxy.fired[fired].record,
            marker_seq=marker,
            game_seq=game,
            broker_forgot=forget,
        )
        victim_segment.ended_by = record
        self.cuts.append(record)
        wait_for(
            lambda: any(_offline(p) for p in subscriber.on(STATUS_TOPIC)[statuses:]),
            15,
            f"{victim.name}'s last will",
        )
        if forget:
            self._forget()
        if successor == "standby":
            standby = self._daemon(
                f"standby-{sum(n.startswith('standby') for n in self.daemons) + 1}"
            )
            self.launch(standby, journal="a fresh journal", after=record)
        elif successor == "returning":
            before = [s.daemon for s in self.segments if s.daemon != victim.name]
            other = self._daemon(before[-1] if before else "partner")
            kept = (other.state / JOURNAL_FILE).exists()
            journal = KEPT if kept else "a fresh journal"
            self.launch(other, journal=journal, after=record)
        else:
            shutil.rmtree(victim.state, ignore_errors=True)
            said = "state directory lost" + (", broker forgot" if forget else "")
            self.launch(victim, journal=said, after=record)
        return record

    def _broker_seqs(self) -> tuple[int | None, int | None]:
        """The seq the broker's <base>/sequence names now (the last one it was sent), and
        the highest seq of the game messages it was sent."""
        assert self.proxy is not None
        forwarded = self.proxy.forwarded()
        markers = [r.publish.json() for r in forwarded if r.publish.topic == SEQUENCE_TOPIC]
        games = [r.publish.json() for r in forwarded if _event(r.publish)]
        seqs = [g["seq"] for g in games if isinstance(g, dict) and type(g.get("seq")) is int]
        return (marker_seq(markers[-1]) if markers else None), max(seqs, default=None)

    def _forget(self) -> None:
        """The broker restarted without its database: no retained message, no session.

        Games still open now can never end: nothing that knew them is left.
        """
        for payload in self.game_payloads():
            if not isinstance(payload, dict):
                continue
            key = (payload.get("epoch"), payload.get("game_id"))
            if payload.get("event") in ENDS:
                self.exempt.discard(key)
            else:
                self.exempt.add(key)
        self.broker.kill()
        for path in self.workdir.glob("mosquitto.db*"):
            path.unlink()
        self.broker.start()
        self._probe()

    # -- the end ---------------------------------------------------------------------

    def game_payloads(self) -> list[Any]:
        """Game payloads received on <base>/game and <base>/result, in arrival order."""
        subscriber = self.subscriber
        assert subscriber is not None
        subscriber.on(GAME_TOPIC)  # takes in what arrived
        return [body for topic, body, _ in subscriber.seen if topic in (GAME_TOPIC, RESULT_TOPIC)]

    def finish(self) -> Outcome:
        """Stop the wheel (its open game ends as a lost link), let the daemon in charge
        deliver everything, stop it, read what the broker retains."""
        proxy, subscriber, daemon = self.proxy, self.subscriber, self.current
        assert proxy is not None and subscriber is not None and daemon is not None
        segment = self.segments[-1]
        mark = len(proxy.records)
        self.kill_wheel()

        def link_down() -> bool:
            return any(
                record.number >= mark
                and record.publish.topic == WHEEL_TOPIC
                and isinstance(body := record.publish.json(), dict)
                and body.get("link") == "down"
                for record in proxy.forwarded(segment.label)
            )

        wait_for(link_down, 20, "the daemon to say the wheel is gone")
        wait_for(lambda: _outbox(daemon.state) == 0, 30, "the daemon's outbox to drain")

        def delivered() -> bool:
            sent = {canonical(r.publish.json()) for r in proxy.forwarded() if _event(r.publish)}
            return sent <= {canonical(p) for p in self.game_payloads()}

        wait_for(delivered, 30, "every game message forwarded to reach the subscriber")
        status = daemon.process.terminate()
        daemon.process.process = None
        assert status == 0, f"wheeld run ({daemon.name}) stopped with status {status}"
        retained = retained_now(self.broker.port, f"{BASE}/#")
        received = self.game_payloads()
        if RESULT_TOPIC in retained:
            received.append(retained[RESULT_TOPIC])
        publisher: dict[str, str] = {}
        for record in proxy.forwarded():
            if record.publish.topic in (GAME_TOPIC, RESULT_TOPIC, SEQUENCE_TOPIC):
                publisher.setdefault(canonical(record.publish.json()), record.label)
        return Outcome(
            received=received,
            retained=retained,
            results=subscriber.on(RESULT_TOPIC),
            sequences=subscriber.on(SEQUENCE_TOPIC),
            publisher=publisher,
            segments=self.segments,
            cuts=self.cuts,
            boundaries=self.boundaries,
            public_key_path=self.workdir / "signing.pub",
            per_epoch=any(cut.broker_forgot for cut in self.cuts),
            exempt=set(self.exempt),
        )

    def close(self) -> None:
        """Stop whatever is still running; safe after any failure."""
        self.kill_wheel()
        for daemon in self.daemons.values():
            daemon.process.ensure_stopped()
        if self.subscriber is not None:
            self.subscriber.close()
            self.subscriber = None
        if self.proxy is not None:
            self.proxy.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.broker.stop()


def _offline(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("state") == "offline"


def run_plan(rig: TakeoverRig, plan: Iterable[tuple[Boundary, Successor]]) -> None:
    """Cut at each boundary in turn, each time with its successor."""
    for boundary, successor in plan:
        rig.cut(boundary, successor)


@contextlib.contextmanager
def takeover_rig(workdir: Path, *, seed: int, speed: float = SPEED) -> Iterator[TakeoverRig]:
    """A started rig, closed however the block ends."""
    rig = TakeoverRig(workdir, seed=seed, speed=speed)
    try:
        rig.start()
        yield rig
    finally:
        rig.close()
