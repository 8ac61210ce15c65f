"""The archive's one database connection: reached and held (the archive's lock), its
schema brought up to date and the ledger's state read at the start; and every piece of
work on it taken in turn, held and retried while the database is away (the alarm
``database_unavailable`` said when it goes and when it is back)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from wheeld.archive import store
from wheeld.archive.records import ArchiveAlarm

if TYPE_CHECKING:
    import psycopg

    from wheeld.archive.ledger import Ledger
    from wheeld.config import ArchiveConfig

T = TypeVar("T")

#: Waits between attempts to reach the database again.
DB_RETRY_FIRST_S = 1.0
DB_RETRY_MAX_S = 30.0


class Database:
    """The connection, whether the database is away (since when), and the turns on it."""

    def __init__(
        self,
        config: ArchiveConfig,
        log: Any,
        publish_now: Callable[[ArchiveAlarm], Awaitable[None]],
    ) -> None:
        self.config = config
        self.log = log
        self.publish_now = publish_now
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.down_since: float | None = None
        #: One connection, one transaction at a time: the tasks take turns.
        self.lock = asyncio.Lock()

    async def open(self, ledger: Ledger) -> None:
        """Reach the database, bring its schema up to date and read the ledger's state;
        ``StoreError`` in one line when the database cannot be used."""
        self.conn = await store.connect(self.config)
        try:
            await store.hold(self.conn)
        except store.Displaced as exc:
            await self.conn.close()
            raise store.StoreError(str(exc)) from None
        except store.UNAVAILABLE as exc:
            raise store.StoreError(store.one_line(exc)) from None
        try:
            applied = await store.migrate(self.conn)
            await store.load(self.conn, ledger)
        except store.UNAVAILABLE as exc:
            raise store.StoreError(store.one_line(exc)) from None
        except Exception as exc:  # a database that is not ours, a role without rights
            raise store.StoreError(
                f"cannot prepare the archive's schema: {store.one_line(exc)}"
            ) from None
        if applied:
            self.log.info("schema migrated", versions=applied)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def use(self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``work`` on the database, held and retried until the database is there again."""
        delay = DB_RETRY_FIRST_S
        while True:
            try:
                async with self.lock:
                    if self.conn is None or self.conn.closed:
                        self.conn = await store.connect(self.config)
                        await store.hold(self.conn)
                    result = await work(self.conn)
            except (*store.UNAVAILABLE, store.StoreError) as exc:
                if self.down_since is None:
                    self.down_since = time.time()
                    self.log.error(
                        "database unavailable: holding messages unacknowledged",
                        error=store.one_line(exc),
                    )
                    await self.publish_now(
                        ArchiveAlarm(
                            "database_unavailable",
                            None,
                            self.down_since,
                            (("state", "set"), ("error", store.one_line(exc)[:300])),
                        )
                    )
                if self.conn is not None:
                    with contextlib.suppress(Exception):
                        await self.conn.close()
                self.conn = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, DB_RETRY_MAX_S)
                continue
            if self.down_since is not None:
                since, self.down_since = self.down_since, None
                self.log.info("database back", down_s=round(time.time() - since, 1))
                await self.publish_now(
                    ArchiveAlarm(
                        "database_unavailable",
                        None,
                        time.time(),
                        (("state", "clear"), ("duration_s", round(time.time() - since, 3))),
                    )
                )
            return result
