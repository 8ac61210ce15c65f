"""Verify signed, chained ``<base>/game`` messages. Pure.

``verify_messages`` checks a stream of payloads, as a consumer recorded them
or as the journal keeps them, against the table's public key: every
signature, every link (``seq`` one more than the message before, ``prev`` the
digest of it), and every game ending exactly once. It stops at the first
failure and says where (the message's ``seq``, else its ``game_id``, else its
line) and why, in one line: what ``wheeld verify`` prints before exiting 1.

Each journal has an ``epoch``, carried in its messages: every epoch is a chain
of its own, said as such where one gives way to another, never a gap. Where
an epoch goes on past another's message (a standby took the table over, its
seq moved on past the last one published), the link names that message: a
handover, not a gap. A message said again word for word (a broker's
redelivery: a publisher keeps several in flight, so after a reconnect a run
of them may come again; or a successor saying again what may not have gone
out) is what a consumer drops, and so does the verifier, counting it; a
different message under a seq already seen is a forgery.

A journal's messages are judged here too, with its own hash chains, by
``wheeld.audit.journal_check``; the signatures in worker processes, a batch
at a time (``_judge_batch``). Everything streams: memory does not grow with
what is verified.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.core.messages import ENDING_EVENTS, EXPORT_FORMAT
from wheeld.core.signing import (
    ChainState,
    DuplicateMember,
    b64url,
    canonical_pair,
    key_id,
    unb64url,
    unique_members,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

#: The events that end a game: each game has exactly one of them.
ENDINGS = ENDING_EVENTS
#: How far ahead a missing seq is looked for, to tell a reorder from a gap.
LOOKAHEAD = 64
#: How many recent seqs (and games) each chain remembers, to tell a repeat, a
#: replay or a second different message: bounded, whatever the length verified.
REMEMBERED = 4096


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


@dataclass(slots=True)
class EpochSpan:
    """One epoch's messages as verified: its first and last seq and how many."""

    epoch: str | None
    first: int
    last: int
    count: int = 1
    #: The epoch and seq it went on past (a takeover), when it did.
    after: tuple[str | None, int] | None = None

    def describe(self) -> str:
        name = self.epoch if self.epoch is not None else "(none: an older wheeld)"
        span = f"epoch {name}: seq {self.first}-{self.last} ({self.count} messages)"
        if self.after is not None:
            before = self.after[0] if self.after[0] is not None else "(none)"
            span += f", on from epoch {before} seq {self.after[1]}"
        return span


@dataclass(slots=True)
class Report:
    """What a verification saw besides its verdict: epochs and repeats dropped."""

    spans: list[EpochSpan] = field(default_factory=list)
    repeats: int = 0
    #: A journal's: the seqs after which its chain went on past another journal's message.
    floors: list[int] = field(default_factory=list)

    def said(self) -> bool:
        """Whether there is more to say than the verdict."""
        return len(self.spans) > 1 or bool(self.repeats or self.floors)

    def lines(self) -> list[str]:
        out = [span.describe() for span in self.spans]
        if self.repeats:
            out.append(f"{self.repeats} message(s) said again word for word: dropped")
        if self.floors:
            seqs = ", ".join(str(seq) for seq in self.floors[:5])
            if len(self.floors) > 5:
                seqs += f" and {len(self.floors) - 5} more"
            out.append(
                f"went on past another journal's message at seq {seqs} (a takeover, or a"
                " lost state directory): its messages are in that journal, not a gap"
            )
        return out


def verify_messages(
    messages: Iterable[Message],
    public_key: Ed25519PublicKey | Sequence[Ed25519PublicKey],
    *,
    start: ChainState | None = None,
    end: ChainState | None = None,
    floors: Mapping[int, str] | None = None,
    report: Report | None = None,
) -> Failure | None:
    """The first message that fails, and why; None when every one holds.

    ``start``, when known (an export's anchor), is where the first message
    must stand, so a dropped first message is told; ``end`` is where the chain
    must stand after the last one (a dropped last message). Without them the
    stream may begin and end anywhere: a consumer may have joined late.
    ``floors`` (the journal's, seq -> digest) are where the chain went on past
    another journal's message. ``report`` is filled with the epochs seen.
    """
    check = ChainCheck(public_key, start=start, floors=floors or {}, report=report)
    return _checked(((message, None) for message in messages), check, end)


