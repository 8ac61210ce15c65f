"""The journal: every decision and the engine's state, durable before publication.

SQLite in WAL mode. A game's end (a result, a no-spin), the table's state and
alarms that come with decisions are committed with ``synchronous=FULL``: on
disk (fsync'd) when the call returns. What needs no fsync of its own is
committed with NORMAL and made durable by the next FULL commit: a game's start
(``spinning``, ``no_more_bets``), wheel state, operator commands,
acknowledgements, frames. A NORMAL commit survives the daemon's crash (it is
in the write-ahead log) but not a power cut; what a power cut may take is
found at the next open (below). The ``outbox`` is the publisher's queue
(``wheeld.shell.journal.outbox``).

Opening costs the same whatever the journal holds: no whole-file check, no
walk of a whole chain. What a start needs is kept as it goes: each chain's
head, a ``checked`` mark up to which its links were walked (only what came
after is walked at open; ``wheeld verify`` walks all), the engine and chain
state, the statistics' running aggregates. Every lookup by game is indexed.

Beside the database (``wheeld.shell.journal.marks``): ``game-ids``, the highest game
id and seq reserved, and ``lock``. The journal's ``state`` table also keeps
the mark it last wrote into ``game-ids`` (``game_ids``), how the last run
ended (``run``: the kernel's boot id and whether it closed cleanly), and the
journal's ``epoch``: a random id made with it, carried in every game message,
so ``(table, epoch, seq)`` never repeats even when a lost journal and a broker
that forgot both restart the ids. A journal whose last run did not close
cleanly, opened after the machine restarted, may have lost its last NORMAL
commits (a game announced but forgotten): game ids and seqs then continue past
the reserved blocks, with a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheeld.core.engine import EngineState
from wheeld.core.signing import ChainState, digest
from wheeld.shell.journal import outbox
from wheeld.shell.journal.chain import (
    BROKEN,
    FLOOR,
    GENESIS,
    ChainBreak,
    ChainWalk,
    hex_hash,
    insert_chained,
    insert_stored,
    put_heads,
    stored_heads,
    walk,
)
from wheeld.shell.journal.codec import pack_payload, unpack_payload
from wheeld.shell.journal.durability import fsync_due
from wheeld.shell.journal.errors import (
    JournalCorrupt,
    JournalError,
    JournalWriteError,
    another_table,
)
from wheeld.shell.journal.frames import FrameTail
from wheeld.shell.journal.marks import (
    GAME_ID_RESERVE,
    GAME_IDS_FILE,
    SEQ_RESERVE,
    GameIdsFile,
    lock_state_dir,
    read_boot_id,
)
from wheeld.shell.journal.outbox import OutboxEntry
from wheeld.shell.journal.retention import Pruner, Retention
from wheeld.shell.journal.schema import Schema, rollback, tables, transaction
from wheeld.table.effects import Effects, GameRecord, Outgoing

if TYPE_CHECKING:
    from wheeld.table.effects import AlarmRecord, CommandRecord, FrameRecord, TableState

JOURNAL_FILE = "journal.sqlite3"
#: The chains walked at open, from their ``checked`` mark. The frame blocks are
#: only checked against their head: walking one means decompressing it.
WALKED_AT_OPEN = ("decisions", "commands", "alarms")
#: The write-ahead log is cut back to this after a checkpoint.
WAL_LIMIT_BYTES = 4 * 1024 * 1024
#: SQLite's errors that say the file itself is damaged, not that it is busy or unreachable.
_DAMAGE = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
#: ... and those it says with a generic code: a header's format bytes overwritten.
_DAMAGED = frozenset({"unsupported file format"})
#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: What an epoch is: URL-safe text, 64 bits at least (``secrets.token_urlsafe(12)``: 16).
_EPOCH = re.compile(r"[A-Za-z0-9_-]{11,64}")
#: SQLite virtual-machine steps between two progress calls while a journal opens.
_PROGRESS_STEPS = 1_000_000


def checkpoint_wal(path: Path) -> None:
    """Copy the write-ahead log's pages back into the database, beside the writer (PASSIVE:
    it waits for no one), then let ``journal_size_limit`` cut the log back. For a worker
    thread: SQLite lets the event loop run meanwhile."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        db.close()


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
    up to date at this open.

    ``boot_id`` names this boot of the machine (tests give their own);
    by default it is read from the kernel, None when it cannot be.
    """

    def __init__(
        self,
        path: Path,
        boot_id: str | None = None,
        *,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.warnings: list[str] = []
        self._boot_id = boot_id if boot_id is not None else read_boot_id()
        #: The highest game id handed to the journal, from the journal's own at open.
        self._given = 0
        #: Below this the game-id mark is never brought down (the mark found when
        #: the journal was lost: ids up to it may have been announced).
        self._floor = 0
        #: This run is recorded in the journal as open (not closed cleanly).
        self._run_marked = False
        state_dir = path.parent
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(f"{state_dir}: cannot create the state directory: {exc}") from None
        self._opened = False
        self._locks: tuple[int, ...] = lock_state_dir(state_dir)
        try:
            self._marks = GameIdsFile(state_dir / GAME_IDS_FILE)
            #: The journal was missing, emptied or older than ``game-ids``, or its last
            #: commits may have been lost to a power cut: ids continue past the blocks.
            self.lost = False
            self._db = self._connect()
            if on_progress is not None:
                # Told now and then while SQLite works (an upgrade's index over a
                # year of rows, a walk after a crash): the daemon asks systemd for time.
                self._db.set_progress_handler(_ticker(on_progress, path), _PROGRESS_STEPS)
            self._durable = True
            self.upgraded = Schema(self._db, path, self._corrupt).prepare() == "upgraded"
            self._db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
            self._legacy_frames = "frames" in tables(self._db)
            self._check_game_ids()
            self._heads: dict[str, tuple[int, str]] = {}
            #: The first break in the journal's hash chain found at this open, or None.
            #: The daemon raises it as a critical alarm; a new segment begins after it.
            self.chain_problem = self._check_chain()
            self._tail = FrameTail(self._db)
            #: The journal's epoch: made with it, never reused (see the module's docstring).
            self.epoch = self._epoch()
            self._seal_left_open()
            self._db.set_progress_handler(None, 0)
        except sqlite3.Error as exc:  # a damaged page, found where the open first read it
            self.close()
            raise self._corrupt(str(exc), exc) from None
        except BaseException:
            self.close()
            raise
        self._opened = True

    def close(self) -> None:
        """Close the database and release the state directory; safe to call twice.

        A clean close is written down (with an fsync, which makes every earlier
        commit durable too), the chains' heads become the ``checked`` mark,
        and ``game-ids`` comes back to the last game id handed out: the next
        start continues from it, and an older journal swapped in meanwhile is
        found behind it.
        """
        db = getattr(self, "_db", None)
        if db is not None:
            # A journal found lost keeps saying so until a decision past the
            # reserved block is recorded: a clean close must not hide the loss.
            if self._opened and (self._run_marked or not self.lost):
                with contextlib.suppress(JournalError):
                    self._close_run()
            db.close()
            del self._db
        for fd in self._locks:
            os.close(fd)  # releases the flock
        self._locks = ()

    # -- opening -------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        try:
            fresh = not path.exists() or path.stat().st_size == 0
            if fresh:
                self._forget_stale_log()
            else:
                with path.open("rb") as file:
                    if file.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                        raise JournalCorrupt(
                            f"{path}: not an SQLite database; move it aside to start a new"
                            f" journal; {self._continuation()}"
                        )
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open journal: {exc}") from None
        try:
            if fresh:
                # Before anything is written (WAL mode itself writes the header): only
                # then can a database take it, and retention give space back.
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            db.close()
            raise self._corrupt(str(exc), exc) from None
        if fresh and (self._marks.high_water > 0 or self._marks.seq_reserved > 0):
            self.lost = True
            self._floor = self._marks.high_water
            self.warnings.append(
                f"{path}: journal was missing or empty, a new one was started;"
                f" game ids continue from {self._marks.high_water + 1} ({self._marks.path})"
            )
        return db

    def _forget_stale_log(self) -> None:
        """Remove the write-ahead log of a journal that is gone.

        Its pages belong to the old database: replayed into a new one they
        would corrupt it.
        """
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                self.path.with_name(self.path.name + suffix).unlink()

    def _check_chain(self) -> str | None:
        """Walk what each chain gained since its ``checked`` mark; on a new break, a new segment.

        Nothing is repaired or deleted: the broken rows stay as found, for
        ``wheeld verify`` to name, and the problem is kept in the anchor.
        Returns the first new break, described, or None.
        """
        db = self._db
        checked = {
            table: mark
            for table, mark in stored_heads(db, "checked").items()
            if self._holds(table, mark)  # else walked whole: a mark is no proof of itself
        }
        heads = stored_heads(db)
        walks = {
            table: walk(db, table, checked.get(table, GENESIS), head=heads.get(table, GENESIS))
            for table in WALKED_AT_OPEN
        }
        walks["frame_blocks"] = self._blocks_head(heads.get("frame_blocks", GENESIS))
        self._heads = {**heads, **{table: w.end for table, w in walks.items()}}
        fresh = [(t, b) for t, w in walks.items() for b in w.breaks if not b.acknowledged]
        if not fresh and checked == self._heads:
            return None
        at = time.time()
        try:
            with self._writing():
                for table, brk in dict(reversed(fresh)).items():  # the first break of each
                    end = walks[table].end
                    db.execute(
                        "INSERT INTO anchors (at, chain, after_id, hash, reason, problem)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (at, table, end[0], end[1], BROKEN, brk.describe()),
                    )
                put_heads(db, self._heads)
                put_heads(db, self._heads, "checked")
        except JournalWriteError as exc:
            raise JournalError(str(exc)) from None
        return fresh[0][1].describe() if fresh else None

    def _holds(self, table: str, mark: tuple[int, str]) -> bool:
        """Whether the chain has the row ``mark`` names (or retention's anchor where it was)."""
        row = self._db.execute(f"SELECT hash FROM {table} WHERE id = ?", (mark[0],)).fetchone()
        if row is not None:
            return hex_hash(row[0]) == mark[1]
        anchored = self._db.execute(
            "SELECT 1 FROM anchors WHERE chain = ? AND after_id = ? AND hash = ?",
            (table, mark[0], mark[1]),
        ).fetchone()
        return anchored is not None

    def _blocks_head(self, head: tuple[int, str]) -> ChainWalk:
        """The frame blocks' last row against their stored head (a deleted last block)."""
        last = self._db.execute(
            "SELECT id, hash FROM frame_blocks ORDER BY id DESC LIMIT 1"
        ).fetchone()
        found = GENESIS if last is None else (int(last[0]), hex_hash(last[1]))
        if found == head or (last is None and head == GENESIS):
            return ChainWalk([], found)
        anchored = self._db.execute(
            "SELECT after_id, hash FROM anchors WHERE chain = 'frame_blocks' ORDER BY id DESC"
            " LIMIT 1"
        ).fetchone()
        if last is None and anchored is not None and tuple(anchored) == head:
            return ChainWalk([], head)  # every block kept was let go by retention
        why = (
            f"rows after {found[0]} missing (deleted): the journal's head is row {head[0]}"
            if head[0] > found[0]
            else f"the journal's head (row {head[0]}) does not match its last row"
        )
        return ChainWalk([ChainBreak("frame_blocks", found[0], None, why)], found)

    def _epoch(self) -> str:
        """The journal's epoch, made now when it has none (a new journal, or an older wheeld's)."""
        stored = self._get("epoch")
        if stored is not None:
            if not _EPOCH.fullmatch(stored):
                raise self._corrupt(f"its epoch {stored[:40]!r} is malformed")
            return stored
        if self._heads.get("decisions", GENESIS)[0] and not self.upgraded:
            self.warnings.append(
                f"{self.path}: the journal's epoch was gone: its messages from now on are"
                " in a new one"
            )
        epoch = secrets.token_urlsafe(12)  # 96 random bits
        try:
            with self._writing():
                self._put("epoch", epoch)
        except JournalWriteError as exc:
            raise JournalError(str(exc)) from None
        return epoch

    def _seal_left_open(self) -> None:
        """A block of lines the last run left open ends here: the run that heard them ended."""
        if self._tail.pending:
            try:
                self._seal()
            except JournalWriteError as exc:
                raise JournalError(str(exc)) from None

    def _corrupt(self, what: str, error: sqlite3.Error | None = None) -> JournalError:
        """A damaged journal; JournalCorrupt (a restart cannot mend it) unless ``error``
        is SQLite's and not one of damage (a lock, an I/O error: a restart may do)."""
        damaged = error is None or error.sqlite_errorcode in _DAMAGE or str(error) in _DAMAGED
        return (JournalCorrupt if damaged else JournalError)(
            f"{self.path}: journal is corrupt ({what}); move it aside to start a new one;"
            f" {self._continuation()}"
        )

    def _continuation(self) -> str:
        if self._marks.high_water > 0:
            return f"game ids continue from {self._marks.high_water + 1}"
        return (
            f"game ids would restart at 1: write the last game id used into"
            f" {self._marks.path} first"
        )

    # -- the game-id high-water mark -----------------------------------------------

    def _check_game_ids(self) -> None:
        """Reconcile the journal with ``game-ids``: warn, and skip ids, when it may miss games.

        Within the block it reserved, a journal behind the mark is normal. It
        is not complete when ``game-ids`` holds a mark it never wrote (an older
        journal, or one from before the mark was kept in it), nor when its last
        run did not close cleanly and the machine has restarted since (its
        last commits had no fsync). Ids then continue past the reserved block.
        """
        stored = self._stored_state()
        high_water = self._marks.high_water
        if stored is None:
            self._floor = high_water  # no game in it: ids continue past the mark
            return
        used = stored.next_game_id - 1
        self._given = used
        if used > high_water:
            # A journal from before game-ids existed, or game-ids was deleted.
            self._marks.write(used)
        elif used < high_water and self._stored_mark() != high_water:
            self._lose(
                f"{self.path}: the journal ends at game {used} but {self._marks.path}"
                f" reserves up to game {high_water} (an older journal?);"
                f" game ids continue from {high_water + 1}"
            )
            return
        run = self._stored_run()
        if run is not None and not run[1] and (run[0] is None or run[0] != self._boot_id):
            self._lose(
                f"{self.path}: the last run did not close cleanly and the machine restarted"
                f" since: its last commits, made without an fsync, may be lost;"
                f" game ids continue from {high_water + 1} ({self._marks.path})"
            )

    def _lose(self, warning: str) -> None:
        """The journal may miss games: ids (and seqs) continue past every reserved one."""
        self.lost = True
        self._floor = self._marks.high_water
        self.warnings.append(warning)

    def _stored_mark(self) -> int | None:
        """The game-id mark this journal last wrote into ``game-ids``, or None if never."""
        value = self._get("game_ids") or ""
        if not (value.isascii() and value.isdigit()):
            return None  # an unreadable mark is no mark: the journal is taken as older
        return int(value)

    def _stored_run(self) -> tuple[str | None, bool] | None:
        """How the last run ended: (its boot id, closed cleanly), or None if never written."""
        value = self._get("run")
        if value is None:
            return None
        try:
            run = json.loads(value)
            boot, closed = run["boot_id"], run["closed"]
        except (ValueError, TypeError, KeyError):
            return None, False  # unreadable: taken as a run that did not close cleanly
        return (boot if isinstance(boot, str) else None), closed is True

    def _put_run(self, *, closed: bool) -> None:
        self._put("run", json.dumps({"boot_id": self._boot_id, "closed": closed}, sort_keys=True))

    def _close_run(self) -> None:
        """Write down a clean close (fsync'd), then bring the mark down to the last id given."""
        with self._writing():
            if self._tail.pending:
                self._tail.seal(self._heads)
                put_heads(self._db, self._heads)
            self._put_run(closed=True)
            put_heads(self._db, self._heads, "checked")
        last = max(self._given, self._floor)
        if last < self._marks.high_water:
            # Safe only now: the commit above made every game up to ``last`` durable.
            self._marks.write(last)

    def _note_game_ids(
        self, games: list[GameRecord], state: EngineState, chain: ChainState | None = None
    ) -> None:
        """Reserve the next blocks of game ids and seqs, when these reach past the marks.

        Written before the decision is committed: a crash between the two
        skips ids, never reuses one. Only a game or a seq past its block pays
        for it, and both blocks are reserved in one write when both are due.
        """
        marks = self._marks
        used = max([state.next_game_id - 1, *(game.game_id for game in games)])
        wanted = marks.high_water, marks.seq_reserved
        if used > marks.high_water:
            wanted = used + GAME_ID_RESERVE - 1, wanted[1]
        if chain is not None and chain.seq >= marks.seq_reserved:
            wanted = wanted[0], chain.seq + SEQ_RESERVE
        if wanted != (marks.high_water, marks.seq_reserved):
            marks.write(*wanted)
        self._given = max(self._given, used)

    # -- state -------------------------------------------------------------

    def load_state(self) -> EngineState | None:
        """The engine state to resume from: the last run's, never behind ``game-ids``.

        None on a first start (no journal state and no game id ever used).
        """
        state = self._stored_state()
        lost = self.lost or state is None
        if state is None:
            if self._marks.high_water == 0:
                return None
            state = EngineState()
        # A lost journal continues past the reserved block; a complete one from
        # the next id it has not handed out (a decision that failed to be written
        # included: it was never published, but it is not handed out twice).
        after = self._marks.high_water if lost else self._given
        if state.next_game_id <= after:
            state = replace(state, next_game_id=after + 1)
        return state

    def _stored_state(self) -> EngineState | None:
        value = self._get("engine")
        if value is None:
            return None
        try:
            return EngineState.from_dict(json.loads(value))
        except json.JSONDecodeError:
            raise self._corrupt("stored engine state is not JSON") from None
        except ValueError as exc:
            raise self._corrupt(str(exc)) from None

    def save_state(self, state: EngineState) -> None:
        """Store the engine state on its own (no decision came with the change)."""
        self._note_game_ids([], state)
        with self._writing(durable=fsync_due(Effects(state=state))):
            self._put_state(state)
            self._put("game_ids", str(self._marks.high_water))

    def _put_state(self, state: EngineState) -> None:
        self._put("engine", json.dumps(state.to_dict(), sort_keys=True))

    def table_state(self) -> TableState:
        """Whether the operator last opened or closed the table; open until told."""
        value = self._get("table")
        if value is None or value == "open":
            return "open"
        if value == "closed":
            return "closed"
        raise self._corrupt(f"stored table state {value!r} is neither open nor closed")

    def claim_table(self, table: str) -> None:
        """Mark the journal as ``table``'s; refuse it when another table's it is.

        A journal carried into another table's state directory would go on with
        that table's game ids and chain: two tables, one chain, forked.
        """
        owner = self._get("table_id")
        if owner is not None:
            if owner != table:
                # Not ours: closing must leave it as its table's last run left it.
                self._opened = False
                raise JournalCorrupt(another_table(self.path, owner, table))
            return
        with self._writing(durable=False):
            self._put("table_id", table)

    def save_table_state(self, state: TableState) -> None:
        """Store the table's open/closed state, durably: a restart must not reopen it."""
        with self._writing(durable=fsync_due(Effects(table_state=state))):
            self._put("table", state)

    # -- commands and alarms -----------------------------------------------------

    def record_commands(self, commands: Sequence[CommandRecord]) -> None:
        """Keep operator commands, accepted or refused, with who sent them.

        No fsync of their own: what an accepted command changed (a game voided,
        the table closed) is committed durably on its own, and this commit is
        made durable with it. A flood of commands costs no flood of fsyncs.
        """
        heads = dict(self._heads)
        with self._writing(durable=False):
            for c in commands:
                insert_chained(
                    self._db,
                    heads,
                    "commands",
                    (c.at, c.name, c.sender, c.payload, int(c.accepted), c.outcome),
                )
            put_heads(self._db, heads)
        self._heads = heads

    def commands(self) -> list[tuple[float, str, str | None, str, bool, str]]:
        """Every journalled operator command: (at, name, sender, payload, accepted, outcome)."""
        rows = self._read(
            "SELECT at, name, sender, payload, accepted, outcome FROM commands ORDER BY id"
        )
        return [(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]

    def record_alarms(
        self, alarms: Sequence[AlarmRecord], set_alerts: dict[str, dict[str, Any]] | None
    ) -> None:
        """Keep alarms raised, cleared and acknowledged (chained), and the alerts now set.

        No fsync of their own, like frames: alarms are no game decisions, and
        the next durable commit makes them durable with it.
        """
        heads = dict(self._heads)
        with self._writing(durable=False):
            for a in alarms:
                insert_chained(self._db, heads, "alarms", (a.at, a.code, a.state, a.payload))
            if alarms:
                put_heads(self._db, heads)
            if set_alerts is not None:
                self._put("set_alerts", json.dumps(set_alerts, sort_keys=True))
        self._heads = heads

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        """The alerts and faults the last run left set (code -> since, detail, ack); {} if none.

        Unreadable, it is forgotten rather than refused: the alerts are judged afresh.
        """
        try:
            stored = json.loads(self._get("set_alerts") or "{}")
        except ValueError:
            return {}
        if not isinstance(stored, dict):
            return {}
        return {code: value for code, value in stored.items() if isinstance(value, dict)}

    def alarms(self) -> list[tuple[float, str, str, str]]:
        """Every journalled alarm: (at, code, state, payload), oldest first."""
        rows = self._read("SELECT at, code, state, payload FROM alarms ORDER BY id")
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def writable(self) -> bool:
        """Whether durable writes work again: tries one tiny write of each kind.

        For the daemon to poll while writes are failing; the probe leaves only
        a ``write_probe`` row (the time of the last success) in the state table.
        """
        try:
            with self._writing():
                self._put("write_probe", repr(time.time()))
            self._marks.write(self._marks.high_water)
        except JournalWriteError:
            return False
        return True

    # -- decisions -----------------------------------------------------------

    def record(
        self,
        games: list[GameRecord],
        messages: list[Outgoing],
        state: EngineState,
        chain: ChainState | None = None,
        *,
        alarm: bool = False,
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
        """
        durable = fsync_due(Effects(games=games, alarmed=alarm or not games))
        self._note_game_ids(games, state, chain)
        heads = dict(self._heads)
        marking = not self._run_marked
        db = self._db
        with self._writing(durable=durable or marking):
            if marking:
                self._put_run(closed=False)
            self._put("game_ids", str(self._marks.high_water))
            for game in games:
                insert_stored(
                    db,
                    heads,
                    "decisions",
                    (game.game_id, game.event, game.payload),
                    (game.game_id, game.event, pack_payload(game.payload)),
                )
                if game.number is not None:
                    db.execute(
                        "INSERT OR REPLACE INTO results (game_id, number) VALUES (?, ?)",
                        (game.game_id, game.number),
                    )
            ids = [outbox.enqueue(db, message) for message in messages]
            self._put_state(state)
            if chain is not None:
                self._put("chain", json.dumps(chain.to_dict(), sort_keys=True))
            if games:
                put_heads(db, heads)
        # Only once committed: a failed write leaves the chain where it was.
        self._heads = heads
        self._run_marked = True
        return ids

    def record_floor(self, seq: int, digest_: str) -> None:
        """The message chain goes on past ``seq`` (``digest_``), another journal's message.

        Kept as an anchor of the ``messages`` chain: ``wheeld verify`` tells the
        jump it makes from a gap. No fsync: the alarm it comes with has one.
        """
        with self._writing(durable=False):
            self._db.execute(
                "INSERT INTO anchors (at, chain, after_id, hash, reason) VALUES (?, ?, ?, ?, ?)",
                (time.time(), "messages", seq, digest_, FLOOR),
            )

    def record_takeover(self, taken_from: tuple[str, int, str]) -> None:
        """The marker of another controller this journal took the table over from (its
        epoch, seq or game id, event): read again, at a reconnect or the next start, it
        changes nothing. No fsync: the alarm it comes with has one."""
        with self._writing(durable=False):
            self._put("taken_from", json.dumps(list(taken_from)))

    def taken_from(self) -> tuple[str, int, str] | None:
        """The marker this journal last took the table over from; None if never (or unreadable)."""
        try:
            epoch, number, event = json.loads(self._get("taken_from") or "null")
        except (ValueError, TypeError):
            return None
        if isinstance(epoch, str) and type(number) is int and isinstance(event, str):
            return epoch, number, event
        return None

    def load_chain(self) -> ChainState:
        """Where the message chain stands: the next ``seq`` and ``prev`` (a fresh chain if none).

        Never behind a message already published: the stored state, the last
        signed payload in the journal (should the state row be gone), and, when
        the journal was lost or is older than ``game-ids``, past every seq ever
        reserved there (a new segment: ``prev`` null, a gap a verifier shows).
        """
        chain = self._stored_chain()
        last = self._read("SELECT payload FROM decisions ORDER BY id DESC LIMIT 1")
        if last:
            try:
                payload = json.loads(unpack_payload(last[0][0]))
                seq = payload.get("seq") if isinstance(payload, dict) else None
                if type(seq) is int and (chain is None or chain.seq <= seq):
                    chain = ChainState(seq + 1, digest(payload))
            except (ValueError, TypeError):
                pass  # an unreadable payload is the hash chain's to report
        reserved = self._marks.seq_reserved
        if self.lost and reserved > (chain.seq if chain is not None else 1):
            # The chain jumps past every seq ever reserved, never where a consumer may
            # hold one: kept as a floor, for verify to tell it from a gap.
            self.record_floor(reserved - 1, "")
            return ChainState(reserved, None)
        return chain if chain is not None else ChainState()

    def _stored_chain(self) -> ChainState | None:
        value = self._get("chain")
        if value is None:
            return None
        try:
            stored = json.loads(value)
            if not isinstance(stored, dict):
                raise ValueError("stored chain state is not an object")
            return ChainState.from_dict(stored)
        except json.JSONDecodeError:
            raise self._corrupt("stored chain state is not JSON") from None
        except ValueError as exc:
            raise self._corrupt(str(exc)) from None

    def history(self, length: int) -> list[str]:
        """The last ``length`` winning numbers, newest first."""
        rows = self._read("SELECT number FROM results ORDER BY game_id DESC LIMIT ?", (length,))
        return [row[0] for row in rows]

    def decisions(self) -> list[tuple[int, str, str]]:
        """Every journalled game decision: (game id, event, payload), oldest first.

        For tests and tools on small journals; the daemon never reads them all.
        """
        return list(self.decisions_after(0))

    def decisions_after(self, row_id: int) -> Iterator[tuple[int, str, str]]:
        """The decisions after row ``row_id``: (game id, event, payload), oldest first."""
        for game_id, event, payload in self._read(
            "SELECT game_id, event, payload FROM decisions WHERE id > ? ORDER BY id", (row_id,)
        ):
            yield game_id, event, unpack_payload(payload)

    def last_decision_id(self) -> int:
        """The row id of the last decision kept (0 for none)."""
        return self._heads.get("decisions", GENESIS)[0]

    # -- the statistics' running aggregates ---------------------------------------

    def statistics(self) -> tuple[dict[str, Any] | None, int]:
        """The statistics snapshot kept, and the last decision row it counts (0: none)."""
        value = self._get("statistics")
        if value is None:
            return None, 0
        try:
            stored = json.loads(value)
            after = stored["after"]
            snapshot = stored["snapshot"]
            if type(after) is not int or not isinstance(snapshot, dict):
                raise ValueError("malformed")
            if not 0 <= after <= self.last_decision_id():
                raise ValueError("counts decisions the journal never had")
        except (ValueError, TypeError, KeyError):
            return None, 0  # rebuilt from the decisions kept
        return snapshot, after

    def save_statistics(self, snapshot: dict[str, Any], after: int) -> None:
        """Keep the statistics as they stand after decision row ``after`` (no fsync)."""
        with self._writing(durable=False):
            self._put("statistics", json.dumps({"after": after, "snapshot": snapshot}))

    # -- frames ----------------------------------------------------------------------

    def record_frames(self, frames: Sequence[FrameRecord]) -> None:
        """Keep the lines that crossed the link, escaped as in the capture format.

        No fsync of their own (several a second): the next durable commit, a
        decision's, makes them durable with it, since the write-ahead log is
        written in order. Lines gather in the open block, sealed into one
        compressed, chained row when it completes (``wheeld.shell.journal.frames``).
        """
        if not frames:
            return
        heads = dict(self._heads)
        try:
            with self._writing(durable=False):
                self._tail.append(frames, heads)
                if heads != self._heads:
                    put_heads(self._db, heads)
        except JournalWriteError:
            self._tail.forget()
            raise
        self._heads = heads

    def _seal(self) -> None:
        heads = dict(self._heads)
        try:
            with self._writing(durable=False):
                self._tail.seal(heads)
                put_heads(self._db, heads)
        except JournalWriteError:
            self._tail.forget()
            raise
        self._heads = heads

    # -- retention ---------------------------------------------------------------------

    def pruner(self, retention: Retention) -> Pruner:
        """Retention, a batch at a time: ``pruner(...).step(now)`` until it returns 0.

        Its commits are not fsync'd: what it deleted and the anchor it moved come
        back whole after a power cut, or not at all, and the next step goes on.
        """
        return Pruner(
            self._db, retention, lambda: self._writing(durable=False), self._legacy_frames
        )

    def checkpoint_elsewhere(self) -> None:
        """Leave the write-ahead log's checkpoints to ``checkpoint_wal`` (another connection,
        in a worker thread): a commit on the event loop never pays for one."""
        self._db.execute("PRAGMA wal_autocheckpoint = 0")

    def checkpoint(self) -> None:
        """The chains as they stand are ``checked``: the next open walks only what follows.

        Every row up to here was written by this run, linked as it was written.
        """
        with self._writing(durable=False):
            put_heads(self._db, self._heads, "checked")

    # -- the outbox ----------------------------------------------------------------------

    def enqueue(self, messages: list[Outgoing]) -> None:
        """Queue messages that need no durability of their own (wheel state, table).

        Committed without an fsync: a crash of the daemon loses nothing (the
        commit is in the write-ahead log), but a power cut before the next
        durable commit can lose them. Anything that must survive that, alarms
        included, goes through ``record`` instead: the daemon journals the
        engine's alarms there, with the decisions they came with.
        """
        with self._writing(durable=False):
            for message in messages:
                outbox.enqueue(self._db, message)

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacknowledged messages in the order they were decided."""
        try:
            return outbox.pending(self._db, after, limit)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    def acknowledge(self, entry: OutboxEntry) -> None:
        """The broker has it: drop it from the outbox (and remember retained state).

        No fsync: if a crash forgets the acknowledgement, the message is published
        again, and consumers drop repeats by game id.
        """
        with self._writing(durable=False):
            outbox.acknowledge(self._db, entry)

    def supersede(self, topics: Sequence[str]) -> int:
        """Let go of what waits in the outbox on ``topics``, and of their retained state.

        For a journal another has gone on past (``Effects.superseded``): its
        game messages never went out and must not now; its retained game state
        is behind the broker's and must not be said again. Returns the entries
        dropped.
        """
        marks = ", ".join("?" * len(topics))
        with self._writing(durable=False):
            dropped: int = self._db.execute(
                f"DELETE FROM outbox WHERE topic IN ({marks})", tuple(topics)
            ).rowcount
            self._db.execute(f"DELETE FROM retained WHERE topic IN ({marks})", tuple(topics))
        return dropped

    def pending_count(self) -> int:
        """How many messages wait for the broker's acknowledgement (the outbox's depth)."""
        return int(self._read("SELECT COUNT(*) FROM outbox")[0][0])

    def retained(self) -> list[Outgoing]:
        """The last acknowledged payload of every retained topic, to republish."""
        try:
            return outbox.retained(self._db)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    def disk_bytes(self) -> int:
        """The journal's size on disk: the database and its write-ahead log."""
        size = 0
        for path in (self.path, self.path.with_name(f"{self.path.name}-wal")):
            with contextlib.suppress(OSError):
                size += path.stat().st_size
        return size

    # -- plumbing ----------------------------------------------------------------

    def _get(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return None if not rows else str(rows[0][0])

    def _put(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO state (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            if not self._opened:  # found at open: a damaged journal, said as such
                raise self._corrupt(str(exc), exc) from None
            raise JournalError(f"{self.path}: cannot read the journal: {exc}") from None

    @contextlib.contextmanager
    def _writing(self, *, durable: bool = True) -> Iterator[None]:
        """One transaction; any failure to write becomes JournalWriteError."""
        try:
            if self._db.in_transaction:
                rollback(self._db)  # a failed ROLLBACK earlier left one open
            if durable != self._durable:
                # In WAL mode FULL fsyncs the log at every commit, NORMAL leaves it to
                # the next FULL commit or checkpoint; a durable commit covers both.
                self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
                self._durable = durable
            with transaction(self._db):
                yield
        except (sqlite3.Error, OSError) as exc:
            raise JournalWriteError(
                f"{self.path}: cannot write to the journal ({exc}); nothing of this write was kept"
            ) from None
