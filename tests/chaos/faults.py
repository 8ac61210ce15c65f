"""The faults the chaos suite throws, one small function each.

A fault waits for a random point of play, does its damage and repairs it (or
lets the daemon do so), asserting on the way what the daemon is documented to
do about it; ``inject`` then waits for games to end again, so faults never
overlap. To add one: write ``def name(rig: ChaosRig) -> None`` under
``@fault()`` (naming what it needs of the rig: ``"disk"``, ``"clock"``);
``python -m tests.chaos.run`` picks it up, and listing it in ``SHORT`` puts it
in CI.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.chaos.harness import (
    ALARM_TOPIC,
    GAME_TOPIC,
    HISTORY_TOPIC,
    RESULT_TOPIC,
    STATUS_TOPIC,
    TABLE,
    TABLE_TOPIC,
    ChaosRig,
    write_chaos_config,
)
from wheeld.shell.presence import EX_CONFIG
from wheeld.testing.rig import DaemonProcess, Subscriber, wait_for

Fault = Callable[[ChaosRig], None]

#: Every fault by name, in the order they were defined.
FAULTS: dict[str, Fault] = {}
#: What each fault needs of the rig beyond its basic parts (see ``ChaosRig.missing``).
NEEDS: dict[str, tuple[str, ...]] = {}

ONLINE = {"state": "online"}
JOURNAL_FAULT = {"state": "fault", "fault": "journal_unwritable"}
CLOSED_NOTE = "table closed"


class Unavailable(Exception):
    """The rig lacks what the fault needs (no root for a tmpfs, no libfaketime)."""


def fault(*needs: str) -> Callable[[Fault], Fault]:
    """Register a fault under its own name, needing ``needs`` of the rig."""

    def register(function: Fault) -> Fault:
        FAULTS[function.__name__] = function
        NEEDS[function.__name__] = needs
        return function

    return register


def unavailable(rig: ChaosRig, name: str) -> str | None:
    """Why fault ``name`` cannot be thrown at ``rig``, or None when it can."""
    return next((rig.missing[need] for need in NEEDS[name] if need in rig.missing), None)


def inject(rig: ChaosRig, name: str) -> None:
    """Throw fault ``name``, then wait until play has visibly recovered."""
    why = unavailable(rig, name)
    if why is not None:
        raise Unavailable(f"{name}: {why}")
    FAULTS[name](rig)
    rig.wait_game_ends(2)


# -- what the subscriber saw -----------------------------------------------------


def _since(rig: ChaosRig, topic: str, mark: int) -> list[Any]:
    return rig.on_topic(topic)[mark:]


def _games(payloads: list[Any]) -> list[dict[str, Any]]:
    return [p for p in payloads if isinstance(p, dict) and "game_id" in p]


def _ends(payloads: list[Any]) -> list[dict[str, Any]]:
    return [p for p in _games(payloads) if p.get("event") in ("result", "no_spin")]


def _highest_game(rig: ChaosRig) -> int:
    return max((game_id for game_id, _, _ in rig.journalled()), default=0)


def _status_is(payload: Any, wanted: dict[str, Any]) -> bool:
    """A status payload says ``wanted`` (besides who said it, and the schema version)."""
    if not isinstance(payload, dict):
        return False
    said = {k: v for k, v in payload.items() if k not in ("instance", "schema_version")}
    return said == wanted


def _retained(rig: ChaosRig, topic: str, wanted: Any) -> None:
    """A new subscriber is handed ``wanted`` as ``topic``'s retained message."""
    fresh = Subscriber(rig.broker.port, topic)
    try:
        fresh.wait(topic, lambda payload: _status_is(payload, wanted))
    finally:
        fresh.close()


@fault()
def broker_kill(rig: ChaosRig) -> None:
    """The broker is SIGKILLed mid-play and comes back on the same port."""
    rig.random_point()
    rig.broker.kill()
    rig.outage()
    rig.broker.start()


