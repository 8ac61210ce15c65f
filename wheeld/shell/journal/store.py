"""The journal: every decision and the engine's state, durable before publication.

SQLite in WAL mode (``connection``). ``Journal`` is what the daemon writes
and reads, each part of it held by a collaborator: the hash chains
(``chain.Chains``), the serial lines' open block (``frames.FrameTail``), the
publisher's queue (``outbox.Outbox``), what a start resumes from
(``state.StateTable``), ``game-ids`` with the journal's memory of it
(``marks.GameIds``), and the decisions, operator commands and alarms
(``records.Records``). Itself it opens and closes the whole.

Whether a commit is fsync'd is ``durability.fsync_due``'s to say: a game's
end, an alarm, the table opened or closed and the engine state alone are on
disk when the call returns; a game's start, wheel state, commands, frames and
acknowledgements are committed with NORMAL and made durable by the next FULL
commit. A NORMAL commit survives the daemon's crash (it is in the
write-ahead log) but not a power cut; what a power cut may take is found at
the next open (``marks``).

Opening costs the same whatever the journal holds: no whole-file check, no
walk of a whole chain. What a start needs is kept as it goes: each chain's
head, a ``checked`` mark up to which its links were walked (only what came
after is walked at open; ``wheeld verify`` walks all), the engine and chain
state, the statistics' running aggregates. Every lookup by game is indexed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld.shell.journal.chain import Chains, put_heads
from wheeld.shell.journal.connection import (
    WAL_LIMIT_BYTES,
    checkpoint_wal,
    connect,
    connect_beside,
)
from wheeld.shell.journal.errors import JournalCorrupt, JournalError, JournalWriteError
from wheeld.shell.journal.frames import FrameTail
from wheeld.shell.journal.marks import GameIds, lock_state_dir, read_boot_id
from wheeld.shell.journal.outbox import Outbox, OutboxEntry
from wheeld.shell.journal.records import Records
from wheeld.shell.journal.rescue import JournalFile, rescued_copies
from wheeld.shell.journal.retention import Pruner, Retention
from wheeld.shell.journal.schema import Schema, tables
from wheeld.shell.journal.state import PROBE_BYTES, StateTable
from wheeld.table.effects import GameRecord, Outgoing

if TYPE_CHECKING:
    from wheeld.core.engine import EngineState
    from wheeld.core.signing import ChainState
    from wheeld.table.effects import AlarmRecord, CommandRecord, FrameRecord, TableState

__all__ = ["JOURNAL_FILE", "Journal", "checkpoint_wal"]

JOURNAL_FILE = "journal.sqlite3"
#: SQLite virtual-machine steps between two progress calls while a journal opens.
_PROGRESS_STEPS = 1_000_000


def _ticker(on_progress: Callable[[str], None], path: Path) -> Callable[[], int]:
    def tick() -> int:
        on_progress(f"opening the journal {path}")
        return 0  # go on

    return tick


class Journal:
    """The daemon's durable memory: decisions, engine state and the outbox.

    ``warnings`` lists, one line each, what the operator should hear about
    from opening (a journal found missing, older than the game-id mark, or
    possibly missing its last commits after a power cut); the daemon raises
    them as alarms. ``upgraded`` says an older wheeld's journal was brought
    up to date at this open. ``chain_problem``: the first break in a hash
    chain found at this open, or None; the daemon raises it as a critical
    alarm, and a new segment begins after it.

    ``boot_id`` names this boot of the machine (tests give their own);
    by default it is read from the kernel, None when it cannot be. ``clock``
    is the host's wall time for what the journal stamps on its own at open (a
    new chain segment's anchor, a floor): the daemon hands its ``HostClock``'s;
    every other time it keeps is handed in with what it keeps.
    """

    def __init__(
        self,
        path: Path,
        boot_id: str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.warnings: list[str] = []
        self._boot_id = boot_id if boot_id is not None else read_boot_id()
        state_dir = path.parent
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(f"{state_dir}: cannot create the state directory: {exc}") from None
        self._locks: tuple[int, ...] = lock_state_dir(state_dir)
        try:
            self._ids = GameIds(state_dir, self._boot_id, self.warnings)
            self._sql, fresh = connect(path, self._ids.continuation)
            self._db = self._sql.db
            #: Whether the path still names this file: deleted under the daemon, it stops.
            self.file = JournalFile(path)
            if fresh:
                self._ids.journal_missing(path)
            self.warnings += rescued_copies(path)
            if on_progress is not None:
                # Told now and then while SQLite works (an upgrade's index over a
                # year of rows, a walk after a crash): the daemon asks systemd for time.
                self._db.set_progress_handler(_ticker(on_progress, path), _PROGRESS_STEPS)
            self.upgraded = Schema(self._db, path, self._sql.corrupt).prepare() == "upgraded"
            self._db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
            self._legacy_frames = "frames" in tables(self._db)
            self._state = StateTable(self._sql, self._ids, clock)
            self._ids.reconcile(self._sql, self._state.engine())
            self._chains = Chains(self._sql)
            self.chain_problem = self._chains.check(clock())
            self._tail = FrameTail(self._sql, self._chains)
            self._outbox = Outbox(self._sql)
            self._records = Records(self._sql, self._ids, self._chains, self._state)
            had_decisions = bool(self.last_decision_id()) and not self.upgraded
            self.epoch = self._state.epoch(had_decisions=had_decisions, warnings=self.warnings)
            try:  # a block of lines the last run left open ends here: that run ended
                self._tail.close_block()
            except JournalWriteError as exc:
                raise JournalError(str(exc)) from None
            self._db.set_progress_handler(None, 0)
        except sqlite3.Error as exc:  # a damaged page, found where the open first read it
            self.close()
            raise self._sql.corrupt(str(exc), exc) from None
        except BaseException:
            self.close()
            raise
        self._sql.opened = True

    @property
    def lost(self) -> bool:
        """The journal may miss games (missing, emptied, older than ``game-ids``, or its
        last commits lost to a power cut): ids continue past the reserved blocks."""
        return self._ids.lost

    def close(
        self,
        tell: Callable[[str], None] = lambda said: None,
        working: Callable[[str], None] = lambda status: None,
    ) -> None:
        """Close the database and release the state directory; safe to call twice.

        A clean close is written down (with an fsync, which makes every earlier
        commit durable too), the chains' heads become the ``checked`` mark,
        and ``game-ids`` comes back to the last game id handed out: the next
        start continues from it, and an older journal swapped in meanwhile is
        found behind it. ``tell`` hears what became of a journal deleted or replaced
        under the daemon (``rescue``): put back at its path, or why it could not be;
        ``working``, how far its copy is.
        """
        db = getattr(self, "_db", None)
        if db is not None:
            # A journal found lost keeps saying so until a decision past the
            # reserved block is recorded: a clean close must not hide the loss.
            if self._sql.opened and (self._ids.run_marked or not self._ids.lost):
                with contextlib.suppress(JournalError):
                    with self._chains.extending(durable=True) as heads:
                        self._tail.seal(heads)
                        self._ids.put_run(self._sql, closed=True)
                        put_heads(db, heads, "checked")
                    self._ids.closed()
            # A file deleted under the daemon: copied out, and put back once closed.
            self.file.copy_out_if_lost(db, tell, working)
            db.close()
            del self._db
            self.file.put_back(tell)
        for fd in self._locks:
            os.close(fd)  # releases the flock
        self._locks = ()

    # -- decisions, commands and alarms (``records.Records``) -----------------------------

    def record(
        self,
        games: list[GameRecord],
        messages: list[Outgoing],
        state: EngineState,
        chain: ChainState | None = None,
        *,
        alarm: bool = False,
        frames: Sequence[FrameRecord] = (),
    ) -> list[int]:
        """Write decisions, their messages, the new state and chain in one commit.

        ``chain`` is where the signed message chain stands after these
        messages: stored with them, so a restart never reuses a ``seq`` nor
        skips one. Returns the outbox ids of the messages, in order. Raises
        JournalWriteError, with nothing recorded, when the disk refuses.

        ``alarm``: an alarm is among the messages (without games, the messages
        are an alarm's). The commit is fsync'd as ``fsync_due`` says of that;
        the first commit of a run whatever it holds: it marks the run open,
        which a power cut's losses are told by.

        ``frames``: the lines that led to the decisions, kept first in the same commit
        (``record_frames``' work): a game's end is one commit, not two.
        """
        if not frames:
            return self._records.record(games, messages, state, chain, alarm=alarm)
        try:
            return self._records.record(
                games,
                messages,
                state,
                chain,
                alarm=alarm,
                before=lambda heads: self._tail.append(frames, heads),
            )
        except JournalWriteError:
            self._tail.forget()  # the open block as the database kept it
            raise

    def history(self, length: int) -> list[str]:
        """The last ``length`` winning numbers the table shows, newest first."""
        return self._state.history(length)

    def decisions(self) -> list[tuple[int, str, str]]:
        """Every journalled game decision: (game id, event, payload), oldest first.

        For tests and tools on small journals; the daemon never reads them all.
        """
        return list(self._records.decisions_after(0))

    def decisions_after(self, row_id: int) -> Iterator[tuple[int, str, str]]:
        return self._records.decisions_after(row_id)

    def last_decision_id(self) -> int:
        return self._records.last_decision_id()

    def record_commands(self, commands: Sequence[CommandRecord]) -> None:
        """Keep operator commands, accepted or refused, with who sent them.

        What an accepted command changed (a game voided, the table closed) is
        committed durably on its own, and this commit is made durable with it.
        A flood of commands costs no flood of fsyncs.
        """
        self._records.record_commands(commands)

    def commands(self) -> list[tuple[float, str, str | None, str, bool, str]]:
        return self._records.commands()

    def record_alarms(
        self, alarms: Sequence[AlarmRecord], set_alerts: dict[str, dict[str, Any]] | None
    ) -> None:
        """Keep alarms raised, cleared and acknowledged (chained), and the alerts now set.

        Alarms are no game decisions: the next durable commit makes them durable.
        """
        self._records.record_alarms(alarms, set_alerts)

    def alarms(self) -> list[tuple[float, str, str, str]]:
        return self._records.alarms()

    # -- lines and the write probe ------------------------------------------------------

    def record_frames(self, frames: Sequence[FrameRecord]) -> None:
        """Keep the lines that crossed the link (``FrameTail.keep``)."""
        self._tail.keep(frames)

    def writable(self, now: float, probe_bytes: int = PROBE_BYTES) -> bool:
        """Whether durable writes work again (``StateTable.writable``'s probe)."""
        return self._state.writable(now, probe_bytes)

    # -- what a start resumes from (``state.StateTable``) -------------------------------

    def load_state(self) -> EngineState | None:
        return self._state.load_engine()

    def save_state(self, state: EngineState) -> None:
        self._state.save_engine(state)

    def load_chain(self) -> ChainState:
        return self._state.load_chain()

    def record_floor(self, seq: int, digest_: str, at: float) -> None:
        self._state.record_floor(seq, digest_, at)

    def record_takeover(self, taken: tuple[str, int, str], history: list[str] | None) -> None:
        self._state.record_takeover(taken, history)

    def taken_from(self) -> tuple[str, int, str] | None:
        return self._state.taken_from()

    def table_state(self) -> TableState:
        return self._state.table()

    def save_table_state(self, state: TableState) -> None:
        self._state.save_table(state)

    def claim_table(self, table: str) -> None:
        try:
            self._state.claim(table)
        except JournalCorrupt:
            self._sql.opened = False  # not ours: closing leaves it as its table's last run did
            raise

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        return self._state.set_alerts()

    def statistics(self) -> tuple[dict[str, Any] | None, int]:
        return self._state.statistics(self.last_decision_id())

    def save_statistics(self, snapshot: dict[str, Any], after: int) -> None:
        self._state.save_statistics(snapshot, after)

    # -- the outbox (``outbox.Outbox``) ------------------------------------------------

    def enqueue(self, messages: list[Outgoing]) -> None:
        self._outbox.enqueue(messages)

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxEntry]:
        return self._outbox.pending(after, limit)

    def acknowledge(self, *entries: OutboxEntry) -> None:
        self._outbox.acknowledge(*entries)

    def supersede(self, topics: Sequence[str]) -> int:
        return self._outbox.supersede(topics)

    def pending_count(self) -> int:
        """How many messages wait for the broker's acknowledgement (the outbox's depth)."""
        return self._outbox.depth()

    def retained(self) -> list[Outgoing]:
        return self._outbox.retained()

    # -- retention and checkpoints ------------------------------------------------------

    def pruner(self, retention: Retention) -> Pruner:
        """Retention, a batch at a time: ``pruner(...).step(now)`` until it returns 0.

        Its commits are not fsync'd: what it deleted and the anchor it moved come
        back whole after a power cut, or not at all. Its connection is its own (for
        ``RetentionJob``'s worker thread); its writes take turns with the journal's."""
        sql = self._sql
        return Pruner(lambda: connect_beside(sql), retention, self._legacy_frames, self.file)

    def checkpoint_elsewhere(self) -> None:
        """Leave the write-ahead log's checkpoints to ``checkpoint_wal`` (another connection,
        in a worker thread): a commit on the event loop never pays for one."""
        self._db.execute("PRAGMA wal_autocheckpoint = 0")

    def checkpoint_log(self) -> int:
        """``checkpoint_wal`` for a worker thread, the log started over there too."""
        return checkpoint_wal(self.path, self._sql.write_lock, self.file)

    def checkpoint(self) -> None:
        """The chains as they stand are ``checked``: the next open walks only what follows."""
        self._chains.mark_checked()

    def disk_bytes(self) -> int:
        """The journal's size on disk: the database and its write-ahead log."""
        return self._sql.disk_bytes()
