"""``wheeld archive``: the thin shell that moves messages from the brokers into PostgreSQL.

What it promises about delivery, and how:

- **Nothing is acknowledged that is not committed.** The MQTT client is made
  with paho's manual acknowledgements (``make_client(manual_ack=True)``): a QoS 1
  message's PUBACK is sent by ``Client.acknowledge`` only once the transaction
  that keeps it has committed. Until then the broker holds the message in the
  archive's persistent session (clean start off, a stable client id) and sends
  it again after any reconnect. A crash, a lost connection or a database that
  went away mid-batch loses nothing: what was not acknowledged comes again, and
  is kept once (every insert is idempotent).
- **Acknowledgements go out in the order the messages came**, after the commit
  of their batch, and only on the connection that delivered them (a message of
  a connection since lost is delivered again on the next).
- **A database that goes away is waited for**: the batch is held, the
  connection made again (1 s, 2 s, ... up to 30 s apart) and the same batch
  committed; meanwhile nothing is acknowledged. What the broker has sent waits
  in memory: ``archive.receive_maximum`` asks it to hold the rest back, which
  mosquitto 2.0 does for messages it had queued but not for live ones.

One task reads the broker, one commits (the only writer), one asks the tables
for what is missing (``recall``), one publishes the archive's alarms from the
database (kept in the commit that raised them, so none is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import aiomqtt

from wheeld.archive import store
from wheeld.archive.ledger import Ledger
from wheeld.archive.records import (
    CHAINED,
    MAX_MESSAGE_BYTES,
    ArchiveAlarm,
    Outcome,
    RecallRequest,
    Received,
    RejectRow,
    Settings,
)
from wheeld.config import ARCHIVE_KINDS
from wheeld.core.signing import load_public_key
from wheeld.shell.mqtt_client import Failover, make_client
from wheeld.shell.stop import stop_tasks

if TYPE_CHECKING:
    import psycopg

    from wheeld.config import ArchiveSettings
    from wheeld.shell.mqtt_client import Client

T = TypeVar("T")

#: A recall reply carries whole games with their frames: far larger than a message.
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: Waits between attempts to reach the database again.
DB_RETRY_FIRST_S = 1.0
DB_RETRY_MAX_S = 30.0
#: How often gaps are looked at for a recall to send.
RECALL_TICK_S = 1.0


@dataclass(frozen=True, slots=True)
class Delivery:
    """How to acknowledge a message: not the message, whose payload may be 16 MiB."""

    mid: int
    qos: int


@dataclass(slots=True)
class Item:
    """One message off the broker (with how to acknowledge it), or an outcome to commit."""

    received: Received | None = None
    message: Delivery | None = None
    generation: int = 0
    outcome: Outcome | None = None


class Archive:
    """The service: brokers in, PostgreSQL out."""

    def __init__(self, settings: ArchiveSettings, log: Any) -> None:
        self.settings = settings
        self.config = settings.archive
        self.log = log
        trusted = {
            table: [load_public_key(path) for path in files]
            for table, files in self.config.trusted_keys.items()
        }
        self.ledger = Ledger(
            Settings(
                tuple(self.config.tables),
                self.config.trust_on_first_use,
                self.config.recall_games,
                self.config.recall_timeout_s,
                self.config.recall_attempts,
            ),
            trusted,
        )
        self.reply_topic = f"{settings.mqtt.reply_prefix}{self.config.client_id}/recall"
        self.intake: asyncio.Queue[Item] = asyncio.Queue()
        self.client: Client | None = None
        self.generation = 0
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.db_down_since: float | None = None
        self.alarms_waiting = asyncio.Event()
        #: One connection, one transaction at a time: the tasks take turns.
        self.db_lock = asyncio.Lock()
        # Figures a test or an operator reads (and the benchmark).
        self.committed = 0
        self.batches = 0
        self.duplicates = 0
        self.rejected = 0
        self.commit_seconds: list[float] = []
        #: The most messages ever waiting for the committer.
        self.held_peak = 0
        #: Bytes of payload held until their commit, and the most ever.
        self.held_bytes = 0
        self.held_bytes_peak = 0

    # -- start -------------------------------------------------------------------------------

    async def open(self) -> None:
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
            await store.load(self.conn, self.ledger)
        except store.UNAVAILABLE as exc:
            raise store.StoreError(store.one_line(exc)) from None
        except Exception as exc:  # a database that is not ours, a role without rights
            raise store.StoreError(
                f"cannot prepare the archive's schema: {store.one_line(exc)}"
            ) from None
        if applied:
            self.log.info("schema migrated", versions=applied)
        self.log.info(
            "archive open",
            epochs=len(self.ledger.epochs),
            gaps=len(self.ledger.open_gaps()),
            tables=len(self.ledger.bases),
        )

    async def run(self) -> int:
        """Run until SIGTERM or SIGINT; the exit status."""
        await self.open()
        # A key installed since the last run, or pinned by a run that stopped before it
        # judged again what came under it: what came under it is judged again now.
        await self.judge_again(self.ledger.trusted())
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        from wheeld.shell.notify import Notifier

        notifier = Notifier()
        tasks = [
            asyncio.create_task(self.follow(), name="follow"),
            asyncio.create_task(self.commit_loop(), name="commit"),
            asyncio.create_task(self.recall_loop(), name="recall"),
            asyncio.create_task(self.alarm_loop(), name="alarms"),
        ]
        notifier.ready(f"archiving {', '.join(self.config.tables)}")
        waiting = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = None if task is waiting else task.exception()
                if isinstance(error, store.Displaced):
                    # Another archive took the database while it was away: stop, in one line.
                    raise store.StoreError(str(error))
                if error is not None:
                    # A defect: say it in one line and stop; what was not committed was
                    # not acknowledged, and comes again at the next start.
                    self.log.error("archive task failed", task=task.get_name(), error=repr(error))
                    return 1
        finally:
            notifier.stopping()
            self.log.info("archive stopped", **self.figures())
            waiting.cancel()
            await stop_tasks(*tasks)
            if self.conn is not None:
                await self.conn.close()
            notifier.close()
        return 0

    def figures(self) -> dict[str, Any]:
        """What it did: messages kept, batches, redeliveries, rejects, commit times (ms)."""
        times = sorted(self.commit_seconds)

        def at(share: float) -> float | None:
            return (
                round(times[min(len(times) - 1, int(share * len(times)))] * 1000, 2)
                if times
                else None
            )

        return {
            "committed": self.committed,
            "batches": self.batches,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "held_peak": self.held_peak,
            "held_bytes_peak": self.held_bytes_peak,
            "commit_ms_p50": at(0.5),
            "commit_ms_p99": at(0.99),
            "commit_ms_max": round(times[-1] * 1000, 2) if times else None,
        }

    # -- the broker ----------------------------------------------------------------------------

    def subscriptions(self) -> list[tuple[str, int]]:
        topics = [f"{pattern}/{kind}" for pattern in self.config.tables for kind in ARCHIVE_KINDS]
        return [(topic, 1) for topic in [*topics, self.reply_topic]]

    def subscribe_to(self) -> list[Any]:
        """The subscriptions, and on MQTT 5 with retained messages sent only when the
        subscription is new: the session's stand across reconnections and restarts, and a
        retained payload (a forged info, garbage) is read once, not again at every start
        and every reconnection (one more reject, one more alarm each time). A retained
        message published while the archive is away is queued in its session as any."""
        if self.settings.mqtt.protocol != "5":
            return self.subscriptions()
        from paho.mqtt.subscribeoptions import SubscribeOptions

        return [
            (
                topic,
                SubscribeOptions(qos=qos, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB),
            )
            for topic, qos in self.subscriptions()
        ]

    async def follow(self) -> None:
        """Connect, subscribe and hand every message to the committer; through outages,
        along ``mqtt.servers`` as the daemon moves (``Failover``)."""
        failover = Failover(self.settings.mqtt.brokers)
        said: dict[str, str] = {}
        while True:
            server = failover.server
            since: float | None = None
            error = "the broker ended the session"
            try:
                async with make_client(
                    self.settings,
                    client_id=self.config.client_id,
                    server=server,
                    persistent=True,
                    manual_ack=True,
                    max_packet_bytes=MAX_REPLY_BYTES,
                    receive_maximum=self.config.receive_maximum,
                ) as client:
                    self.generation += 1
                    generation = self.generation
                    self.client = client
                    await client.subscribe(self.subscribe_to())
                    since = time.monotonic()
                    said.clear()
                    self.log.info("broker connected", server=server)
                    self.alarms_waiting.set()
                    async for message in client.messages:
                        received = self.received(message)
                        delivery = Delivery(message.mid, message.qos)
                        del message  # its payload is not held while it waits
                        await self.intake.put(Item(received, delivery, generation))
                        self.held_peak = max(self.held_peak, self.intake.qsize())
                        self.held_bytes += len(received.payload)
                        self.held_bytes_peak = max(self.held_bytes_peak, self.held_bytes)
            except aiomqtt.MqttError as exc:
                error = str(exc)
            except Exception as exc:  # TLS or client setup: keep trying, say so once
                error = f"{type(exc).__name__}: {exc}"
            finally:
                self.client = None
            delay = failover.failed() if since is None else failover.lost(time.monotonic() - since)
            if said.get(server) != error:
                said[server] = error
                self.log.warning(
                    "broker unavailable, retrying", server=server, error=error, next=failover.server
                )
            await asyncio.sleep(delay)

    def received(self, message: aiomqtt.Message) -> Received:
        """A message as the ledger takes it. One larger than any message of a table is
        cut to what ``rejected`` keeps of it (its size kept): while the database is away,
        a flood of 16 MiB payloads waits in memory at 64 KiB each. A recall reply (many
        games) is held whole."""
        topic = message.topic.value
        payload = message.payload
        if isinstance(payload, bytes | bytearray):
            data = bytes(payload)
        else:
            data = b"" if payload is None else str(payload).encode()
        if len(data) > MAX_MESSAGE_BYTES and topic != self.reply_topic:
            return Received(topic, data[:MAX_MESSAGE_BYTES], time.time(), size=len(data))
        return Received(topic, data, time.time())

    def acknowledge(self, items: list[Item]) -> None:
        """PUBACK each committed message, in order, on the connection that delivered it."""
        client = self.client
        for item in items:
            if item.message is None or client is None or item.generation != self.generation:
                continue
            try:
                client.acknowledge(item.message)
            except Exception as exc:  # the connection went: the broker sends it again
                self.log.debug("acknowledgement not sent", error=str(exc))
                return

    # -- the database --------------------------------------------------------------------------

    async def db(self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``work`` on the database, held and retried until the database is there again."""
        delay = DB_RETRY_FIRST_S
        while True:
            try:
                async with self.db_lock:
                    if self.conn is None or self.conn.closed:
                        self.conn = await store.connect(self.config)
                        await store.hold(self.conn)
                    result = await work(self.conn)
            except (*store.UNAVAILABLE, store.StoreError) as exc:
                if self.db_down_since is None:
                    self.db_down_since = time.time()
                    self.log.error(
                        "database unavailable: holding messages unacknowledged",
                        error=store.one_line(exc),
                    )
                    await self.publish_now(
                        ArchiveAlarm(
                            "database_unavailable",
                            None,
                            self.db_down_since,
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
            if self.db_down_since is not None:
                since, self.db_down_since = self.db_down_since, None
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

    async def commit_loop(self) -> None:
        """Take what came (up to ``batch_max``, waiting ``batch_wait_ms`` for more), judge
        it, commit it in one transaction, then acknowledge it."""
        wait_s = self.config.batch_wait_ms / 1000
        while True:
            items = [await self.intake.get()]
            deadline = time.monotonic() + wait_s
            while len(items) < self.config.batch_max:
                try:
                    items.append(self.intake.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(self.intake.get(), left))
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
            self.acknowledge(items)
            for item in items:
                if item.message is not None and item.received is not None:
                    self.held_bytes -= len(item.received.payload)
            if batch.pins:
                await self.judge_again([(pin.table, pin.kid) for pin in batch.pins])

    async def keep(self, batch: Outcome) -> None:
        started = time.monotonic()
        await self.db(lambda conn: store.commit(conn, batch, self.ledger))
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
            self.alarms_waiting.set()

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
        if received.topic == self.reply_topic:
            return await self.judge_reply(received)
        return await self.feed(received)

    async def feed(self, received: Received) -> Outcome:
        out = self.ledger.feed(received)
        if out.lookup is not None:
            asked = out.lookup
            stored = await self.db(lambda conn: store.lookup(conn, asked))
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
            rows = await self.db(functools.partial(store.awaiting_key, table=table, kid=kid))
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

    # -- recall ----------------------------------------------------------------------------------

    async def recall_loop(self) -> None:
        while True:
            await asyncio.sleep(RECALL_TICK_S)
            requests, out = self.ledger.due_recalls(time.time())
            if out.epochs or out.alarms:
                await self.intake.put(Item(outcome=out))
            for request in requests:
                await self.ask(request)

    async def ask(self, request: RecallRequest) -> None:
        """Send ``recall`` to a table, the reply to come on this archive's reply topic."""
        client = self.client
        if client is None:
            return  # unanswered, it is asked again after the timeout
        command: dict[str, Any] = {
            "game_id": request.game_id,
            "last": request.last,
            "operator": self.config.client_id,
            "reply_to": self.reply_topic,
            "correlation_id": request.correlation_id,
        }
        properties = None
        if self.settings.mqtt.protocol == "5":
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ResponseTopic = self.reply_topic
            properties.CorrelationData = request.correlation_id.encode()
        try:
            await client.publish(
                f"{request.base}/command/recall",
                json.dumps(command),
                qos=1,
                properties=properties,
            )
        except aiomqtt.MqttError as exc:
            self.log.warning("recall not sent", table=request.table, error=str(exc))
            return
        self.log.info(
            "recall sent", table=request.table, game_id=request.game_id, last=request.last
        )

    # -- the archive's alarms ------------------------------------------------------------------

    async def alarm_loop(self) -> None:
        """Publish the alarms kept and not yet published, oldest first."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.alarms_waiting.wait(), 5.0)
            self.alarms_waiting.clear()
            client = self.client
            if client is None or self.db_down_since is not None:
                continue
            pending = await self.db(store.unpublished_alarms)
            done = []
            for row_id, payload in pending:
                try:
                    code = await client.publish_acknowledged(self.config.alarm_topic, payload)
                except aiomqtt.MqttError:
                    break
                if code.is_failure:
                    self.log.error("broker refused an archive alarm", reason=str(code))
                    break
                done.append(row_id)
            if done:
                await self.db(functools.partial(store.mark_published, ids=done))
            if len(pending) == len(done) == 100:
                self.alarms_waiting.set()

    async def publish_now(self, alarm: ArchiveAlarm) -> None:
        """An alarm about the database itself: published at once, best effort, not kept."""
        client = self.client
        if client is None:
            return
        with contextlib.suppress(Exception):
            await client.publish(self.config.alarm_topic, json.dumps(alarm.payload()), qos=1)
