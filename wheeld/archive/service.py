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
database (kept in the commit that raised them, so none is lost). The broker's
side is ``Intake`` (``intake.py``), the commits ``Committer`` (``committer.py``),
the connection and its waits ``Database`` (``database.py``); ``Archive`` starts
them, runs the recall and alarm loops, and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from typing import TYPE_CHECKING, Any

import aiomqtt

from wheeld.archive import store
from wheeld.archive.committer import Committer
from wheeld.archive.database import Database
from wheeld.archive.intake import Intake, Item
from wheeld.archive.ledger import Ledger
from wheeld.archive.records import Settings
from wheeld.core.signing import load_public_key
from wheeld.shell.stop import stop_tasks

if TYPE_CHECKING:
    from wheeld.config import ArchiveSettings

#: How often gaps are looked at for a recall to send.
RECALL_TICK_S = 1.0


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
                self.config.recall_delay_s,
            ),
            trusted,
        )
        self.intake = Intake(settings, log)
        self.database = Database(self.config, log, self.intake.publish_now)
        self.committer = Committer(self.config, log, self.ledger, self.intake, self.database)

    # -- start -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Reach the database, bring its schema up to date and read the ledger's state;
        ``StoreError`` in one line when the database cannot be used."""
        await self.database.open(self.ledger)
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
        await self.committer.judge_again(self.ledger.trusted())
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
        from wheeld.shell.notify import Notifier

        notifier = Notifier()
        tasks = [
            asyncio.create_task(self.intake.follow(), name="follow"),
            asyncio.create_task(self.committer.commit_loop(), name="commit"),
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
            await self.database.close()
            notifier.close()
        return 0

    def figures(self) -> dict[str, Any]:
        """What it did: messages kept, batches, redeliveries, rejects, commit times (ms)."""
        committer = self.committer
        times = sorted(committer.commit_seconds)

        def at(share: float) -> float | None:
            return (
                round(times[min(len(times) - 1, int(share * len(times)))] * 1000, 2)
                if times
                else None
            )

        return {
            "committed": committer.committed,
            "batches": committer.batches,
            "duplicates": committer.duplicates,
            "rejected": committer.rejected,
            "held_peak": self.intake.held_peak,
            "held_bytes_peak": self.intake.held_bytes_peak,
            "commit_ms_p50": at(0.5),
            "commit_ms_p99": at(0.99),
            "commit_ms_max": round(times[-1] * 1000, 2) if times else None,
        }

    # -- recall ----------------------------------------------------------------------------------

    async def recall_loop(self) -> None:
        while True:
            await asyncio.sleep(RECALL_TICK_S)
            requests, out = self.ledger.due_recalls(time.time())
            if out.epochs or out.alarms:
                await self.intake.queue.put(Item(outcome=out))
            for request in requests:
                await self.intake.ask(request)

    # -- the archive's alarms ------------------------------------------------------------------

    async def alarm_loop(self) -> None:
        """Publish the alarms kept and not yet published, oldest first."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.intake.alarms_waiting.wait(), 5.0)
            self.intake.alarms_waiting.clear()
            client = self.intake.client
            if client is None or self.database.down_since is not None:
                continue
            pending = await self.database.use(store.unpublished_alarms)
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
                await self.database.use(functools.partial(store.mark_published, ids=done))
            if len(pending) == len(done) == 100:
                self.intake.alarms_waiting.set()
