"""How many commands a sender may send, how many alarms of a kind are said. Pure.

An operator sends a command a minute; a misconfigured script or an attacker
sends thousands a second. Past the rate, a command is refused before it is
parsed, answered or journaled on its own (a count is journaled instead), so
a flood costs nothing later, and one sender's flood of ``ack`` takes nothing
from another's ``close`` — nor from its own: each command has its own bucket.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

#: Commands a sender may send of one kind, sustained, and in a burst.
RATE_PER_S = 5.0
BURST = 20
#: Senders remembered (the least recent forgotten first): memory stays bounded.
SENDERS = 1024


class Refusals:
    """Commands refused, by (sender, command), since last asked; at most ``senders`` kept."""

    def __init__(self, senders: int = SENDERS) -> None:
        self._limit = senders
        self._refused: Counter[tuple[str, str]] = Counter()

    def count(self, sender: str | None, command: str) -> None:
        key = (sender or "", command)
        if len(self._refused) < self._limit or key in self._refused:
            self._refused[key] += 1

    def take_refused(self) -> dict[tuple[str, str], int]:
        """What was refused since the last call, by (sender, command); then forgotten."""
        refused = dict(self._refused)
        self._refused.clear()
        return refused


class CommandRate(Refusals):
    """Token buckets by (sender, command), and what was refused since last asked."""

    def __init__(
        self, rate_per_s: float = RATE_PER_S, burst: int = BURST, senders: int = SENDERS
    ) -> None:
        super().__init__(senders)
        self._rate = rate_per_s
        self._burst = float(burst)
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def allow(self, sender: str | None, command: str, now: float) -> bool:
        """Whether this command may go on; a refusal is counted."""
        key = (sender or "", command)
        tokens, then = self._buckets.pop(key, (self._burst, now))
        tokens = min(self._burst, tokens + max(0.0, now - then) * self._rate)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self._limit:
            self._buckets.popitem(last=False)
        if not allowed:
            self.count(sender, command)
        return allowed


#: One-off alarms of one code said in a minute, at most (a burst of ten, then one every six
#: seconds): frame-like garbage can raise thousands, each journaled, signed and published.
ALARMS_PER_S = 1 / 6
ALARM_BURST = 10


class AlarmRate:
    """Alarms of one code past their rate are counted, not said; the next one said says
    how many were held back (``repeated``)."""

    def __init__(self, rate_per_s: float = ALARMS_PER_S, burst: int = ALARM_BURST) -> None:
        self._buckets = CommandRate(rate_per_s, burst)
        self._held: Counter[str] = Counter()

    def allow(self, code: str, now: float) -> tuple[bool, int]:
        """Whether an alarm ``code`` at ``now`` is said, and how many were held back before it."""
        if self._buckets.allow("", code, now):
            return True, self._held.pop(code, 0)
        self._held[code] += 1
        return False, 0