def _checked(
    messages: Iterable[tuple[Message, str | None]], check: ChainCheck, end: ChainState | None
) -> Failure | None:
    """Feed ``check`` each message (with its signature's verdict, when known), a window of
    ``LOOKAHEAD`` ahead so that a reorder is told from a gap; the first failure."""
    window: deque[tuple[Message, str | None]] = deque()
    ahead = _Ahead(window)
    for pair in messages:
        window.append(pair)
        if len(window) > LOOKAHEAD:
            message, signed = window.popleft()
            failure = check.feed(message, ahead, signed)
            if failure is not None:
                return failure
    while window:
        message, signed = window.popleft()
        failure = check.feed(message, ahead, signed)
        if failure is not None:
            return failure
    return check.finish(end)


class _Ahead:
    """The messages in the window, as an iterable of messages."""

    def __init__(self, window: deque[tuple[Message, str | None]]) -> None:
        self._window = window

    def __iter__(self) -> Iterator[Message]:
        return (message for message, _ in self._window)


@dataclass(slots=True)
class _Chain:
    """One epoch's chain as verified so far."""

    expected: ChainState | None
    #: Recent seqs and their digests (a bounded memory).
    seen: OrderedDict[int, str] = field(default_factory=OrderedDict)


class ChainCheck:
    """The links, signatures and game endings of a stream of messages, one at a time."""

    def __init__(
        self,
        keys: Ed25519PublicKey | Sequence[Ed25519PublicKey],
        *,
        start: ChainState | None = None,
        floors: Mapping[int, str] | None = None,
        report: Report | None = None,
    ) -> None:
        self._keys = [keys] if isinstance(keys, Ed25519PublicKey) else list(keys)
        self._by_kid = {key_id(key): key for key in self._keys}
        self._start = start
        self._floors = dict(floors or {})
        self._chains: dict[str | None, _Chain] = {}
        #: Recent digests of every epoch: digest -> (epoch, seq), to tell a handover.
        self._digests: OrderedDict[str, tuple[str | None, int]] = OrderedDict()
        self._games = _Games()
        self._last: tuple[str | None, int, str] | None = None
        self.report = report if report is not None else Report()

    def feed(
        self, message: Message, later: Iterable[Message] = (), signed: str | None = None
    ) -> Failure | None:
        """Check one message (``later``: the messages that follow it, to tell a reorder;
        ``signed``: its ``check_signature`` when that was done elsewhere)."""
        payload = message.payload
        if signed is None:
            signed = check_signature(payload, self._keys, self._by_kid)
        elif signed.startswith("!"):  # a worker's verdict: why not (a digest has no "!")
            signed = _Why(signed[1:])
        if isinstance(signed, _Why):
            return Failure(_where(message), signed)
        seq: int = payload["seq"]
        epoch = payload.get("epoch") if isinstance(payload.get("epoch"), str) else None
        if self._last == (epoch, seq, signed):
            self.report.repeats += 1  # said again right after itself: a consumer drops it
            return None
        chain = self._chains.get(epoch)
        if chain is None:
            chain = self._chains[epoch] = _Chain(self._start if not self._chains else None)
        if chain.seen.get(seq) == signed:
            # Word for word again, further back: a run in flight redelivered after a
            # reconnect. Nothing new is said by it; a consumer drops it, and so do we.
            self.report.repeats += 1
            return None
        why = self._link_why(payload, epoch, chain, signed, later)
        if why is None:
            why = self._games.why(payload, epoch)
        if why is not None:
            return Failure(_where(message), why)
        self._note(epoch, seq, signed, payload.get("prev"))
        chain.expected = ChainState(seq + 1, signed)
        chain.seen[seq] = signed
        if len(chain.seen) > REMEMBERED:
            chain.seen.popitem(last=False)
        self._digests[signed] = (epoch, seq)
        if len(self._digests) > REMEMBERED:
            self._digests.popitem(last=False)
        self._last = (epoch, seq, signed)
        return None

    def finish(self, end: ChainState | None) -> Failure | None:
        """After the last message: the chain must stand at ``end`` (an export's anchor)."""
        if end is None:
            return None
        expected = self._chains[self._last[0]].expected if self._last is not None else None
        if expected != end:
            if expected is None or end.seq > expected.seq:
                first = 1 if expected is None else expected.seq
                return Failure(f"seq {first}", f"gap: seq {first}-{end.seq - 1} missing at the end")
            return Failure(f"seq {end.seq}", "broken link: the chain does not end where it should")
        return None

    def _note(self, epoch: str | None, seq: int, digest_: str, prev: Any) -> None:
        spans = self.report.spans
        if spans and spans[-1].epoch == epoch:
            spans[-1].last = seq
            spans[-1].count += 1
            return
        after = self._digests.get(prev) if isinstance(prev, str) else None
        spans.append(
            EpochSpan(epoch, seq, seq, after=after if after and after[0] != epoch else None)
        )

    def _link_why(
        self,
        payload: dict[str, Any],
        epoch: str | None,
        chain: _Chain,
        signed: str,
        later: Iterable[Message],
    ) -> str | None:
        seq: int = payload["seq"]
        prev = payload.get("prev")
        expected = chain.expected
        if expected is None:
            return None  # where this chain begins (a consumer may have joined late)
        if seq == expected.seq:
            if prev != expected.prev:
                if prev is not None and self._floors.get(seq - 1) == prev:
                    # Went on after another controller's message of the same seq as our
                    # last (a takeover level with it: two controllers decided those seqs).
                    self._games.open = None
                    return None
                return "broken link: prev does not name the message before it"
            return None
        if seq in chain.seen:  # the same word for word was dropped (``feed``)
            return f"a second, different message with seq {seq}"
        if seq < expected.seq or any(m.payload.get("seq") == expected.seq for m in later):
            return f"reordered: seq {seq} where seq {expected.seq} was due"
        if seq > expected.seq and (prev is None or isinstance(prev, str)):
            handed = self._digests.get(prev) if prev is not None else None
            if (handed is not None and handed[0] != epoch and handed[1] < seq) or (
                self._floors.get(seq - 1) == (prev or "")
            ):
                # Went on after another controller's message (a takeover): whatever game
                # was open here was that controller's to end.
                self._games.open = None
                return None
        missing = (
            f"seq {expected.seq}" if seq == expected.seq + 1 else f"seq {expected.seq}-{seq - 1}"
        )
        return f"gap: {missing} missing"


