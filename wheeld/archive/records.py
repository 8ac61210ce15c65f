"""What the archive's ledger reads and says: the verdicts, a message as it came, the rows
to keep, the archive's alarms, pins, gaps and epochs, and the ``Outcome`` of one message;
with the pure readings of a payload (its table, time, digest, signature verdict).

Pure like the ledger: no database, no broker, no clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.audit.verify import strict_json
from wheeld.core.messages import SCHEMA_VERSION, iso_utc
from wheeld.core.signing import DuplicateMember, b64url, canonical_pair, signature_problem

VERIFIED = "verified"
BAD_SIGNATURE = "bad_signature"
UNKNOWN_KEY = "unknown_key"
CHAIN_BREAK = "chain_break"
UNSIGNED = "unsigned"
VERDICTS = (VERIFIED, BAD_SIGNATURE, UNKNOWN_KEY, CHAIN_BREAK, UNSIGNED)
#: The verdicts whose messages make the chain.
CHAINED = frozenset({VERIFIED, CHAIN_BREAK})

#: The largest payload kept as a message; a recall reply (many games, their frames) may be
#: larger and is read, never kept whole.
MAX_MESSAGE_BYTES = 64 * 1024
#: Recent seqs (and digests) each epoch remembers, to tell a redelivery without asking
#: the database; older ones are looked up.
REMEMBERED = 1024
#: JSON's last exact integer: no seq or game id goes past it.
MAX_INT = 2**53 - 1
#: A gap is first asked of the table this long after it is found (by default: the
#: configuration's ``recall_delay_s``): a message late by a moment (another broker's
#: path) fills it first.
RECALL_DELAY_S = 5.0
#: The same alarm of the same table is published at most this often; the rest are counted.
ALARM_EVERY_S = 60.0


class Rejected(ValueError):
    """A message that is no message of a table at all; the text says why, in one line."""


@dataclass(frozen=True, slots=True)
class Received:
    """One message as the broker (or a table's recall reply) delivered it."""

    topic: str
    payload: bytes
    #: Host time it was received, seconds since the epoch.
    at: float
    #: ``live`` off the broker, ``recall`` from a table's reply.
    source: str = "live"
    #: The row it was stored as, when it is judged again (a key pinned after it came).
    stored_id: int | None = None
    #: How many bytes came, when ``payload`` holds only the first ``MAX_MESSAGE_BYTES``
    #: of them (what would be rejected is not held whole while it waits for its commit).
    size: int | None = None

    @property
    def length(self) -> int:
        return len(self.payload) if self.size is None else self.size


@dataclass(frozen=True, slots=True)
class GameRow:
    table: str
    epoch: str
    seq: int
    game_id: int
    event: str
    kid: str | None
    digest: str
    prev: str | None
    verdict: str
    why: str | None
    received: float
    ts: datetime | None
    day: str
    number: str | None
    reason: str | None
    source: str
    topic: str
    payload: str
    #: Judged again: the row to update (its verdict), not a row to add.
    stored_id: int | None = None


@dataclass(frozen=True, slots=True)
class SideRow:
    """A table's alarm or ``<base>/info`` (kept once each), or its statistics (the last
    of each day)."""

    kind: str
    table: str
    received: float
    day: str
    kid: str | None
    verdict: str | None
    why: str | None
    digest: str
    topic: str
    payload: str
    code: str | None = None


@dataclass(frozen=True, slots=True)
class RejectRow:
    topic: str
    received: float
    reason: str
    #: At most ``MAX_MESSAGE_BYTES`` of what came: a flood of 16 MiB packets must not
    #: become gigabytes of database.
    payload: bytes
    #: How many bytes came.
    size: int

    @classmethod
    def of(cls, received: Received, reason: str) -> RejectRow:
        payload = received.payload[:MAX_MESSAGE_BYTES]
        return cls(received.topic, received.at, reason, payload, received.length)


@dataclass(frozen=True, slots=True)
class ArchiveAlarm:
    """What the archive says on its alarm topic (and keeps)."""

    code: str
    table: str | None
    at: float
    details: tuple[tuple[str, Any], ...] = ()

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"alarm": self.code, "table": self.table}
        body.update(self.details)
        body["ts"] = iso_utc(self.at)
        body["schema_version"] = SCHEMA_VERSION
        return body


@dataclass(frozen=True, slots=True)
class Pin:
    """A key trusted on first use: the table's ``<base>/info`` named it, self-signed."""

    table: str
    kid: str
    public_key: str
    at: float


@dataclass(slots=True)
class Gap:
    """Seqs ``first`` to ``last`` of an epoch, missing between two messages held."""

    table: str
    epoch: str
    first: int
    last: int
    #: The digest of the message before (``first - 1``) and its game.
    before: str | None
    before_game: int | None
    #: What the message after (``last + 1``) names as its ``prev``, and its game.
    after_prev: str | None
    after_game: int
    found: float
    state: str = "open"
    attempts: int = 0
    why: str | None = None
    next_ask: float = 0.0
    asking: str | None = None
    asked_at: float = 0.0

    @property
    def missing(self) -> int:
        return self.last - self.first + 1


@dataclass(slots=True)
class Epoch:
    """What the archive holds of one epoch of a table: seqs ``first`` to ``head``."""

    table: str
    epoch: str
    first: int
    first_prev: str | None
    first_game: int
    head: int
    head_digest: str
    head_game: int
    #: The epoch and seq it went on past (a handover), when the archive held that message.
    after_epoch: str | None = None
    after_seq: int | None = None
    recent: OrderedDict[int, str] = field(default_factory=OrderedDict)

    def remember(self, seq: int, digest: str) -> None:
        self.recent[seq] = digest
        self.recent.move_to_end(seq)
        while len(self.recent) > REMEMBERED:
            self.recent.popitem(last=False)


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """A ``recall`` to send to a table for a gap: the last ``last`` games up to ``game_id``."""

    table: str
    base: str
    correlation_id: str
    game_id: int
    last: int


