"""The archive's judgement of every message, pure: no database, no broker, no clock.

``Ledger.feed`` takes one message as it came (topic, bytes, when) and returns an
``Outcome``: the rows to keep (every game message with its verdict, the
tables' alarms, info and statistics, what could not be read at all), the
archive's own alarms, keys pinned on first use, and which epochs and gaps
changed. The shell commits an outcome, and only then acknowledges the message
to the broker.

Verdicts of a ``<base>/game`` message: ``verified`` (its signature holds under
a key trusted for its table, and it links to what the archive holds of its
epoch), ``chain_break`` (signed, but its ``prev`` does not name the message
before it, or a second, different message with a seq already held),
``bad_signature``, ``unknown_key`` and ``unsigned``. Only verified and
chain-break messages make the chain; a forged one never moves it.

Each ``(table, epoch)`` is a chain of its own: what the archive holds of it
runs from ``first`` to ``head``, and every seq missing in between is a gap,
kept with the digests at its two ends so that whatever fills it (a late
message, the table's answer to ``recall``) is checked link by link. A new
epoch is never a gap: it begins where its first message stands, after the
message its ``prev`` names when the archive holds it (a handover). Only when
it goes on past an older epoch of the table whose end the archive never saw
is that end a gap of the older epoch.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.archive.records import (
    ALARM_EVERY_S,
    CHAIN_BREAK,
    CHAINED,
    MAX_INT,
    RECALL_DELAY_S,
    UNKNOWN_KEY,
    VERIFIED,
    ArchiveAlarm,
    Epoch,
    GameRow,
    Gap,
    Lookup,
    Outcome,
    Pin,
    RecallRequest,
    Received,
    Rejected,
    RejectRow,
    Settings,
    SideRow,
    base_of,
    day_of,
    pem_of,
    public_key_from_pem,
    raw_digest,
    read,
    side_verdict,
    signature_verdict,
    table_of,
    ts_of,
    whole_digest,
)
from wheeld.audit.verify import check_signature
from wheeld.core.signing import key_id, signature_problem


class Ledger:
    """Every table's chains, gaps and keys as the archive holds them; judges each message."""

    def __init__(
        self, settings: Settings, trusted: Mapping[str, Iterable[Ed25519PublicKey]] | None = None
    ) -> None:
        self.settings = settings
        #: Keys from the operator's files, by table and kid.
        self._files: dict[str, dict[str, Ed25519PublicKey]] = {
            table: {key_id(key): key for key in keys} for table, keys in (trusted or {}).items()
        }
        #: Keys pinned on first use, by table and kid.
        self._pinned: dict[str, dict[str, Ed25519PublicKey]] = {}
        self.epochs: dict[tuple[str, str], Epoch] = {}
        self.gaps: dict[tuple[str, str], list[Gap]] = {}
        self.bases: dict[str, str] = {}
        #: The epoch of each table most recently begun or moved on.
        self._latest: dict[str, str] = {}
        self._last_alarm: dict[tuple[str, str | None], tuple[float, int]] = {}
        self._asking: dict[str, tuple[str, str]] = {}

    # -- state from the database ---------------------------------------------------------

    def restore_epoch(self, epoch: Epoch) -> None:
        self.epochs[(epoch.table, epoch.epoch)] = epoch
        self._latest.setdefault(epoch.table, epoch.epoch)

    def restore_latest(self, table: str, epoch: str) -> None:
        self._latest[table] = epoch

    def restore_gap(self, gap: Gap) -> None:
        self.gaps.setdefault((gap.table, gap.epoch), []).append(gap)
        self.gaps[(gap.table, gap.epoch)].sort(key=lambda g: g.first)

    def restore_pin(self, table: str, kid: str, pem: str) -> None:
        key = public_key_from_pem(pem)
        if key is not None and key_id(key) == kid:
            self._pinned.setdefault(table, {})[kid] = key

    def keys(self, table: str) -> dict[str, Ed25519PublicKey]:
        """Every key trusted for ``table``: the operator's files and those pinned."""
        return {**self._pinned.get(table, {}), **self._files.get(table, {})}

    def trusted(self) -> list[tuple[str, str]]:
        """``(table, kid)`` of every key trusted: the operator's files and those pinned."""
        tables = sorted({*self._files, *self._pinned})
        return [(table, kid) for table in tables for kid in sorted(self.keys(table))]

    def open_gaps(self) -> list[Gap]:
        return [gap for gaps in self.gaps.values() for gap in gaps]

    # -- messages ----------------------------------------------------------------------------

    def feed(self, received: Received, stored: list[str] | None = None) -> Outcome:
        """Judge one message. ``stored``: the digests the database holds at the message's
        ``(table, epoch, seq)``, when a previous call asked for them (``Outcome.lookup``)."""
        out = Outcome()
        where = base_of(received.topic, self.settings.patterns)
        if where is None:
            return self._reject(out, received, "not a topic of a table the archive follows")
        base, kind = where
        try:
            text, payload = read(received)
            # <base>/stats names no table: it is the table of its base topic.
            table = self._of_base(base) if kind == "stats" else table_of(payload)
        except Rejected as exc:
            return self._reject(out, received, str(exc))
        if kind == "game":
            try:
                self._game(out, received, text, payload, table, stored)
            except Rejected as exc:
                return self._reject(out, received, str(exc))
        elif kind in ("alarm", "info"):
            self._signed_side(out, received, text, payload, table, kind)
        elif kind == "stats":
            day = day_of(None, received.at)
            out.sides.append(
                SideRow(
                    "stats",
                    table,
                    received.at,
                    day,
                    None,
                    None,
                    None,
                    raw_digest(received.payload),
                    received.topic,
                    text,
                )
            )
        else:
            return self._reject(out, received, f"not a kind of message the archive keeps: {kind}")
        if received.source == "live" and self.bases.get(table) != base and self._vouches(out):
            self.bases[table] = base  # where its recall commands go
            out.bases[table] = base
        return out

    def _vouches(self, out: Outcome) -> bool:
        """Whether a message tells where its table is: a new link of its chain (only the
        table signs one), or, for a table not placed yet, anything it signed. A forged or
        replayed message under another base topic never moves where recalls go."""
        if any(g.verdict in CHAINED and g.stored_id is None for g in out.games):
            return True
        table = (out.games or out.sides or [None])[0]
        return (
            table is not None
            and table.table not in self.bases
            and table.verdict == VERIFIED
            and not out.duplicates
        )

    def _of_base(self, base: str) -> str:
        """The table whose messages come under ``base`` (else its last level, the table id
        of a default base topic, ``wheeld/<table.id>``)."""
        known = [table for table, where in self.bases.items() if where == base]
        if known:
            return known[0]
        return table_of({"table": base.rpartition("/")[2]})

    def _reject(self, out: Outcome, received: Received, reason: str) -> Outcome:
        out.rejects.append(RejectRow.of(received, reason))
        self._alarm(
            out, "message_rejected", None, received.at, topic=received.topic[:200], reason=reason
        )
        return out

    def _alarm(self, out: Outcome, code: str, table: str | None, at: float, **details: Any) -> None:
        """An alarm, at most one of a code and table a minute; those held back are counted
        in the next."""
        last, held = self._last_alarm.get((code, table), (float("-inf"), 0))
        # A clock set back is no reason to hold alarms back until it catches up.
        if 0 <= at - last < ALARM_EVERY_S:
            self._last_alarm[(code, table)] = (last, held + 1)
            return
        if held:
            details["held_back"] = held
        self._last_alarm[(code, table)] = (at, 0)
        out.alarms.append(ArchiveAlarm(code, table, at, tuple(details.items())))

    def _event(self, out: Outcome, code: str, table: str, at: float, **details: Any) -> None:
        """An alarm that is never held back (each gap's: found, filled, given up)."""
        out.alarms.append(ArchiveAlarm(code, table, at, tuple(details.items())))

    def _game(
        self,
        out: Outcome,
        received: Received,
        text: str,
        payload: dict[str, Any],
        table: str,
        stored: list[str] | None,
    ) -> None:
        seq, game_id, event = payload.get("seq"), payload.get("game_id"), payload.get("event")
        if type(seq) is not int or not 1 <= seq <= MAX_INT:
            raise Rejected("no seq (a whole number from 1)")
        if type(game_id) is not int or not 1 <= game_id <= MAX_INT:
            raise Rejected("no game_id (a whole number from 1)")
        if not isinstance(event, str) or not 1 <= len(event) <= 64:
            raise Rejected("no event")
        raw_epoch = payload.get("epoch", "")
        if not isinstance(raw_epoch, str) or len(raw_epoch) > 128:
            raise Rejected("epoch is not a string of at most 128 characters")
        epoch = raw_epoch
        kid = payload.get("kid") if isinstance(payload.get("kid"), str) else None
        prev = payload.get("prev") if isinstance(payload.get("prev"), str) else None
        keys = self.keys(table)
        checked = check_signature(payload, list(keys.values()), keys)
        verdict, why = VERIFIED, None
        if " " in checked:  # a reason, never a digest
            verdict, why = signature_verdict(checked), checked
            digest = whole_digest(payload, received.payload)
        else:
            digest = checked
        ts = ts_of(payload.get("ts"))

        def row(verdict: str, why: str | None) -> GameRow:
            number = payload.get("number") if isinstance(payload.get("number"), str) else None
            reason = payload.get("reason") if isinstance(payload.get("reason"), str) else None
            return GameRow(
                table,
                epoch,
                seq,
                game_id,
                event,
                kid,
                digest,
                prev,
                verdict,
                why,
                received.at,
                ts,
                day_of(ts, received.at),
                number,
                reason,
                received.source,
                received.topic,
                text,
                received.stored_id,
            )

        if verdict != VERIFIED:
            out.games.append(row(verdict, why))
            if verdict == UNKNOWN_KEY and not keys and self.settings.trust_on_first_use:
                return  # its table's key is not known yet: judged again once it is pinned
            self._alarm(
                out,
                verdict,
                table,
                received.at,
                epoch=epoch,
                seq=seq,
                game_id=game_id,
                kid=kid,
                why=why,
            )
            return
        linked = self._link(out, table, epoch, seq, game_id, digest, prev, received.at, stored)
        if linked is None:
            return  # a lookup is needed, or a redelivery
        verdict, why = linked
        out.games.append(row(verdict, why))
        if verdict == CHAIN_BREAK:
            self._alarm(
                out, CHAIN_BREAK, table, received.at, epoch=epoch, seq=seq, game_id=game_id, why=why
            )

    def _link(
        self,
        out: Outcome,
        table: str,
        epoch: str,
        seq: int,
        game_id: int,
        digest: str,
        prev: str | None,
        at: float,
        stored: list[str] | None,
    ) -> tuple[str, str | None] | None:
        """Where a verified message stands in its epoch: its verdict and why, or None for a
        redelivery (or when ``out.lookup`` asks for what the database holds)."""
        key = (table, epoch)
        held = self.epochs.get(key)
        if held is None:
            self._begin(out, table, epoch, seq, game_id, digest, prev, at)
            return VERIFIED, None
        out.epochs.add(key)
        if seq in held.recent:
            if held.recent[seq] == digest:
                out.epochs.discard(key)
                out.duplicates += 1
                return None
            return CHAIN_BREAK, f"a second, different message with seq {seq}"
        self._latest[table] = epoch
        if seq == held.head + 1:
            why = None if prev == held.head_digest else f"prev does not name seq {held.head}"
            held.head, held.head_digest, held.head_game = seq, digest, game_id
            held.remember(seq, digest)
            return (VERIFIED, None) if why is None else (CHAIN_BREAK, why)
        if seq > held.head:
            self._open_gap(
                out,
                Gap(
                    table,
                    epoch,
                    held.head + 1,
                    seq - 1,
                    held.head_digest,
                    held.head_game,
                    prev,
                    game_id,
                    at,
                ),
            )
            held.head, held.head_digest, held.head_game = seq, digest, game_id
            held.remember(seq, digest)
            return VERIFIED, None
        gap = next((g for g in self.gaps.get(key, []) if g.first <= seq <= g.last), None)
        if gap is not None:
            held.remember(seq, digest)
            return self._fill(out, gap, seq, game_id, digest, prev, at)
        if seq < held.first:
            held.remember(seq, digest)
            if seq == held.first - 1:
                why = None if digest == held.first_prev else f"seq {held.first} does not name it"
            else:
                self._open_gap(
                    out,
                    Gap(
                        table,
                        epoch,
                        seq + 1,
                        held.first - 1,
                        digest,
                        game_id,
                        held.first_prev,
                        held.first_game,
                        at,
                    ),
                )
                why = None
            held.first, held.first_prev, held.first_game = seq, prev, game_id
            return (VERIFIED, None) if why is None else (CHAIN_BREAK, why)
        # Held already, long ago: the database says what.
        if stored is None:
            out.lookup = Lookup(table, epoch, seq)
            out.epochs.discard(key)
            return None
        out.epochs.discard(key)
        if digest in stored:
            out.duplicates += 1
            return None
        if stored:
            return CHAIN_BREAK, f"a second, different message with seq {seq}"
        return VERIFIED, None

    def _begin(
        self,
        out: Outcome,
        table: str,
        epoch: str,
        seq: int,
        game_id: int,
        digest: str,
        prev: str | None,
        at: float,
    ) -> None:
        """A new epoch's first message: a handover from the message its ``prev`` names, or,
        past an older epoch whose end the archive never saw, a gap at that end."""
        began = Epoch(table, epoch, seq, prev, game_id, seq, digest, game_id)
        began.remember(seq, digest)
        key = (table, epoch)
        self.epochs[key] = began
        out.epochs.add(key)
        latest = self._latest.get(table)
        self._latest[table] = epoch
        if prev is None:
            return
        for other in self.epochs.values():
            if other.table == table and other.epoch != epoch and other.head_digest == prev:
                began.after_epoch, began.after_seq = other.epoch, other.head
                return
        older = self.epochs.get((table, latest)) if latest is not None else None
        if older is not None and older.epoch != epoch and older.head < seq - 1:
            self._open_gap(
                out,
                Gap(
                    table,
                    older.epoch,
                    older.head + 1,
                    seq - 1,
                    older.head_digest,
                    older.head_game,
                    prev,
                    game_id,
                    at,
                ),
            )
            began.after_epoch, began.after_seq = older.epoch, seq - 1
            older.head, older.head_digest, older.head_game = seq - 1, "", game_id
            out.epochs.add((table, older.epoch))

    def _open_gap(self, out: Outcome, gap: Gap) -> None:
        gap.next_ask = gap.found + RECALL_DELAY_S
        gaps = self.gaps.setdefault((gap.table, gap.epoch), [])
        gaps.append(gap)
        gaps.sort(key=lambda g: g.first)
        out.epochs.add((gap.table, gap.epoch))
        self._event(
            out,
            "gap",
            gap.table,
            gap.found,
            epoch=gap.epoch,
            first_seq=gap.first,
            last_seq=gap.last,
        )

    def _fill(
        self,
        out: Outcome,
        gap: Gap,
        seq: int,
        game_id: int,
        digest: str,
        prev: str | None,
        at: float,
    ) -> tuple[str, str | None]:
        """A missing message arrives: checked against both ends of its gap, which splits."""
        why = None
        if seq == gap.first and gap.before and prev != gap.before:
            why = f"prev does not name seq {seq - 1}"
        if seq == gap.last and gap.after_prev is not None and digest != gap.after_prev:
            why = f"seq {seq + 1} does not name it"
        key = (gap.table, gap.epoch)
        gaps = self.gaps[key]
        gaps.remove(gap)
        left = Gap(
            gap.table,
            gap.epoch,
            gap.first,
            seq - 1,
            gap.before,
            gap.before_game,
            prev,
            game_id,
            gap.found,
            gap.state,
            gap.attempts,
            gap.why,
            gap.next_ask,
            gap.asking,
            gap.asked_at,
        )
        right = Gap(
            gap.table,
            gap.epoch,
            seq + 1,
            gap.last,
            digest,
            game_id,
            gap.after_prev,
            gap.after_game,
            gap.found,
            gap.state,
            gap.attempts,
            gap.why,
            gap.next_ask,
            gap.asking,
            gap.asked_at,
        )
        gaps += [g for g in (left, right) if g.missing > 0]
        gaps.sort(key=lambda g: g.first)
        if not gaps:
            del self.gaps[key]
        if left.missing <= 0 and right.missing <= 0:
            self._event(out, "gap_filled", gap.table, at, epoch=gap.epoch, seq=seq)
        out.epochs.add(key)
        return (VERIFIED, None) if why is None else (CHAIN_BREAK, why)

    def _signed_side(
        self,
        out: Outcome,
        received: Received,
        text: str,
        payload: dict[str, Any],
        table: str,
        kind: str,
    ) -> None:
        """A table's alarm or ``<base>/info``: signed like an alarm (``kid``, ``sig``, no chain)."""
        keys = self.keys(table)
        kid = payload.get("kid") if isinstance(payload.get("kid"), str) else None
        announced = payload.get("signing") if kind == "info" else None
        trusting = self.settings.trust_on_first_use and not keys
        if kind == "info" and isinstance(announced, dict) and trusting:
            self._pin(out, received, payload, table, announced)
            keys = self.keys(table)
        verdict, why = side_verdict(payload, keys, kid)
        if kind == "info" and isinstance(announced, dict) and keys:
            named = announced.get("kid")
            if named not in keys:
                verdict, why = UNKNOWN_KEY, f"announces key {named!r}, which is not trusted"
                self._alarm(out, "key_changed", table, received.at, kid=named, trusted=sorted(keys))
        elif verdict != VERIFIED and not (verdict == UNKNOWN_KEY and not keys):
            self._alarm(out, verdict, table, received.at, topic=received.topic, kid=kid, why=why)
        code = payload.get("alarm") if kind == "alarm" else None
        out.sides.append(
            SideRow(
                kind,
                table,
                received.at,
                day_of(ts_of(payload.get("ts")), received.at),
                kid,
                verdict,
                why,
                raw_digest(received.payload),
                received.topic,
                text,
                code if isinstance(code, str) else None,
            )
        )

    def _pin(
        self,
        out: Outcome,
        received: Received,
        payload: dict[str, Any],
        table: str,
        announced: dict[str, Any],
    ) -> None:
        """Trust on first use: the key ``<base>/info`` announces, when the info is signed by it."""
        pem, kid = announced.get("public_key"), announced.get("kid")
        key = public_key_from_pem(pem) if isinstance(pem, str) else None
        if key is None or key_id(key) != kid or signature_problem(payload, key) is not None:
            self._alarm(
                out,
                "key_not_pinned",
                table,
                received.at,
                kid=kid,
                why="the info's key does not sign it, or is no Ed25519 key",
            )
            return
        self._pinned.setdefault(table, {})[kid] = key
        out.pins.append(Pin(table, kid, pem_of(key), received.at))
        self._event(out, "key_pinned", table, received.at, kid=kid)

    # -- recall ------------------------------------------------------------------------------

    def due_recalls(self, now: float) -> tuple[list[RecallRequest], Outcome]:
        """The recalls to send now (each open gap not being asked, once its time has come),
        and what came of the ones unanswered past their timeout."""
        out = Outcome()
        requests = []
        settings = self.settings
        for gap in self.open_gaps():
            if gap.state != "open":
                continue
            # The clock set back: what was due within a wait is due within a wait of now,
            # not once the clock has caught up (an hour back held every recall an hour).
            gap.next_ask = min(gap.next_ask, now + max(RECALL_DELAY_S, self._backoff(gap)))
            gap.asked_at = min(gap.asked_at, now)
            if gap.asking is not None:
                if now - gap.asked_at < settings.recall_timeout_s:
                    continue
                self._asking.pop(gap.asking, None)
                gap.asking = None
                self._failed(out, gap, now, "the table did not answer")
                if gap.state != "open":
                    continue
            if now < gap.next_ask:
                continue
            base = self.bases.get(gap.table)
            if base is None:
                continue
            # Unguessable: a reply is taken for the table's only when it names the recall,
            # and whoever may write the reply topic (or a reply to an earlier run's recall,
            # still in the session) must not answer, or give up, another gap.
            correlation = f"archive-{secrets.token_urlsafe(18)}"
            span = gap.after_game - (gap.before_game or gap.after_game) + 1
            last = max(1, min(settings.recall_games, span))
            gap.asking, gap.asked_at = correlation, now
            self._asking[correlation] = (gap.table, gap.epoch)
            requests.append(RecallRequest(gap.table, base, correlation, gap.after_game, last))
        return requests, out

    def _backoff(self, gap: Gap) -> float:
        """The wait before asking a gap again after ``gap.attempts`` recalls unanswered."""
        return min(3600.0, self.settings.recall_timeout_s * 2.0 ** min(gap.attempts, 30))

    def _failed(self, out: Outcome, gap: Gap, now: float, why: str) -> None:
        gap.attempts += 1
        gap.why = why
        gap.next_ask = now + self._backoff(gap)
        out.epochs.add((gap.table, gap.epoch))
        if gap.attempts >= self.settings.recall_attempts:
            self._give_up(out, gap, now, f"{why} ({gap.attempts} recalls)")

    def _give_up(self, out: Outcome, gap: Gap, now: float, why: str) -> None:
        gap.state, gap.why = "unfillable", why
        out.epochs.add((gap.table, gap.epoch))
        self._event(
            out,
            "gap_unfillable",
            gap.table,
            now,
            epoch=gap.epoch,
            first_seq=gap.first,
            last_seq=gap.last,
            why=why,
        )

    def recalled(self, correlation: str, payload: bytes) -> tuple[str, str, list[bytes]] | None:
        """A recall reply's game messages: ``(table, epoch, [payloads])`` for the gap asked,
        or None when the reply answers no recall of this archive's (or is not one)."""
        asked = self._asking.get(correlation)
        if asked is None:
            return None
        try:
            body = json.loads(payload)
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        messages: list[bytes] = []
        if isinstance(body, dict) and body.get("ok") is True:
            for game in body.get("games") or []:
                if not isinstance(game, dict):
                    continue
                said = game.get("messages", game.get("events"))
                for message in said if isinstance(said, list) else []:
                    if not isinstance(message, dict):
                        continue
                    try:
                        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
                        messages.append(text.encode())
                    except (UnicodeEncodeError, ValueError):
                        continue  # a lone surrogate ("\ud800"): no message of the table
        return asked[0], asked[1], messages

    def answered(
        self, correlation: str, payload: bytes, missing_before: int, now: float, forged: int = 0
    ) -> Outcome:
        """After a recall reply's messages were fed: a gap it left as it was is given up
        (the table answered, without them) or asked again (``forged``: messages of the gap
        in the answer did not verify); one it narrowed is asked again."""
        out = Outcome()
        asked = self._asking.pop(correlation, None)
        if asked is None:
            return out
        gaps = [g for g in self.gaps.get(asked, []) if g.asking == correlation]
        for gap in self.gaps.get(asked, []):
            if gap.asking == correlation:
                gap.asking = None
        if self.missing(*asked) < missing_before:
            for gap in gaps:
                gap.attempts, gap.next_ask = 0, now
            out.epochs.add(asked)
            return out
        try:
            body = json.loads(payload)
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        for gap in gaps:
            if forged:
                # Altered on the way, or a table gone wrong: no sign the table lacks them.
                self._failed(out, gap, now, "the table answered with messages that do not verify")
            elif isinstance(body, dict) and body.get("ok") is True:
                self._give_up(out, gap, now, "the table's journal no longer holds these messages")
            elif isinstance(error, str) and error.startswith("no game"):
                self._give_up(out, gap, now, f"the table: {error[:200]}")
            else:
                self._failed(out, gap, now, f"the table refused: {str(error)[:200]}")
        return out

    def missing(self, table: str, epoch: str) -> int:
        return sum(g.missing for g in self.gaps.get((table, epoch), []))

    def in_gap(self, table: str, epoch: str, seq: int) -> bool:
        return any(g.first <= seq <= g.last for g in self.gaps.get((table, epoch), []))