@fault()
def daemon_kill(rig: ChaosRig) -> None:
    """The daemon is SIGKILLed mid-play and restarted (as systemd would)."""
    rig.random_point()
    rig.kill_daemon()
    rig.outage()
    rig.daemon.start()


@fault()
def link_loss(rig: ChaosRig) -> None:
    """The wheel's end of the serial link vanishes and a rebooted wheel comes back."""
    rig.random_point()
    rig.kill_wheel()
    rig.outage()
    rig.start_wheel()


@fault("disk")
def disk_full(rig: ChaosRig) -> None:
    """The state directory's disk fills up mid-game, then space is freed.

    docs/architecture.md: an alarm and a retained fault status, nothing decided
    while full; then every game it could not record is voided once
    (``controller_restart``), the status is online again and ids go on.
    """
    rig.wait_spinning()
    alarms, statuses = len(rig.on_topic(ALARM_TOPIC)), len(rig.on_topic(STATUS_TOPIC))
    filler = rig.fill_disk()
    try:
        rig.subscriber_wait(
            ALARM_TOPIC, lambda p: p.get("alarm") == "journal_unwritable", mark=alarms
        )
        rig.subscriber_wait(STATUS_TOPIC, lambda p: _status_is(p, JOURNAL_FAULT), mark=statuses)
        _retained(rig, STATUS_TOPIC, JOURNAL_FAULT)
        highest = _highest_game(rig)
        games = len(rig.received())
        rig.outage(3.0)  # the wheel plays on meanwhile
        started = [p for p in _games(rig.received()[games:]) if p["game_id"] > highest]
        assert not started, f"decided while the journal could not keep it: {started}"
    finally:
        # Counted before the disk is freed: the daemon's next try may come at once (its
        # tries follow a back-off: 1, 3, 7 s after the fault), and what it then says
        # must not fall between the freeing and the count (a race the loaded suite met).
        statuses = len(rig.on_topic(STATUS_TOPIC))
        games = len(rig.received())
        filler.unlink()
    rig.subscriber_wait(STATUS_TOPIC, lambda p: _status_is(p, ONLINE), mark=statuses)
    _retained(rig, STATUS_TOPIC, ONLINE)
    # Waited for: the status is said at once, the void goes out through the outbox after
    # it (a check at the status found none, now and then, under load).
    rig.subscriber_wait(
        GAME_TOPIC,
        lambda p: p.get("event") == "no_spin" and p.get("reason") == "controller_restart",
        mark=games,
    )


def _restart_on_new_journal(rig: ChaosRig, move: Callable[[Path], object]) -> None:
    """Retire the stopped daemon's journal with ``move``; the next start must go on from it."""
    highest = max((game_id for game_id, _, _ in rig.retired), default=0)
    alarms = len(rig.on_topic(ALARM_TOPIC))
    rig.retire_journal(move)
    rig.daemon.start()
    rig.start_wheel()
    rig.subscriber_wait(ALARM_TOPIC, lambda p: p.get("alarm") == "journal_lost", mark=alarms)
    first = rig.wait_spinning()
    assert first > highest, f"game id {first} reused after a new journal (had {highest})"


@fault()
def journal_corrupt(rig: ChaosRig) -> None:
    """A page of the stopped daemon's journal is overwritten; the journal is moved aside.

    The daemon refuses it (one line naming the file, status not 0); on a new
    journal, game ids go on from the ``game-ids`` file.
    """
    rig.random_point()
    rig.stop_daemon_drained()
    rig.keep_decisions()
    _corrupt_a_page(rig)
    log_size = rig.daemon.log.stat().st_size
    rig.daemon.start()
    process = rig.daemon.process
    assert process is not None
    status = process.wait(30)
    rig.daemon.process = None
    said = rig.daemon.log.read_bytes()[log_size:].decode(errors="replace").splitlines()
    assert status != 0, "wheeld run started on a corrupt journal"
    assert len(said) == 1, f"a corrupt journal should be one line, not: {said}"
    assert str(rig.journal_path) in said[0], said[0]
    _restart_on_new_journal(rig, lambda path: path.rename(path.with_name(path.name + ".corrupt")))


