"""A broker outage in the log: said at once, then less and less often, never silent."""

from __future__ import annotations

from typing import Any

from wheeld.core.messages import iso_utc
from wheeld.shell.clock import HostClock

#: While the broker stays away, the line that says so comes again after 5 s, 10 s,
#: 20 s ... and never more than a minute apart: never silent, never a line a try.
OUTAGE_SAY_FIRST_S = 5.0
OUTAGE_SAY_MAX_S = 60.0


class Outage:
    """When a broker outage is said again in the log, and what the line says.

    At once when it begins or its reason (or broker) changes; otherwise after a
    pause that doubles from OUTAGE_SAY_FIRST_S up to OUTAGE_SAY_MAX_S, so a long
    outage is a line a minute at least. Each line names the next try and how
    long the broker has been away.
    """

    def __init__(self, clock: HostClock | None = None) -> None:
        self._clock = clock or HostClock()
        self._reset()

    def _reset(self) -> None:
        #: When the first failure of this outage was (monotonic), None while connected.
        self.since: float | None = None
        self.attempts = 0
        self._said: tuple[str, str] | None = None
        self._next_at = 0.0
        self._pause_s = OUTAGE_SAY_FIRST_S

    def failed(self, server: str, error: str, now: float) -> bool:
        """A try (or a connection) failed at ``now`` (monotonic): whether to say so now."""
        if self.since is None:
            self.since = now
        self.attempts += 1
        return (server, error) != self._said or now >= self._next_at

    def said(self, server: str, error: str, now: float, retry_in_s: float) -> dict[str, Any]:
        """It is being said at ``now``: the line's figures."""
        since = self.since if self.since is not None else now
        self._said = (server, error)
        self._next_at = now + self._pause_s
        self._pause_s = min(self._pause_s * 2, OUTAGE_SAY_MAX_S)
        return {
            "retry_in_s": round(retry_in_s, 1),
            "retry_at": iso_utc(self._clock.wall() + retry_in_s),
            "down_s": round(now - since, 1),
            "attempts": self.attempts,
        }

    def ended(self) -> dict[str, Any]:
        """A connection was made: the outage's figures for that line, if there was one."""
        figures: dict[str, Any] = {}
        if self.since is not None:
            figures = {
                "down_s": round(self._clock.monotonic() - self.since, 1),
                "attempts": self.attempts,
            }
        self._reset()
        return figures

    def say(
        self,
        log: Any,
        said: dict[str, str],
        *,
        held_s: float | None,
        delay: float,
        reached: bool,
    ) -> None:
        """A try or a connection failed: say so, when it is time to.

        ``said`` names the ``server``, the ``error`` in words, its ``detail`` and
        the ``next`` server to try; ``held_s`` is how long a lost connection held
        (None when none was made), ``delay`` the wait before the next try.
        """
        server, error = said["server"], said["error"]
        now = self._clock.monotonic()
        if not self.failed(server, error, now):
            return
        fields = self.said(server, error, now, delay)
        if held_s is not None:
            # A connection that held: its end is news, said at once with its reason.
            log.warning(
                "broker connection lost, reconnecting",
                **said,
                held_s=round(held_s, 1),
                **fields,
            )
        elif reached:
            log.warning("broker unavailable, retrying", **said, **fields)
        else:
            # Loud: nothing decided has reached anyone, and it may be a wrong host.
            log.error(
                "broker unavailable, retrying: no broker reached since start, "
                "nothing published yet",
                **said,
                **fields,
            )
        if said["next"] != server:
            log.info("moving to another broker", server=server, to=said["next"])
