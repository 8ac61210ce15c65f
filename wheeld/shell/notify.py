"""systemd's sd_notify protocol: one datagram per state change, no library needed.

When ``$NOTIFY_SOCKET`` is unset (not run by systemd) every call does nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping

#: Long start-up work (a large older journal brought up to date) asks systemd for
#: this much more time at once, and again every ``EXTEND_EVERY_S`` while it lasts.
EXTEND_BY_S = 60
EXTEND_EVERY_S = 10.0


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

    def send(self, *fields: str) -> None:
        """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=..."``) as one message."""
        if self._address is None:
            return
        if self._socket is None:
            # Non-blocking: a socket nobody drains (systemd stuck, a test's) must not
            # hold the loop that decides games; the message is then dropped.
            self._socket = socket.socket(
                socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
            )
        # systemd gone or its socket full: nothing useful to do but go on.
        with contextlib.suppress(OSError):
            self._socket.sendto("\n".join(fields).encode("utf-8"), self._address)

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
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