class _NoEpoch:
    pass


_NO_EPOCH = _NoEpoch()


def check_signature(
    payload: dict[str, Any],
    keys: Sequence[Ed25519PublicKey],
    by_kid: Mapping[str, Ed25519PublicKey] | None = None,
) -> str:
    """The message's digest when its signature holds and it is a chained game message;
    otherwise why not (a sentence, which never has a digest's form)."""
    if "sig" not in payload and "kid" not in payload:
        return _Why("unsigned (written by a daemon with signing.required = false?)")
    sig = payload.get("sig")
    if not isinstance(sig, str):
        return _Why("no signature")
    by_kid = by_kid if by_kid is not None else {key_id(key): key for key in keys}
    # Several keys: a table whose key was rotated; each message names its key by kid.
    key = by_kid.get(payload.get("kid"))  # type: ignore[arg-type]
    if key is None:
        return _Why(f"signed with another key (kid {payload.get('kid')!r})")
    try:
        signature = unb64url(sig)
    except ValueError:
        return _Why("malformed signature")
    try:
        signed_bytes, whole = canonical_pair(payload)
    except Exception:  # rfc8785's errors (a float it cannot write, a lone surrogate)
        return _Why("not canonicalisable")
    try:
        key.verify(signature, signed_bytes)
    except InvalidSignature:
        return _Why("bad signature")
    if type(payload.get("seq")) is not int:
        return _Why("no seq: not a chained <base>/game message")
    prev = payload.get("prev")
    if prev is not None and not isinstance(prev, str):
        return _Why("malformed prev")
    return b64url(hashlib.sha256(whole).digest())


class _Why(str):
    """A reason a message does not verify (not a digest)."""


