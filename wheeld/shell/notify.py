"""systemd's sd_notify protocol: one datagram per state change, no library needed.

When ``$NOTIFY_SOCKET`` is unset (not run by systemd) every call does nothing.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

#: Long start-up work (a large older journal brought up to date) asks systemd for
#: this much more time at once, and again every ``EXTEND_EVERY_S`` while it lasts.
EXTEND_BY_S = 60
EXTEND_EVERY_S = 10.0
#: The longest a message to systemd may wait for room in its queue; READY=1 and
#: STOPPING=1, which systemd waits for, ``ONCE_TIMEOUT_S``.
SEND_TIMEOUT_S = 0.05
ONCE_TIMEOUT_S = 5.0


class Notifier:
    """Sends READY, STATUS, WATCHDOG, EXTEND_TIMEOUT_USEC and STOPPING to systemd."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # an abstract-namespace socket
        self._address = address or None
        self._socket: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watched = usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid()))
        #: How often systemd wants a WATCHDOG=1, in seconds; None when it does not.
        self.watchdog_interval = int(usec) / 1_000_000 if watched else None
        self._extended_at: float | None = None
        #: READY=1 was said but not sent (the queue full): it goes with the next message.
        self._unsaid_ready = False
        #: READY=1 has been said (systemd takes it once), and the last STATUS said.
        self.readied = False
        self.said_status: str | None = None

    def send(self, *fields: str) -> None:
        """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=..."``) as one message."""
        if self._address is None:
            return
        if self._socket is None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        if self._unsaid_ready and "READY=1" not in fields:
            fields = ("READY=1", *fields)  # said again until it went: systemd takes it once
        # A queue nobody drains (systemd stuck, a test's socket) holds a send this long at
        # most, not the loop that decides games for ever; systemd's own queue, shared by
        # every service, can be full for a moment at boot. READY and STOPPING, said once
        # and waited for by systemd, wait longer for room.
        once = "READY=1" in fields or "STOPPING=1" in fields
        self._socket.settimeout(ONCE_TIMEOUT_S if once else SEND_TIMEOUT_S)
        try:
            self._socket.sendto("\n".join(fields).encode("utf-8"), self._address)
        except OSError:  # systemd gone or its queue full: nothing more to do now
            self._unsaid_ready = self._unsaid_ready or "READY=1" in fields
            return
        self._unsaid_ready = False

    def starting(self, status: str) -> None:
        """Long start-up work is going on: more time (``EXTEND_TIMEOUT_USEC``), the watchdog fed.

        Cheap to call often: said at most every ``EXTEND_EVERY_S``.
        """
        now = time.monotonic()
        if self._extended_at is not None and now - self._extended_at < EXTEND_EVERY_S:
            return
        self._extended_at = now
        self.send(
            f"EXTEND_TIMEOUT_USEC={EXTEND_BY_S * 1_000_000}", "WATCHDOG=1", f"STATUS={status}"
        )

    def ready(self, status: str) -> None:
        self.readied, self.said_status = True, status
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.said_status = status
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
