"""``wheeld display``: drive a passive winning-number display over a serial port.

Such displays read the two-character line the wheels themselves send
(`` 7\\r\\n``, ``17\\r\\n``). Each new winning number from ``<base>/game`` (and
the retained latest result at start) is written once; the port is opened and
reopened like the daemon's wheel port.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any

from wheeld.consumer import follow
from wheeld.link import WheelLink

if TYPE_CHECKING:
    from wheeld.config import Config

#: A display never talks back: its silence is not a reason to reopen the port.
NEVER_S = 10.0**9


def display_line(number: str) -> bytes:
    """The line a passive display reads: two characters, right-justified, CR LF."""
    return number.rjust(2).encode("ascii") + b"\r\n"


class Display:
    """Remembers the last number and writes each new one to the port."""

    def __init__(self, link: WheelLink) -> None:
        self.link = link
        self.number: str | None = None
        self._game: Any = None

    def on_message(self, topic: str, payload: Any, base: str) -> None:
        if not isinstance(payload, dict):
            return
        is_result = topic == f"{base}/result" or (
            topic == f"{base}/game" and payload.get("event") == "result"
        )
        number = payload.get("number")
        if not is_result or not isinstance(number, str) or payload.get("game_id") == self._game:
            return
        self._game = payload.get("game_id")
        self.number = number
        self.link.write(display_line(number))

    def on_up(self) -> None:
        if self.number is not None:
            self.link.write(display_line(self.number))  # show it again after a reconnect


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
    base = config.base_topic
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def show(topic: str, payload: Any) -> None:
        display.on_message(topic, payload, base)

    following = follow(config, ("result", "game"), show, log)
    tasks = [asyncio.create_task(link.run()), asyncio.create_task(following)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    link.close()
    return 0
