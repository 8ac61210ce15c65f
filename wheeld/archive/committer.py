"""The archive's only writer: takes what came in batches (up to ``batch_max``, waiting
``batch_wait_ms`` for more), has the ledger judge it (asking the database what it holds
when the ledger needs it, feeding a table's recall reply message by message), commits
each batch in one transaction, and only then acknowledges it. Messages kept under a key
unknown then are judged again once it is trusted."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from typing import TYPE_CHECKING, Any

from wheeld.archive import store
from wheeld.archive.records import CHAINED, Outcome, Received, RejectRow

if TYPE_CHECKING:
    from wheeld.archive.database import Database
    from wheeld.archive.intake import Intake, Item
    from wheeld.archive.ledger import Ledger
    from wheeld.config import ArchiveConfig


class Committer:
    """The batches judged and committed, and the figures of what was kept."""

    def __init__(
        self,
        config: ArchiveConfig,
        log: Any,
        ledger: Ledger,
        intake: Intake,
        database: Database,
    ) -> None:
        self.config = config
        self.log = log
        self.ledger = ledger
        self.intake = intake
        self.database = database
        # Figures a test or an operator reads (and the benchmark).
        self.committed = 0
        self.batches = 0
        self.duplicates = 0
        self.rejected = 0
        self.commit_seconds: list[float] = []

    async def commit_loop(self) -> None:
        """Take what came (up to ``batch_max``, waiting ``batch_wait_ms`` for more), judge
        it, commit it in one transaction, then acknowledge it."""
        wait_s = self.config.batch_wait_ms / 1000
        while True:
            items = [await self.intake.queue.get()]
            deadline = time.monotonic() + wait_s
            while len(items) < self.config.batch_max:
                try:
                    items.append(self.intake.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(self.intake.queue.get(), left))
                except TimeoutError:
                    break
            outcomes = [await self.judge(item) for item in items]
            batch = Outcome()
            for outcome in outcomes:
                batch.extend(outcome)
            try:
                await self.keep(batch)
            except store.Unstorable as exc:
                # Not the database's absence: something in the batch it will not take.
                # Each message alone, then; one it still refuses is kept as rejected.
                self.log.error("batch refused by the database", error=str(exc))
                for item, outcome in zip(items, outcomes, strict=True):
                    await self.keep_alone(item, outcome)
            self.intake.acknowledge(items)
            for item in items:
                if item.message is not None and item.received is not None:
                    self.intake.held_bytes -= len(item.received.payload)
            if batch.pins:
                await self.judge_again([(pin.table, pin.kid) for pin in batch.pins])

    async def keep(self, batch: Outcome) -> None:
        started = time.monotonic()
        await self.database.use(lambda conn: store.commit(conn, batch, self.ledger))
        self.commit_seconds.append(time.monotonic() - started)
        if len(self.commit_seconds) > 100_000:
            del self.commit_seconds[:50_000]
        self.batches += 1
        self.committed += len(batch.games) + len(batch.sides)
        self.duplicates += batch.duplicates
        self.rejected += len(batch.rejects)
        for reject in batch.rejects:
            self.log.warning(
                "message rejected",
                topic=reject.topic[:200],
                reason=reject.reason,
                rejected_total=self.rejected,
            )
        for alarm in batch.alarms:
            self.log.warning("archive alarm", **{k: v for k, v in alarm.payload().items()})
        if batch.alarms:
            self.intake.alarms_waiting.set()

    async def keep_alone(self, item: Item, outcome: Outcome) -> None:
        try:
            await self.keep(outcome)
        except store.Unstorable as exc:
            if item.received is None:
                return
            received = item.received
            reason = f"not storable: {exc}"[:300]
            self.log.error("message rejected", topic=received.topic[:200], reason=reason)
            await self.keep(
                Outcome(
                    rejects=[RejectRow.of(received, reason)],
                    epochs=outcome.epochs,
                )
            )

    async def judge(self, item: Item) -> Outcome:
        if item.outcome is not None:
            return item.outcome
        received = item.received
        assert received is not None
        if received.topic == self.intake.reply_topic:
            return await self.judge_reply(received)
        return await self.feed(received)

    async def feed(self, received: Received) -> Outcome:
        out = self.ledger.feed(received)
        if out.lookup is not None:
            asked = out.lookup
            stored = await self.database.use(lambda conn: store.lookup(conn, asked))
            out = self.ledger.feed(received, stored)
        return out

    async def judge_reply(self, received: Received) -> Outcome:
        """A table's answer to a recall: its messages that fill a gap, fed as they came."""
        try:
            body = json.loads(received.payload)
            correlation = body.get("correlation_id") if isinstance(body, dict) else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            correlation = None
        out = Outcome()
        if not isinstance(correlation, str):
            self.log.warning("recall reply without a correlation id of ours: ignored")
            return out
        recalled = self.ledger.recalled(correlation, received.payload)
        if recalled is None:
            self.log.info("recall reply to no recall pending: ignored", correlation=correlation)
            return out
        table, epoch, messages = recalled
        missing = self.ledger.missing(table, epoch)
        base = self.ledger.bases.get(table)
        fed = forged = 0
        for payload in messages:
            try:
                said = json.loads(payload)
            except ValueError:
                continue
            seq, their_epoch = said.get("seq"), said.get("epoch", "")
            if said.get("table") != table or type(seq) is not int:
                continue
            if not isinstance(their_epoch, str):
                continue
            if base is None or not self.ledger.in_gap(table, their_epoch, seq):
                continue
            fed += 1
            one = await self.feed(Received(f"{base}/game", payload, received.at, source="recall"))
            forged += sum(1 for g in one.games if g.verdict not in CHAINED) + len(one.rejects)
            out.extend(one)
        out.extend(
            self.ledger.answered(correlation, received.payload, missing, time.time(), forged)
        )
        self.log.info(
            "recall answered",
            table=table,
            epoch=epoch,
            offered=len(messages),
            fed=fed,
            not_verified=forged,
            still_missing=self.ledger.missing(table, epoch),
        )
        return out

    async def judge_again(self, keys: list[tuple[str, str]]) -> None:
        """Messages kept under a key unknown then, trusted now (pinned, or its file installed
        since): judged again, in chain order."""
        again = Outcome()
        for table, kid in keys:
            rows = await self.database.use(
                functools.partial(store.awaiting_key, table=table, kid=kid)
            )
            for row_id, topic, payload, received_at, source in self._chain_order(table, rows):
                again.extend(
                    await self.feed(
                        Received(topic, payload.encode(), received_at, source, stored_id=row_id)
                    )
                )
        if again.games or again.epochs:
            await self.keep(again)
        if again.games:
            self.log.info("judged again under keys trusted now", messages=len(again.games))

    def _chain_order(
        self, table: str, rows: list[tuple[int, str, str, float, str, str, int]]
    ) -> list[tuple[int, str, str, float, str]]:
        """Each epoch's rows from its end back (they came before the epoch's first held, a
        key pinned late), or on from its head when they all come after it (a key installed
        late): either way each one extends what is held, and opens no gap."""
        ordered: list[tuple[int, str, str, float, str]] = []
        for epoch, group in itertools.groupby(rows, key=lambda row: row[5]):
            listed = list(group)  # seq descending
            held = self.ledger.epochs.get((table, epoch))
            if held is not None and listed[-1][6] > held.head:
                listed.reverse()
            ordered += [row[:5] for row in listed]
        return ordered
