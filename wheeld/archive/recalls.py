"""Asking the tables for what is missing: which gaps to ``recall`` now (a while after
each is found, backing off while unanswered), the messages a reply offers, and what
comes of a gap the reply left as it was (asked again, or given up). Pure: the time
is the caller's, the correlation ids random."""

from __future__ import annotations

import json
import re
import secrets

from wheeld.archive.alarms import Alarms
from wheeld.archive.chains import Chains
from wheeld.archive.records import Gap, Outcome, RecallRequest, Settings

#: A refusal that says the journal holds no such game, or holds it only as another
#: controller's game superseded it: asked again it would say the same. The daemon's words
#: begin with its journal's path (found by review: matched at the start, never matched,
#: and such a gap was asked five times before it was given up).
_GONE = re.compile(r"(?:^|: )(?:no game \d+ in the journal|game \d+ was superseded)")


class Recalls:
    """The recalls asked and not yet answered, by correlation id: the gaps they ask for."""

    def __init__(
        self, settings: Settings, chains: Chains, bases: dict[str, str], alarms: Alarms
    ) -> None:
        self.settings = settings
        self.chains = chains
        #: Where each table's recall commands go (the ledger's, shared).
        self.bases = bases
        self.alarms = alarms
        self._asking: dict[str, tuple[str, str]] = {}

    def due_recalls(self, now: float) -> tuple[list[RecallRequest], Outcome]:
        """The recalls to send now (each open gap not being asked, once its time has come),
        and what came of the ones unanswered past their timeout."""
        out = Outcome()
        requests = []
        settings = self.settings
        for gap in self.chains.open_gaps():
            if gap.state != "open":
                continue
            # The clock set back: what was due within a wait is due within a wait of now,
            # not once the clock has caught up (an hour back held every recall an hour).
            gap.next_ask = min(gap.next_ask, now + max(settings.recall_delay_s, self._backoff(gap)))
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
        self.alarms.event(
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
        gaps = [g for g in self.chains.gaps.get(asked, []) if g.asking == correlation]
        for gap in self.chains.gaps.get(asked, []):
            if gap.asking == correlation:
                gap.asking = None
        if self.chains.missing(*asked) < missing_before:
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
            elif isinstance(error, str) and _GONE.search(error):
                self._give_up(out, gap, now, f"the table: {error[:200]}")
            else:
                self._failed(out, gap, now, f"the table refused: {str(error)[:200]}")
        return out