def _corrupt_a_page(rig: ChaosRig) -> None:
    """Overwrite, with random bytes, the page of the journal's ``state``: one every open reads.

    Damage to a page the open does not read (an old decision's) is found where it is
    read, or by ``wheeld verify`` (docs/operations.md): start-up does not read the
    whole file, so only a page it reads is refused at the start."""
    uri = f"file:{rig.journal_path}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
        # A page in use: damage to a free page would (rightly) go unnoticed.
        pages = [row[0] for row in db.execute("SELECT pageno FROM dbstat WHERE name = 'state'")]
    page = pages[0]
    with rig.journal_path.open("r+b") as file:
        file.seek((page - 1) * size)
        file.write(rig.rng.randbytes(size))


@fault()
def journal_deleted(rig: ChaosRig) -> None:
    """The stopped daemon's journal is deleted: a new one, game ids going on."""
    rig.random_point()
    rig.stop_daemon_drained()
    rig.keep_decisions()
    _restart_on_new_journal(rig, Path.unlink)


@fault()
def broker_refuses(rig: ChaosRig) -> None:
    """The broker's ACL takes the daemon's write on ``<base>/game`` away for a while.

    Refused PUBACKs: one ``broker_refused`` alarm, the entries kept; once the
    ACL is fixed (and reloaded) every game arrives, in the journal's order.
    """
    rig.random_point()
    alarms, games = len(rig.on_topic(ALARM_TOPIC)), len(rig.received())
    rig.broker.refuse_game(True)
    try:
        rig.subscriber_wait(
            ALARM_TOPIC,
            lambda p: p.get("alarm") == "broker_refused" and p.get("topic") == GAME_TOPIC,
            mark=alarms,
            timeout=30,
        )
        rig.outage()
    finally:
        rig.broker.refuse_game(False)
    rig.wait_drained()
    journal = [json.loads(payload) for _, _, payload in rig.journalled()]
    arrived = list(dict.fromkeys(json.dumps(p, sort_keys=True) for p in rig.received()[games:]))
    order = [json.dumps(p, sort_keys=True) for p in journal]
    start = order.index(arrived[0])
    assert arrived == order[start : start + len(arrived)], "games arrived out of order"


@fault()
def stale_commands(rig: ChaosRig) -> None:
    """A retained no_spin left on the broker, broker restarts, an empty one, sloppy types.

    commands.py: the broker's memory and an empty message are not commands, and
    ``7.0`` or ``true`` is no game id: no game is voided, the sloppy ones are refused.
    """
    games = len(rig.received())
    rig.command("no_spin", b'{"note": "left on the broker"}', retain=True)
    for _ in range(2):
        rig.random_point()
        rig.broker.stop()  # saved, so it comes back holding the retained no_spin
        rig.broker.start()
    rig.command("no_spin", b"", retain=True)  # what clears a retained message
    for payload, why in ((b'{"game_id": 7.0}', "integer"), (b"true", "JSON object")):
        rig.command("no_spin", payload)
        reply = rig.wait_reply("no_spin")
        assert reply["ok"] is False and why in reply["error"], reply
    declared = [p for p in _ends(rig.received()[games:]) if p.get("reason") == "declared"]
    assert not declared, f"voided by a command nobody sent: {declared}"


