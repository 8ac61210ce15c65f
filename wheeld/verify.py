"""Verify signed, chained ``<base>/game`` messages and the journal that keeps them. Pure.

``verify_messages`` checks a stream of payloads, as a consumer recorded them
or as the journal keeps them, against the table's public key: every
signature, every link (``seq`` one more than the message before, ``prev`` the
digest of it), and every game ending exactly once. It stops at the first
failure and says where (the message's ``seq``, else its ``game_id``, else its
line) and why, in one line: what ``wheeld verify`` prints before exiting 1.

``verify_journal`` adds the journal's own hash chains over its rows
(``wheeld.journal``): decisions, operator commands, alarms and the serial frames. An
edited, deleted or reordered row is found there even when what it held was
never signed; the frames chain is walked only here, never at a start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.signing import ChainState, digest, key_id, signature_problem

if TYPE_CHECKING:
    from wheeld.journal import JournalView

#: The events that end a game: each game has exactly one of them.
ENDINGS = frozenset({"result", "no_spin"})
#: The first line of a ``wheeld export`` file names its format.
EXPORT_FORMAT = "wheeld-export 1"


@dataclass(frozen=True, slots=True)
class Failure:
    """The first entry that does not verify: where it is and why."""

    where: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass(frozen=True, slots=True)
class Message:
    """A payload and where it came from (``line 7``, ``decisions row 12``), for the report."""

    origin: str
    payload: dict[str, Any]


def _where(message: Message) -> str:
    seq, game_id = message.payload.get("seq"), message.payload.get("game_id")
    if type(seq) is int:
        return f"seq {seq}" + (f" (game {game_id})" if type(game_id) is int else "")
    if type(game_id) is int:
        return f"game {game_id} ({message.origin})"
    return message.origin


def verify_messages(
    messages: Iterable[Message],
    public_key: Ed25519PublicKey | Sequence[Ed25519PublicKey],
    *,
    start: ChainState | None = None,
    end: ChainState | None = None,
) -> Failure | None:
    """The first message that fails, and why; None when every one holds.

    ``start``, when known (an export's anchor), is where the first message
    must stand, so a dropped first message is told; ``end`` is where the chain
    must stand after the last one (a dropped last message). Without them the
    stream may begin and end anywhere: a consumer may have joined late.
    """
    listed = list(messages)
    seqs = [m.payload.get("seq") for m in listed]
    expected = start
    seen: dict[int, str] = {}  # seq -> digest, to tell a repeat from a reorder
    games = _Games()
    for index, message in enumerate(listed):
        payload = message.payload
        why = _signature_why(payload, public_key)
        if why is None:
            why = _link_why(payload, expected, seen, seqs[index + 1 :])
        if why is None:
            why = games.why(payload)
        if why is not None:
            return Failure(_where(message), why)
        seq = payload["seq"]
        seen[seq] = digest(payload)
        expected = ChainState(seq + 1, seen[seq])
    if end is not None and expected != end:
        if expected is None or end.seq > expected.seq:
            first = 1 if expected is None else expected.seq
            return Failure(f"seq {first}", f"gap: seq {first}-{end.seq - 1} missing at the end")
        return Failure(f"seq {end.seq}", "broken link: the chain does not end where it should")
    return None


def _signature_why(
    payload: dict[str, Any], keys: Ed25519PublicKey | Sequence[Ed25519PublicKey]
) -> str | None:
    if "sig" not in payload and "kid" not in payload:
        return "unsigned (written by a daemon with signing.required = false?)"
    # Several keys: a table whose key was rotated; each message names its key by kid.
    trusted = [keys] if isinstance(keys, Ed25519PublicKey) else list(keys)
    named = [key for key in trusted if key_id(key) == payload.get("kid")]
    problem = signature_problem(payload, named[0] if named else trusted[0])
    if problem is not None:
        return problem
    if type(payload.get("seq")) is not int:
        return "no seq: not a chained <base>/game message"
    prev = payload.get("prev")
    if prev is not None and not isinstance(prev, str):
        return "malformed prev"
    return None


def _link_why(
    payload: dict[str, Any],
    expected: ChainState | None,
    seen: dict[int, str],
    later: list[Any],
) -> str | None:
    seq: int = payload["seq"]
    if expected is None:
        return None
    if seq == expected.seq:
        if payload.get("prev") != expected.prev:
            return "broken link: prev does not name the message before it"
        return None
    if seq in seen:
        if seen[seq] == digest(payload):
            return f"repeat of seq {seq}"
        return f"a second, different message with seq {seq}"
    if seq < expected.seq or expected.seq in later:
        return f"reordered: seq {seq} where seq {expected.seq} was due"
    missing = f"seq {expected.seq}" if seq == expected.seq + 1 else f"seq {expected.seq}-{seq - 1}"
    return f"gap: {missing} missing"


class _Games:
    """Each game ends once, and a game that began ends before the next one begins."""

    def __init__(self) -> None:
        self.ended: set[int] = set()
        self.open: int | None = None

    def why(self, payload: dict[str, Any]) -> str | None:
        game_id, event = payload.get("game_id"), payload.get("event")
        if type(game_id) is not int or not isinstance(event, str):
            return "not a game message (no game_id or event)"
        if game_id in self.ended:
            if event in ENDINGS:
                return f"game {game_id} ended twice"
            return f"game {game_id} has a {event} after its end"
        if self.open is not None and self.open != game_id:
            return f"game {self.open} never ended (game {game_id} began after it)"
        if event in ENDINGS:
            self.ended.add(game_id)
            self.open = None
        else:
            self.open = game_id
        return None


# -- sources -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recording:
    """A file of messages read: the payloads, and an export's header when it has one."""

    messages: list[Message]
    header: dict[str, Any] | None = None


class DuplicateMember(ValueError):
    """A JSON object names one member twice: I-JSON (RFC 7493), which RFC 8785 signs, forbids it."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        counted: dict[str, int] = {}
        for key, _ in pairs:
            counted[key] = counted.get(key, 0) + 1
        twice = next(key for key, count in counted.items() if count > 1)
        raise DuplicateMember(f"member {twice!r} appears twice (parsers disagree on which counts)")
    return members


def strict_json(text: str) -> Any:
    """JSON that names no member twice (a signature over one reading proves nothing of another)."""
    return json.loads(text, object_pairs_hook=_unique)


def read_lines(lines: Iterable[str]) -> Recording | Failure:
    """One JSON object a line: a consumer's recording, ``wheeld replay``'s output or an export.

    An export's header line and its frame lines are recognised; blank lines
    are skipped. The first line that is not a JSON object is a failure.
    """
    messages: list[Message] = []
    header: dict[str, Any] | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = strict_json(line)
        except DuplicateMember as exc:
            return Failure(f"line {number}", str(exc))
        except ValueError:
            return Failure(f"line {number}", "not JSON")
        if not isinstance(value, dict):
            return Failure(f"line {number}", "not a JSON object")
        if "export" in value and not messages and header is None:
            header = value["export"]
            if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                return Failure(f"line {number}", f"not a {EXPORT_FORMAT} header")
        elif "frame" in value:
            continue  # the serial lines an export carries beside the messages: not signed
        else:
            messages.append(Message(f"line {number}", value))
    if not messages:
        return Failure("the file", "holds no message: nothing is vouched for")
    return Recording(messages, header)


def export_bounds(header: dict[str, Any]) -> tuple[ChainState, ChainState] | Failure:
    """Where an export's chain starts and ends, from its header's anchor."""
    try:
        anchor = header["anchor"]
        start = ChainState.from_dict(anchor["start"])
        end = ChainState.from_dict(anchor["end"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return Failure("line 1", "the export's anchor is malformed")
    return start, end


def verify_journal(
    view: JournalView, public_key: Ed25519PublicKey | Sequence[Ed25519PublicKey]
) -> Failure | None:
    """The journal's hash chains (frames too), the breaks start-ups found, then every payload."""
    for walk in view.walks().values():
        if walk.breaks:
            return Failure("journal", walk.breaks[0].describe())
    for segment in view.broken_segments():
        return Failure("journal", segment)
    messages = list(_journal_messages(view))
    for message in messages:
        if isinstance(message, Failure):
            return message
    payloads = [m for m in messages if isinstance(m, Message)]
    failure = verify_messages(payloads, public_key)
    if failure is not None:
        return failure
    stored = view.chain_state()
    if payloads and stored is not None:
        last = payloads[-1].payload
        if stored != ChainState(last["seq"] + 1, digest(last)):
            return Failure(
                f"seq {last['seq']}",
                f"the journal's chain state says seq {stored.seq} is next: messages after it"
                " are missing (deleted)",
            )
    return None


def _journal_messages(view: JournalView) -> Iterator[Message | Failure]:
    for row_id, game_id, payload in view.decisions():
        origin = f"decisions row {row_id}"
        try:
            value = strict_json(payload)
        except DuplicateMember as exc:
            yield Failure(f"{origin} (game {game_id})", str(exc))
            return
        except ValueError:
            yield Failure(f"{origin} (game {game_id})", "payload is not JSON")
            return
        if not isinstance(value, dict):
            yield Failure(f"{origin} (game {game_id})", "payload is not a JSON object")
            return
        yield Message(origin, value)
