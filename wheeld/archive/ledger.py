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

from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.archive.alarms import Alarms
from wheeld.archive.chains import Chains
from wheeld.archive.recalls import Recalls
from wheeld.archive.records import (
    CHAIN_BREAK,
    CHAINED,
    MAX_INT,
    UNKNOWN_KEY,
    VERIFIED,
    Epoch,
    GameRow,
    Gap,
    Outcome,
    RecallRequest,
    Received,
    Rejected,
    RejectRow,
    Settings,
    SideRow,
    base_of,
    day_of,
    raw_digest,
    read,
    signature_verdict,
    table_of,
    ts_of,
    whole_digest,
)
from wheeld.archive.trust import Trust
from wheeld.audit.verify import check_signature


class Ledger:
    """Every table's chains, gaps and keys as the archive holds them; judges each message."""

    def __init__(
        self, settings: Settings, trusted: Mapping[str, Iterable[Ed25519PublicKey]] | None = None
    ) -> None:
        self.settings = settings
        self.alarms = Alarms()
        self.trust = Trust(settings, self.alarms, trusted)
        self.chains = Chains(self.alarms, settings.recall_delay_s)
        #: Where each table's messages come (its base topic), and its recalls go.
        self.bases: dict[str, str] = {}
        self.recalls = Recalls(settings, self.chains, self.bases, self.alarms)
        self.epochs = self.chains.epochs
        self.gaps = self.chains.gaps

    # -- state from the database ---------------------------------------------------------

    def restore_epoch(self, epoch: Epoch) -> None:
        self.chains.restore_epoch(epoch)

    def restore_latest(self, table: str, epoch: str) -> None:
        self.chains.restore_latest(table, epoch)

    def restore_gap(self, gap: Gap) -> None:
        self.chains.restore_gap(gap)

    def restore_pin(self, table: str, kid: str, pem: str) -> None:
        self.trust.restore_pin(table, kid, pem)

    def keys(self, table: str) -> dict[str, Ed25519PublicKey]:
        """Every key trusted for ``table``: the operator's files and those pinned."""
        return self.trust.keys(table)

    def trusted(self) -> list[tuple[str, str]]:
        """``(table, kid)`` of every key trusted: the operator's files and those pinned."""
        return self.trust.trusted()

    def open_gaps(self) -> list[Gap]:
        return self.chains.open_gaps()

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
            self.trust.signed_side(out, received, text, payload, table, kind)
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
        self.alarms.alarm(
            out, "message_rejected", None, received.at, topic=received.topic[:200], reason=reason
        )
        return out

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
            self.alarms.alarm(
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
        linked = self.chains.link(
            out, table, epoch, seq, game_id, digest, prev, received.at, stored
        )
        if linked is None:
            return  # a lookup is needed, or a redelivery
        verdict, why = linked
        out.games.append(row(verdict, why))
        if verdict == CHAIN_BREAK:
            self.alarms.alarm(
                out, CHAIN_BREAK, table, received.at, epoch=epoch, seq=seq, game_id=game_id, why=why
            )

    # -- recall ------------------------------------------------------------------------------

    def due_recalls(self, now: float) -> tuple[list[RecallRequest], Outcome]:
        """The recalls to send now, and what came of the ones unanswered past their timeout."""
        return self.recalls.due_recalls(now)

    def recalled(self, correlation: str, payload: bytes) -> tuple[str, str, list[bytes]] | None:
        """A recall reply's game messages for the gap asked (``Recalls.recalled``)."""
        return self.recalls.recalled(correlation, payload)

    def answered(
        self, correlation: str, payload: bytes, missing_before: int, now: float, forged: int = 0
    ) -> Outcome:
        """What comes of the gaps a recall reply asked for (``Recalls.answered``)."""
        return self.recalls.answered(correlation, payload, missing_before, now, forged)

    def missing(self, table: str, epoch: str) -> int:
        return self.chains.missing(table, epoch)

    def in_gap(self, table: str, epoch: str, seq: int) -> bool:
        return self.chains.in_gap(table, epoch, seq)
