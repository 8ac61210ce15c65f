"""``wheeld marquee``: subscribe to the table, fold messages into the board, serve it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wheeld.followers.consumer import Follower, Message
from wheeld.followers.marquee.board import Board
from wheeld.followers.marquee.server import Hub, MarqueeServer
from wheeld.shell.stop import stop_tasks

if TYPE_CHECKING:
    from wheeld.config import Config
    from wheeld.contract.registry import TopicName

TOPICS: tuple[TopicName, ...] = ("status", "game", "result", "history", "table")


def board_for(config: Config) -> Board:
    table = config.table
    marquee = config.marquee
    limits = None
    if table.min_bet is not None and table.max_bet is not None:
        limits = f"{table.min_bet:g} - {table.max_bet:g} {table.currency}".strip()
    return Board(
        base=config.base_topic,
        language=marquee.language,
        shown=marquee.history_shown,
        stats_games=marquee.stats_games,
        stats_min_games=marquee.stats_min_games,
        # The name is what patrons read; the id, for staff, stays small in a corner.
        table={"id": table.id, "name": table.name or table.id, "limits": limits},
        min_ball_revolutions=config.rules.min_ball_revolutions,
        connected=False,  # "offline" until the broker is reached
    )


class Marquee:
    """The board, its web server and its MQTT follower, for one table."""

    def __init__(self, config: Config, host: str, port: int, log: Any) -> None:
        self.board = board_for(config)
        self.hub = Hub()
        self.hub.publish(self.board.snapshot())
        self.server = MarqueeServer(self.hub, host, port, log=log)
        self.follower = Follower(config, TOPICS, self._fold, log, on_feed=self._feed)
        self._log = log

    def _fold(self, message: Message) -> None:
        if self.board.apply(message):
            self.hub.publish(self.board.snapshot())

    def _feed(self, up: bool) -> None:
        if self.board.feed(up):
            self.hub.publish(self.board.snapshot())

    async def serve(
        self, stop: asyncio.Event, serving: Callable[[str], None] = lambda url: None
    ) -> None:
        """Serve until ``stop`` is set; ``serving`` is told the URL once it listens."""
        await self.server.start()
        serving(self.server.url)
        follower = asyncio.create_task(self.follower.run())
        try:
            await stop.wait()
        finally:
            await stop_tasks(follower)  # cancelled again until it ends
            await self.server.stop()


async def run(config: Config, host: str, port: int, log: Any) -> int:
    marquee = Marquee(config, host, port, log)

    def serving(url: str) -> None:
        log.info("marquee serving", url=url)
        print(f"marquee on {url}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await marquee.serve(stop, serving)
    return 0
