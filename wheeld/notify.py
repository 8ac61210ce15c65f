"""systemd's sd_notify protocol: one datagram per state change, no library needed.

When ``$NOTIFY_SOCKET`` is unset (not run by systemd) every call does nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping


class Notifier:
    """Sends ``READY=1``, ``STATUS=...``, ``WATCHDOG=1`` and ``STOPPING=1``."""

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

    def send(self, *fields: str) -> None:
        """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=..."``) as one message."""
        if self._address is None:
            return
        if self._socket is None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        # systemd gone or its socket full: nothing useful to do but go on.
        with contextlib.suppress(OSError):
            self._socket.sendto("\n".join(fields).encode("utf-8"), self._address)

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
