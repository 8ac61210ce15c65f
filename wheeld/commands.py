"""Operator commands received on ``<base>/command/<name>``.

Each returns a reply for the MQTT 5 response topic; a malformed command is
refused with a reason, never a crash.

| command | payload | does |
|---|---|---|
| `no_spin` | `{"note": "...", "game_id": N?}` | voids the game in progress, reason `declared` |
| `close` | `{}` | closes the table and announces the last three results |
| `open` | `{}` | opens the table again |
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheeld.journal import Outgoing
from wheeld.messages import iso_utc

if TYPE_CHECKING:
    from wheeld.daemon import Daemon

MAX_NOTE = 500


class CommandError(Exception):
    """The command cannot be carried out; the message says why."""


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """A command as it arrived from the broker, before it is judged."""

    #: The last topic level: ``no_spin``, ``open``, ``close``.
    name: str
    payload: bytes
    #: A retained message is the broker's memory, not an operator's act: never obeyed.
    retained: bool = False
    #: Who sent it: the MQTT 5 user property ``operator`` (or ``user``), else None.
    sender: str | None = None


def _object(payload: bytes) -> dict[str, Any]:
    if not payload.strip():
        return {}
    try:
        value = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CommandError("payload is not JSON") from None
    if not isinstance(value, dict):
        raise CommandError("payload must be a JSON object")
    return value


def handle(daemon: Daemon, name: str, payload: bytes) -> dict[str, Any]:
    """Carry out command ``name``; raises CommandError with a reason."""
    body = _object(payload)
    if name == "no_spin":
        return _no_spin(daemon, body)
    if name in ("open", "close"):
        return _table(daemon, name, body)
    raise CommandError(f"unknown command {name!r} (known: no_spin, open, close)")


def _no_spin(daemon: Daemon, body: dict[str, Any]) -> dict[str, Any]:
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise CommandError(f"note must be a string of at most {MAX_NOTE} characters")
    engine = daemon.engine
    assert engine is not None
    open_game = engine.game_in_progress
    if open_game is None:
        raise CommandError("no game in progress")
    wanted = body.get("game_id")
    if wanted is not None and wanted != open_game:
        # A command queued while we were away must not void a later game.
        raise CommandError(f"game {wanted} is not in progress (game {open_game} is)")
    daemon.log.warning("no spin declared", game_id=open_game, note=note)
    daemon._decide(engine.declare_no_spin(note, time.time()))
    return {"ok": True, "game_id": open_game}


def _table(daemon: Daemon, name: str, body: dict[str, Any]) -> dict[str, Any]:
    if body:
        raise CommandError(f"{name} takes no fields")
    assert daemon.journal is not None
    # "anunciar las tres (3) últimas lanzadas" on closing.
    last_three = daemon.journal.history(3)
    state = "open" if name == "open" else "closed"
    announcement = {
        "state": state,
        "last_numbers": last_three,
        "table": daemon.config.table.id,
        "ts": iso_utc(time.time()),
    }
    daemon.journal.enqueue(
        [Outgoing(f"{daemon.base}/table", json.dumps(announcement), retain=True)]
    )
    if daemon.publisher is not None:
        daemon.publisher.wake()
    daemon.log.info(f"table {state}", last_numbers=last_three)
    return {"ok": True, **announcement}