class _Games:
    """Each game ends once, and a game that began ends before the next one begins.

    Games are told apart by epoch as well: a journal lost with the broker's
    memory starts its ids again, in an epoch of its own. A game one epoch
    launched may be ended in another (a successor voids what it took over).
    """

    def __init__(self) -> None:
        self.ended: OrderedDict[tuple[str | None, int], None] = OrderedDict()
        self.started: OrderedDict[tuple[str | None, int], None] = OrderedDict()
        self.open: tuple[str | None, int] | None = None

    def why(self, payload: dict[str, Any], epoch: str | None) -> str | None:
        game_id, event = payload.get("game_id"), payload.get("event")
        if type(game_id) is not int or not isinstance(event, str):
            return "not a game message (no game_id or event)"
        key = (epoch, game_id)
        if key in self.ended:
            if event in ENDINGS:
                return f"game {game_id} ended twice"
            return f"game {game_id} has a {event} after its end"
        if event in ENDINGS and key not in self.started:
            # Ended in this epoch without being launched in it: launched in another.
            other = next((e for (e, g) in self.ended if g == game_id), _NO_EPOCH)
            if not isinstance(other, _NoEpoch) and not (
                self.open is not None and self.open[1] == game_id
            ):
                return f"game {game_id} ended twice (in epoch {other} and in epoch {epoch})"
        if self.open is not None and self.open[1] != game_id and self.open[0] == epoch:
            # (A game another epoch left open was its successor's to end, or was lost
            # with everything that knew it: a journal and the broker's memory.)
            return f"game {self.open[1]} never ended (game {game_id} began after it)"
        if event in ENDINGS:
            self._remember(self.ended, key)
            self.open = None
        else:
            self._remember(self.started, key)
            self.open = key
        return None

    @staticmethod
    def _remember(
        seen: OrderedDict[tuple[str | None, int], None], key: tuple[str | None, int]
    ) -> None:
        seen[key] = None
        if len(seen) > REMEMBERED:
            seen.popitem(last=False)


# -- sources -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recording:
    """A file of messages read: the payloads, and an export's header when it has one."""

    messages: list[Message]
    header: dict[str, Any] | None = None


def strict_json(text: str) -> Any:
    """JSON that names no member twice (a signature over one reading proves nothing of another).

    Text as wheeld writes it (compact, in its members' order) reads back to
    itself: that is checked first, at C speed, and only other text is read
    member by member.
    """
    value = json.loads(text)
    if isinstance(value, dict) and _compact(value) == text:
        return value  # the same members, each once: nothing was dropped in the reading
    return json.loads(text, object_pairs_hook=unique_members)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


#: The longest line a recording may hold: a game message is a few hundred bytes, and
#: never over MQTT's 64 KiB here. A longer one is no message, and is not held whole.
MAX_LINE_CHARS = 1024 * 1024