@dataclass(frozen=True, slots=True)
class Lookup:
    """The digests kept at ``(table, epoch, seq)`` are needed to judge the message."""

    table: str
    epoch: str
    seq: int


@dataclass(slots=True)
class Outcome:
    """What one message (or one recall reply) comes to."""

    games: list[GameRow] = field(default_factory=list)
    sides: list[SideRow] = field(default_factory=list)
    rejects: list[RejectRow] = field(default_factory=list)
    alarms: list[ArchiveAlarm] = field(default_factory=list)
    pins: list[Pin] = field(default_factory=list)
    #: ``(table, epoch)`` whose epoch record or gaps changed: the shell writes them again.
    epochs: set[tuple[str, str]] = field(default_factory=set)
    #: Tables seen under their base topics.
    bases: dict[str, str] = field(default_factory=dict)
    #: Redeliveries of what is kept already.
    duplicates: int = 0
    lookup: Lookup | None = None

    def extend(self, other: Outcome) -> None:
        self.games += other.games
        self.sides += other.sides
        self.rejects += other.rejects
        self.alarms += other.alarms
        self.pins += other.pins
        self.epochs |= other.epochs
        self.bases.update(other.bases)
        self.duplicates += other.duplicates


@dataclass(frozen=True, slots=True)
class Settings:
    """What the ledger is told by the configuration."""

    patterns: tuple[str, ...]
    trust_on_first_use: bool = False
    recall_games: int = 10
    recall_timeout_s: float = 30.0
    recall_attempts: int = 5
    recall_delay_s: float = RECALL_DELAY_S


def public_key_from_pem(pem: str) -> Ed25519PublicKey | None:
    try:
        key = serialization.load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError):
        return None
    return key if isinstance(key, Ed25519PublicKey) else None


def pem_of(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def base_of(topic: str, patterns: Iterable[str]) -> tuple[str, str] | None:
    """``(base, kind)`` when ``topic`` is ``<base>/<kind>`` with ``base`` matching a pattern."""
    base, slash, kind = topic.rpartition("/")
    if not slash:
        return None
    levels = base.split("/")
    for pattern in patterns:
        wanted = pattern.split("/")
        if len(wanted) == len(levels) and all(
            w in ("+", level) for w, level in zip(wanted, levels, strict=True)
        ):
            return base, kind
    return None


def day_of(ts: datetime | None, at: float) -> str:
    moment = ts if ts is not None else datetime.fromtimestamp(at, UTC)
    return moment.astimezone(UTC).date().isoformat()


def ts_of(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)  # year 1 at +14:00 has no UTC date: no time, then
    except (ValueError, OverflowError):
        return None


def read(received: Received) -> tuple[str, dict[str, Any]]:
    """The payload as text and as an object; ``Rejected`` saying why not."""
    if received.length > MAX_MESSAGE_BYTES:
        raise Rejected(f"payload of {received.length} bytes, over {MAX_MESSAGE_BYTES}")
    if not received.payload:
        raise Rejected("empty payload")
    try:
        text = received.payload.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("payload is not UTF-8") from None
    if "\\u0000" in text:
        # PostgreSQL's text holds no NUL: such a member could not be kept as read.
        raise Rejected("payload holds a NUL character (\\u0000)")
    try:
        value = strict_json(text)
    except DuplicateMember as exc:
        raise Rejected(str(exc)) from None
    except RecursionError:
        raise Rejected("payload is nested too deep") from None
    except ValueError:
        raise Rejected("payload is not JSON") from None
    if not isinstance(value, dict):
        raise Rejected("payload is not a JSON object")
    return text, value


def table_of(payload: dict[str, Any]) -> str:
    table = payload.get("table")
    if not isinstance(table, str) or not 1 <= len(table) <= 128:
        raise Rejected("no table (a string of 1 to 128 characters)")
    return table


def whole_digest(payload: dict[str, Any], raw: bytes) -> str:
    """The chain digest (SHA-256 of the canonical form, sig included) of any payload; one
    that cannot be canonicalised is told by the SHA-256 of its bytes."""
    try:
        _, whole = canonical_pair(payload)
    except Exception:  # rfc8785's errors: a float it cannot write, a lone surrogate
        return "raw:" + hashlib.sha256(raw).hexdigest()
    return b64url(hashlib.sha256(whole).digest())


def raw_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def signature_verdict(why: str) -> str:
    if why.startswith("unsigned"):
        return UNSIGNED
    if why.startswith("signed with another key"):
        return UNKNOWN_KEY
    if why.startswith("malformed prev"):
        return CHAIN_BREAK
    return BAD_SIGNATURE


def side_verdict(
    payload: dict[str, Any], keys: Mapping[str, Ed25519PublicKey], kid: str | None
) -> tuple[str, str | None]:
    if "sig" not in payload and "kid" not in payload:
        return UNSIGNED, "unsigned"
    key = keys.get(kid) if kid is not None else None
    if key is None:
        return UNKNOWN_KEY, f"signed with another key (kid {kid!r})"
    problem = signature_problem(payload, key)
    return (VERIFIED, None) if problem is None else (BAD_SIGNATURE, problem)