@fault()
def table_closed(rig: ChaosRig) -> None:
    """The table is closed mid-game and opened again.

    The game in progress is voided (``declared``, "table closed"), every spin
    while closed too, and no result or history is published until it opens.
    """
    game = rig.wait_spinning()
    tables = len(rig.on_topic(TABLE_TOPIC))
    rig.command("close", b"{}")
    assert rig.wait_reply("close")["ok"] is True
    rig.subscriber_wait(TABLE_TOPIC, lambda p: p.get("state") == "closed", mark=tables)
    results, history = len(rig.on_topic(RESULT_TOPIC)), len(rig.on_topic(HISTORY_TOPIC))
    games = len(rig.received())
    end = rig.end_of(game)
    # Unless the ball had already settled when the close came.
    if end["event"] != "result":
        assert (end["reason"], end["note"]) == ("declared", CLOSED_NOTE), end
    rig.wait_game_ends(2)
    for end in _ends(rig.received()[games:]):
        if end["game_id"] == game:
            continue
        assert end["event"] == "no_spin", f"a game settled while the table was closed: {end}"
        # A spin the rules void at its launch (say, direction_not_alternated after the
        # previous void) has ended already, with that first cause, before the closed
        # table voids it: one end per game.
        if end["reason"] == "declared":
            assert end["note"] == CLOSED_NOTE, end
    assert len(rig.on_topic(RESULT_TOPIC)) == results, "a result while the table was closed"
    assert len(rig.on_topic(HISTORY_TOPIC)) == history, "history moved while closed"
    rig.command("open", b"{}")
    assert rig.wait_reply("open")["ok"] is True
    games = len(rig.received())
    rig.wait_game_ends(2)
    assert any(p["event"] == "result" for p in _ends(rig.received()[games:]))


@fault()
def second_daemon(rig: ChaosRig) -> None:
    """A second wheeld for the same table (its own state, the same client id) is started.

    publisher.py: before it connects with the table's client id it reads the
    first one's retained status, names it in one line and exits 78
    (EX_CONFIG), never taking the session over: the first goes on
    undisturbed and delivers everything.
    """
    rig.random_point()
    # Once the first has said it is online (a broker restart just before would
    # leave no status yet: two daemons would then meet at run time instead).
    rig.wait_connected_for(1.0)
    home = rig.workdir / f"second-{rig.rng.randrange(10**6)}"
    home.mkdir()
    config = home / "wheeld.toml"
    write_chaos_config(config, link=home / "no-wheel", broker=rig.broker.port, state=home / "state")
    second = DaemonProcess(config, home)
    connects = _connects(rig.daemon)
    second.start()
    try:
        process = second.process
        assert process is not None
        wait_for(lambda: process.poll() is not None, 30, "the second daemon to give up")
        assert process.returncode == EX_CONFIG, second.logs()
        assert f"is online for table {TABLE}" in second.logs(), second.logs()
        assert _taken_over(second) is None and _connects(second) == 0
    finally:
        second.ensure_stopped()
    rig.outage(2.0)
    assert _connects(rig.daemon) == connects, "the first daemon lost its session"
    rig.wait_drained(timeout=90)


def _taken_over(daemon: DaemonProcess) -> dict[str, Any] | None:
    return next(
        (line for line in daemon.log_lines() if "same client id" in str(line.get("event"))),
        None,
    )


def _connects(daemon: DaemonProcess) -> int:
    return sum(line.get("event") == "broker connected" for line in daemon.log_lines())


@fault("clock")
def clock_step(rig: ChaosRig) -> None:
    """The daemon's wall clock steps 25 s forward mid-game, and back in the next game.

    Frames keep arriving, so neither game may be voided (wheel time, not host
    time, judges a game; a step is not silence on the link).
    """
    for step in (25, -25):
        game = rig.wait_spinning()
        rig.step_clock(step)
        end = rig.end_of(game)
        assert end["event"] == "result", f"a {step:+d} s clock step ended game {game}: {end}"


#: The scenarios CI runs: one rig each, its faults thrown in order (the heavy ones once).
SHORT: tuple[tuple[str, ...], ...] = (
    ("broker_kill", "daemon_kill"),
    ("link_loss", "clock_step"),
    ("disk_full",),
    ("journal_corrupt", "journal_deleted"),
    ("broker_refuses",),
    ("stale_commands", "table_closed"),
    ("second_daemon",),
)
