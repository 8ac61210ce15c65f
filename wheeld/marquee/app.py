"""``wheeld marquee``: subscribe to the table, fold messages into the board, serve it."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any

from wheeld.consumer import follow
from wheeld.marquee.board import Board
from wheeld.marquee.server import Hub, MarqueeServer

if TYPE_CHECKING:
    from wheeld.config import Config

TOPICS = ("status", "game", "result", "history", "table")


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
        table={"id": table.id, "name": table.name or table.id, "limits": limits},
    )


async def run(config: Config, host: str, port: int, log: Any) -> int:
    board = board_for(config)
    hub = Hub()
    hub.publish(board.snapshot())
    server = MarqueeServer(hub, host, port)
    server.start()
    log.info("marquee serving", url=f"http://{host}:{server.port}/")
    print(f"marquee on http://{host}:{server.port}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def fold(topic: str, payload: Any) -> None:
        if board.apply(topic, payload):
            hub.publish(board.snapshot())

    follower = asyncio.create_task(follow(config, TOPICS, fold, log))
    await stop.wait()
    follower.cancel()
    await asyncio.gather(follower, return_exceptions=True)
    server.stop()
    return 0
