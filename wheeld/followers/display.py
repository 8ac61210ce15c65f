"""``wheeld display``: drive a passive winning-number display over a serial port.

Such displays read the two-character line the wheels themselves send
(`` 7\\r\\n``, ``17\\r\\n``). Each new winning number from ``<base>/game`` (and
the retained latest result at start) is written once; the port is opened and
reopened like the daemon's wheel port. While the feed is gone (no broker, or
the daemon's ``<base>/status`` says offline) the display is blanked, so players
never read a stale number as current; the number comes back with the feed.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any, Protocol

from wheeld.followers.consumer import (
    Follower,
    LatestResult,
    Message,
    ResultMessage,
    SeenGames,
    StatusMessage,
)
from wheeld.shell.link import WheelLink
from wheeld.shell.stop import stop_tasks

if TYPE_CHECKING:
    from wheeld.config import Config

#: A display never talks back: its silence is not a reason to reopen the port.
NEVER_S = 10.0**9
#: How many games' results are remembered, so one published again is not shown again.
SEEN_GAMES = 100


def display_line(number: str) -> bytes:
    """The line a passive display reads: two characters, right-justified, CR LF."""
    return number.rjust(2).encode("ascii") + b"\r\n"


#: What blanks a passive display: two spaces where the number goes.
BLANK_LINE = b"  \r\n"


class Port(Protocol):
    """Where the lines go: the serial link, or a test's recorder."""

    def write(self, data: bytes) -> None: ...


class Display:
    """Remembers the last number and writes each new one to the port."""

    def __init__(self, link: Port) -> None:
        self.link = link
        self.number: str | None = None
        self._seen = SeenGames(SEEN_GAMES)
        self._connected = False
        self._daemon_online = True

    @property
    def live(self) -> bool:
        """The feed is current: the broker is reached and the daemon not offline."""
        return self._connected and self._daemon_online

    def on_message(self, message: Message) -> None:
        match message:
            case StatusMessage(state=state):
                self._set(daemon_online=state == "online")
            case (
                ResultMessage(number=number, game_id=game_id, epoch=epoch)
                | LatestResult(number=number, game_id=game_id, epoch=epoch)
            ):
                if not self._seen.first_time(game_id, epoch):
                    return  # published again until acknowledged: not a new number
                self.number = number
                if self.live:
                    self.link.write(display_line(number))

    def on_feed(self, up: bool) -> None:
        # A new connection gets the retained status again: until then, the
        # daemon is presumed up (a table without one still shows its numbers).
        self._set(connected=up, daemon_online=True)

    def on_up(self) -> None:
        self._show()  # show it again after a reconnect of the port

    def _set(self, *, connected: bool | None = None, daemon_online: bool | None = None) -> None:
        was = self.live
        if connected is not None:
            self._connected = connected
        if daemon_online is not None:
            self._daemon_online = daemon_online
        if self.live != was:
            self._show()

    def _show(self) -> None:
        if not self.live:
            self.link.write(BLANK_LINE)
        elif self.number is not None:
            self.link.write(display_line(self.number))


async def run(config: Config, port: str, baudrate: int, log: Any) -> int:
    holder: dict[str, Display] = {}
    link = WheelLink(
        port,
        baudrate,
        on_data=lambda data, now: None,
        on_up=lambda: holder["display"].on_up() if "display" in holder else None,
        on_down=lambda why: None,
        silence_s=NEVER_S,
        log=log,
    )
    display = Display(link)
    holder["display"] = display
    await link.open()  # a missing port at start is the caller's one-line error
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    follower = Follower(
        config, ("status", "result", "game"), display.on_message, log, on_feed=display.on_feed
    )
    tasks = [asyncio.create_task(link.run()), asyncio.create_task(follower.run())]
    await stop.wait()
    await stop_tasks(*tasks)
    link.close()
    return 0
