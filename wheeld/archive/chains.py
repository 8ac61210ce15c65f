"""Each ``(table, epoch)`` as the archive holds it: the chain from ``first`` to ``head``,
its gaps (with the digests at their two ends), and where a verified message stands in
it (a new link, a redelivery, a gap found or filled, a chain break, a handover to a
new epoch). Pure: the time is the message's."""

from __future__ import annotations

from wheeld.archive.alarms import Alarms
from wheeld.archive.records import (
    CHAIN_BREAK,
    RECALL_DELAY_S,
    VERIFIED,
    Epoch,
    Gap,
    Lookup,
    Outcome,
)


class Chains:
    """Every table's epochs and gaps, and the link each verified message makes."""

    def __init__(self, alarms: Alarms, recall_delay_s: float = RECALL_DELAY_S) -> None:
        self.alarms = alarms
        self.recall_delay_s = recall_delay_s
        self.epochs: dict[tuple[str, str], Epoch] = {}
        self.gaps: dict[tuple[str, str], list[Gap]] = {}
        #: The epoch of each table most recently begun or moved on.
        self._latest: dict[str, str] = {}

    def restore_epoch(self, epoch: Epoch) -> None:
        self.epochs[(epoch.table, epoch.epoch)] = epoch
        self._latest.setdefault(epoch.table, epoch.epoch)

    def restore_latest(self, table: str, epoch: str) -> None:
        self._latest[table] = epoch

    def restore_gap(self, gap: Gap) -> None:
        self.gaps.setdefault((gap.table, gap.epoch), []).append(gap)
        self.gaps[(gap.table, gap.epoch)].sort(key=lambda g: g.first)

    def open_gaps(self) -> list[Gap]:
        return [gap for gaps in self.gaps.values() for gap in gaps]

    def link(
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
        gap.next_ask = gap.found + self.recall_delay_s
        gaps = self.gaps.setdefault((gap.table, gap.epoch), [])
        gaps.append(gap)
        gaps.sort(key=lambda g: g.first)
        out.epochs.add((gap.table, gap.epoch))
        self.alarms.event(
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
            self.alarms.event(out, "gap_filled", gap.table, at, epoch=gap.epoch, seq=seq)
        out.epochs.add(key)
        return (VERIFIED, None) if why is None else (CHAIN_BREAK, why)

    def missing(self, table: str, epoch: str) -> int:
        return sum(g.missing for g in self.gaps.get((table, epoch), []))

    def in_gap(self, table: str, epoch: str, seq: int) -> bool:
        return any(g.first <= seq <= g.last for g in self.gaps.get((table, epoch), []))