def cut_lines(handle: IO[str]) -> Iterator[str]:
    """``handle``'s lines, each cut past MAX_LINE_CHARS, the rest of it read and let go:
    memory stays bounded whatever the file (found: a file of NULs, or /dev/zero, was read
    as one line, as large as the file)."""
    while line := handle.readline(MAX_LINE_CHARS + 1):
        yield line  # a reader that stops at a long line reads no further (/dev/zero ends)
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            while (rest := handle.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                pass


class RecordingReader:
    """A file of messages, one JSON object a line, read as it goes.

    ``wheeld replay``'s output, a consumer's recording or an export: an
    export's header line and its frame lines are recognised; blank lines are
    skipped. ``header`` is the export's once the first message has been read;
    ``failure`` the first line that is not a JSON object, which ends it.
    """

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = enumerate(lines, 1)
        self.header: dict[str, Any] | None = None
        self.failure: Failure | None = None
        self.count = 0
        self._first = self._next()

    def _next(self) -> Message | None:
        for number, line in self._lines:
            if len(line) > MAX_LINE_CHARS:
                self.failure = Failure(
                    f"line {number}", f"longer than {MAX_LINE_CHARS} characters: not a message"
                )
                return None
            if not line.strip():
                continue
            try:
                value = strict_json(line)
            except DuplicateMember as exc:
                self.failure = Failure(f"line {number}", str(exc))
                return None
            except ValueError:
                self.failure = Failure(f"line {number}", "not JSON")
                return None
            except RecursionError:  # a few KB of '[' are JSON past Python's recursion limit
                self.failure = Failure(f"line {number}", "not JSON (nested too deeply)")
                return None
            if not isinstance(value, dict):
                self.failure = Failure(f"line {number}", "not a JSON object")
                return None
            if "export" in value and not self.count and self.header is None:
                header = value["export"]
                if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                    self.failure = Failure(f"line {number}", f"not a {EXPORT_FORMAT} header")
                    return None
                self.header = header
            elif "frame" in value:
                continue  # the serial lines an export carries beside the messages: not signed
            else:
                self.count += 1
                return Message(f"line {number}", value)
        return None

    def __iter__(self) -> Iterator[Message]:
        message = self._first
        while message is not None:
            yield message
            message = self._next()


def read_lines(lines: Iterable[str]) -> Recording | Failure:
    """A whole (small) file of messages read at once; the first failure, if any."""
    reader = RecordingReader(lines)
    messages = list(reader)
    if reader.failure is not None:
        return reader.failure
    if not messages:
        return Failure("the file", "holds no message: nothing is vouched for")
    return Recording(messages, reader.header)


def export_bounds(header: dict[str, Any]) -> tuple[ChainState, ChainState] | Failure:
    """Where an export's chain starts and ends, from its header's anchor."""
    try:
        anchor = header["anchor"]
        start = ChainState.from_dict(anchor["start"])
        end = ChainState.from_dict(anchor["end"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return Failure("line 1", "the export's anchor is malformed")
    return start, end


def export_floors(header: dict[str, Any]) -> dict[int, str] | Failure:
    """Where an export's chain says it went on past another controller's message (seq ->
    the digest it went on from, "" for a skip), from its header: none in an older export.
    Unsigned: named in a gap's failure, never taken to pass one."""
    floors = header.get("floors", {})
    if not isinstance(floors, dict) or not all(
        isinstance(seq, str)
        and seq.isascii()
        and seq.isdigit()
        and len(seq) <= 20  # past a seq any chain could reach, and int()'s digit limit
        and isinstance(link, str)
        for seq, link in floors.items()
    ):
        return Failure("line 1", "the export's floors are malformed")
    return {int(seq): link for seq, link in floors.items()}


# -- in worker processes ----------------------------------------------------------

#: The members of a payload the chain and the games are judged by (all a worker sends back).
_JUDGED = ("seq", "prev", "epoch", "game_id", "event")
_Batch = TypeVar("_Batch")
_Result = TypeVar("_Result")
#: A worker's keys, given when it starts (``_worker_keys``).
_WORKER_KEYS: list[Ed25519PublicKey] = []


def _worker_keys(raw: list[bytes]) -> None:
    _WORKER_KEYS[:] = [Ed25519PublicKey.from_public_bytes(key) for key in raw]


def in_order(
    batches: Iterable[_Batch], submit: Callable[[_Batch], Future[_Result]], depth: int
) -> Iterator[tuple[_Batch, _Result]]:
    """Each batch with what its worker made of it (``submit`` hands it to one), in the
    batches' order, at most ``depth`` in flight: the workers are kept busy and memory
    does not grow with what is read."""
    in_flight: deque[tuple[_Batch, Future[_Result]]] = deque()
    for batch in batches:
        in_flight.append((batch, submit(batch)))
        if len(in_flight) > depth:
            done, result = in_flight.popleft()
            yield done, result.result()
    while in_flight:
        done, result = in_flight.popleft()
        yield done, result.result()


def _judge_batch(texts: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Read and check each stored payload (in a worker): its verdict (a digest, or ``!``
    and why not) and the members the chain is judged by."""
    by_kid = {key_id(key): key for key in _WORKER_KEYS}
    out: list[tuple[str, dict[str, Any]]] = []
    for text in texts:
        try:
            payload = strict_json(text)
        except DuplicateMember as exc:
            out.append((f"!{exc}", {}))
            continue
        except ValueError:
            out.append(("!payload is not JSON", {}))
            continue
        if not isinstance(payload, dict):
            out.append(("!payload is not a JSON object", {}))
            continue
        verdict = check_signature(payload, _WORKER_KEYS, by_kid)
        judged = {key: payload[key] for key in _JUDGED if key in payload}
        out.append((f"!{verdict}" if isinstance(verdict, _Why) else verdict, judged))
    return out
