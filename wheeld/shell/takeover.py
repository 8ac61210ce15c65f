"""Another client with our client id taking the MQTT session: noticed, said once, backed off.

Two daemons started at once with one client id would knock each other off
every second. MQTT 5 has a reason code for it (0x8E), but not every broker
sends it (mosquitto 2.0 just closes the connection, as on 3.1.1), so
connections lost again and again soon after being made count as well.
Reconnecting then backs off, up to a minute apart, until it stops.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wheeld.config import Config
    from wheeld.shell.presence import Presence

#: MQTT 5 DISCONNECT reason code "Session taken over".
SESSION_TAKEN_OVER = 0x8E
#: When the broker does not say why: this many connections in a row, each lost
#: within SHORT_SESSION_S of being made, are taken for a session taken over.
SHORT_SESSION_S = 5.0
SHORT_SESSIONS_IN_A_ROW = 3
TAKEOVER_BACKOFF_FIRST_S = 5.0
TAKEOVER_BACKOFF_MAX_S = 60.0
#: A connection that holds this long means the other client has gone.
TAKEOVER_CLEARED_S = 2 * TAKEOVER_BACKOFF_MAX_S


def causes(error: BaseException) -> Iterator[BaseException]:
    """Every exception in a group, and what each was raised from."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from causes(inner)
        return
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


class SessionTakeover:
    """Whether our session is being taken, judged at each lost connection."""

    def __init__(self, config: Config, presence: Presence, log: Any) -> None:
        self._config = config
        self._presence = presence
        self._log = log
        #: When the current connection was made (monotonic), None while there is none.
        self.connected_at: float | None = None
        self._short_sessions = 0
        #: When this episode was first noticed (epoch s), None outside one.
        self.since: float | None = None
        #: How long to wait before reconnecting, while in an episode.
        self.backoff_s = TAKEOVER_BACKOFF_FIRST_S

    @property
    def taken(self) -> bool:
        """Another client with our client id has been taking our session lately."""
        return self.since is not None or self._presence.rival is not None

    def backed_off(self) -> float:
        """How long to wait now before reconnecting (each wait longer than the last)."""
        wait = self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, TAKEOVER_BACKOFF_MAX_S)
        return wait

    def judge(self, error: BaseException, monotonic: float, wall: float) -> bool:
        """Whether another client with our id took the session; says so once per episode."""
        if self.connected_at is None:
            return False  # never connected: the broker is away, not taken
        held_s = monotonic - self.connected_at
        if held_s >= TAKEOVER_CLEARED_S:
            # A connection that held this long: whoever took the session has gone.
            self.since = None
            self._presence.rival = None
            self.backoff_s = TAKEOVER_BACKOFF_FIRST_S
        self._short_sessions = self._short_sessions + 1 if held_s < SHORT_SESSION_S else 0
        said_so = self._presence.rival is not None or any(
            getattr(cause, "rc", None) == SESSION_TAKEN_OVER for cause in causes(error)
        )
        guessed = self._short_sessions >= SHORT_SESSIONS_IN_A_ROW
        if self.since is not None:
            return True  # still in the episode: keep backing off
        if not (said_so or guessed):
            return False
        self.since = wall
        self._log.error(
            "another client with the same client id took the MQTT session: "
            f"probably a second wheeld for table {self._config.table.id}; "
            f"reconnecting ever more slowly (up to {TAKEOVER_BACKOFF_MAX_S:g} s apart) "
            "until it goes",
            client_id=self._config.client_id,
            evidence="DISCONNECT 0x8E Session taken over"
            if said_so
            else f"{self._short_sessions} connections in a row lost within "
            f"{SHORT_SESSION_S:g} s of being made",
        )
        return True
