"""``wheeld archive verify``'s judgement, pure: every stored chain checked again.

The messages of each ``(table, epoch)`` come in seq order; each is checked by
``wheeld.audit.verify.ChainCheck`` (signature under the table's keys, the link to
the one before, each game ending once). Where the check fails it starts again
at the failing message, so every problem is told, not only the first. A
failure the archive already knows of (a gap it lists, a message it flagged as
a chain break when it came) is counted as known; anything else (a message kept
as verified that no longer verifies: the database was altered) is a finding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.audit.verify import ChainCheck, Message


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the archive keeps it."""

    row_id: int
    seq: int
    verdict: str
    payload: str


@dataclass(slots=True)
class EpochAudit:
    """One epoch's chain, checked again message by message."""

    table: str
    epoch: str
    keys: Sequence[Ed25519PublicKey]
    #: The gaps the archive lists: (first seq, last seq).
    gaps: Sequence[tuple[int, int]] = ()
    checked: int = 0
    known: int = 0
    findings: list[str] = field(default_factory=list)
    _check: ChainCheck | None = None

    def feed(
        self,
        stored: StoredMessage,
        judged: dict[str, Any] | None = None,
        signed: str | None = None,
    ) -> None:
        """Check one message. ``judged`` and ``signed``: its members the chain is judged by
        and its signature's verdict (a digest, or ``!`` and why), when a worker read it."""
        self.checked += 1
        payload: Any = judged
        if signed is None:
            try:
                payload = json.loads(stored.payload)
            except (ValueError, RecursionError):  # nested too deep is no message either
                payload = None
        if not isinstance(payload, dict):
            self.findings.append(f"seq {stored.seq} (row {stored.row_id}): not a JSON object")
            return
        message = Message(f"row {stored.row_id}", payload)
        if self._check is None:
            self._check = ChainCheck(self.keys)
        failure = self._check.feed(message, (), signed)
        if failure is None:
            return
        self._check = ChainCheck(self.keys)
        again = self._check.feed(message, (), signed)
        if stored.verdict == "chain_break" or self._known_gap(failure.why, stored.seq):
            self.known += 1
        else:
            self.findings.append(f"{failure} (kept as {stored.verdict})")
        if again is not None:  # the message itself does not verify: begin after it
            self._check = None

    def _known_gap(self, why: str, seq: int) -> bool:
        return why.startswith("gap:") and any(last == seq - 1 for _, last in self.gaps)

    def lines(self) -> list[str]:
        name = self.epoch or "(none)"
        head = f"{self.table} epoch {name}: {self.checked} messages"
        if self.known:
            head += f", {self.known} known problem(s) (gaps listed, chain breaks flagged)"
        return [head + (": intact" if not self.findings else "")] + [
            f"{self.table} epoch {name}: {finding}" for finding in self.findings
        ]


def keys_for(
    table: str,
    files: Mapping[str, Sequence[Ed25519PublicKey]],
    pinned: Mapping[str, Sequence[Ed25519PublicKey]],
) -> list[Ed25519PublicKey]:
    return [*files.get(table, ()), *pinned.get(table, ())]
