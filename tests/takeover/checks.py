"""What the table's consumers must never see, whoever publishes for the table.

``judge`` takes every game payload a persistent subscriber received (on
``<base>/game`` and ``<base>/result``, in arrival order, then the broker's
retained result at the end) and finds:

- a ``seq`` carried by two different payloads (and, when payloads carry an
  ``epoch``, an ``(epoch, seq)``);
- a ``(game_id, event)`` carried by two different payloads;
- a game with two terminal events (``result``, ``no_spin``), or with an event
  after its terminal one;
- a game announced and never ended;
- a payload whose signature does not verify against the table's key.

Payloads are compared as parsed JSON, so a message received twice (QoS 1
allows it) is one payload. With ``per_epoch`` (a broker that forgot its
retained messages and a daemon that lost its state directory: ids may start
again, but only in a new epoch) games and seqs are keyed by ``(epoch, ...)``.

Nothing here depends on the order in which a daemon publishes its topics.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.core.signing import signature_problem

ENDS = ("result", "no_spin")


def canonical(payload: Any) -> str:
    """One text per payload, whatever the order of its members."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing consumers must never see: ``payloads`` (canonical texts) in arrival order;
    the last one is the offending one (the second of a pair, the late event)."""

    kind: str
    key: str
    payloads: tuple[str, ...]

    def describe(self) -> str:
        lines = [f"{self.kind}: {self.key}"]
        lines += [f"    {text}" for text in self.payloads]
        return "\n".join(lines)


def _scope(payload: dict[str, Any], per_epoch: bool) -> tuple[Any, ...]:
    return (payload.get("epoch"),) if per_epoch else ()


def _name(scope: tuple[Any, ...], what: str) -> str:
    return f"epoch {scope[0]!r}, {what}" if scope else what


def carries_epoch(payloads: Iterable[Any]) -> bool:
    """Whether the game payloads carry an ``epoch`` (the fix's journals do)."""
    return any(isinstance(p, dict) and "epoch" in p for p in payloads)


def judge(
    received: Iterable[Any],
    public_key: Ed25519PublicKey | None,
    *,
    per_epoch: bool = False,
    exempt: Collection[tuple[Any, ...]] = (),
) -> list[Problem]:
    """Every problem in ``received`` (game payloads in arrival order, duplicates included).

    ``exempt`` holds game keys (``(game_id,)``, or ``(epoch, game_id)`` with
    ``per_epoch``) that may stay unended: games left open when everything that
    knew them was lost.
    """
    distinct = [json.loads(text) for text in dict.fromkeys(canonical(p) for p in received)]
    games = [p for p in distinct if isinstance(p, dict) and "game_id" in p]
    problems: list[Problem] = []
    by_seq: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    by_event: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    by_game: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for payload in games:
        scope = _scope(payload, per_epoch)
        text = canonical(payload)
        by_seq[(*scope, payload.get("seq"))].append(text)
        by_event[(*scope, payload.get("game_id"), payload.get("event"))].append(text)
        by_game[(*scope, payload.get("game_id"))].append(payload)
        if public_key is not None:
            why = signature_problem(payload, public_key)
            if why is not None:
                problems.append(Problem("signature", f"seq {payload.get('seq')}: {why}", (text,)))
    # Without per_epoch a seq is keyed alone: stronger than per (epoch, seq), which it implies.
    for key, seq_texts in by_seq.items():
        if len(seq_texts) > 1:
            what = _name(key[:-1], f"seq {key[-1]}")
            problems.append(Problem("seq reused", what, tuple(seq_texts)))
    for key, event_texts in by_event.items():
        if len(event_texts) > 1:
            what = _name(key[:-2], f"game {key[-2]} {key[-1]}")
            problems.append(Problem("game event repeated", what, tuple(event_texts)))
    for key, events in by_game.items():
        what = _name(key[:-1], f"game {key[-1]}")
        ends = [p for p in events if p.get("event") in ENDS]
        if len(ends) > 1:
            problems.append(Problem("ended twice", what, tuple(canonical(p) for p in ends)))
        if ends:
            first_end = events.index(ends[0])
            late = [p for p in events[first_end + 1 :] if p.get("event") not in ENDS]
            for payload in late:
                pair = (canonical(ends[0]), canonical(payload))
                problems.append(Problem("event after its end", what, pair))
        elif key not in exempt:
            opened = tuple(canonical(p) for p in events)
            problems.append(Problem("never ended", what, opened))
    return problems


def marker_seq(sequence: Any) -> int | None:
    """The seq a retained ``<base>/sequence`` names: its own ``seq``, else that of a message
    it carries (a member that is an object with a ``seq``); None when it names none."""
    if not isinstance(sequence, dict):
        return None
    if type(sequence.get("seq")) is int:
        return int(sequence["seq"])
    for value in sequence.values():
        if isinstance(value, dict) and type(value.get("seq")) is int:
            return int(value["seq"])
    return None


def sequence_behind(sequence: Any, received: Iterable[Any]) -> Problem | None:
    """The broker's retained ``<base>/sequence`` at the end, once everything was delivered,
    names a seq behind one consumers saw: the next daemon would reuse it."""
    said = marker_seq(sequence)
    seqs = [p["seq"] for p in received if isinstance(p, dict) and type(p.get("seq")) is int]
    if said is None or not seqs or said >= max(seqs):
        return None
    highest = max(seqs)
    return Problem(
        "retained sequence behind",
        f"the broker's <base>/sequence names seq {said}, consumers saw seq {highest}",
        (canonical(sequence),),
    )


def regressions(messages: Iterable[Any], field: str) -> list[tuple[Any, Any]]:
    """Pairs (highest so far, later message) where a retained topic's ``field`` went back:
    a daemon republishing an old journal's retained value. Observed, not judged."""
    found: list[tuple[Any, Any]] = []
    highest: Any = None
    for message in messages:
        value = message.get(field) if isinstance(message, dict) else None
        if type(value) is not int:
            continue
        if highest is not None and value < highest[field]:
            found.append((highest, message))
        elif highest is None or value > highest[field]:
            highest = message
    return found
