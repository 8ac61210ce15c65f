"""What a start resumes from, as the journal's ``state`` table keeps it.

The engine's state, where the signed message chain stands, the table open
or closed and whose journal it is, the alerts set, the controller the table
was taken over from, the statistics' running aggregates, and the journal's
``epoch``: a random id made with it, carried in every game message, so
``(table, epoch, seq)`` never repeats even when a lost journal and a broker
that forgot both restart the ids. Each is one row, read once at a start;
what a decision changes is written in the decision's own commit
(``Journal.record``).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wheeld.core.engine import EngineState
from wheeld.core.signing import ChainState, digest
from wheeld.shell.journal.chain import FLOOR
from wheeld.shell.journal.codec import unpack_payload
from wheeld.shell.journal.durability import fsync_due
from wheeld.shell.journal.errors import (
    JournalCorrupt,
    JournalError,
    JournalWriteError,
    another_table,
)
from wheeld.table.effects import Effects

if TYPE_CHECKING:
    from collections.abc import Callable

    from wheeld.shell.journal.connection import Connection
    from wheeld.shell.journal.marks import GameIds
    from wheeld.table.effects import TableState

#: What the write probe writes (``StateTable.writable``): with its pages' overhead (some
#: 145 KiB of write-ahead log), more than a game's commits add to it (measured: 25 to
#: 60 KiB for one message; the daemon's, with the history and statistics, more), so
#: room for the probe is room for a game.
PROBE_BYTES = 128 * 1024
#: What an epoch is: URL-safe text, 64 bits at least (``secrets.token_urlsafe(12)``: 16).
_EPOCH = re.compile(r"[A-Za-z0-9_-]{11,64}")


class StateTable:
    """The rows a start resumes from; each write a commit of its own unless said otherwise."""

    def __init__(self, sql: Connection, ids: GameIds, clock: Callable[[], float]) -> None:
        self._sql = sql
        self._ids = ids
        #: The host's wall time, the daemon's clock's (``HostClock.wall``): a floor's time.
        self._clock = clock

    def epoch(self, *, had_decisions: bool, warnings: list[str]) -> str:
        """The journal's epoch, made now when it has none (a new journal, or an older
        wheeld's: ``had_decisions`` and no epoch is one that lost it, said in ``warnings``)."""
        stored = self._sql.get("epoch")
        if stored is not None:
            if not _EPOCH.fullmatch(stored):
                raise self._sql.corrupt(f"its epoch {stored[:40]!r} is malformed")
            return stored
        if had_decisions:
            warnings.append(
                f"{self._sql.path}: the journal's epoch was gone: its messages from now on are"
                " in a new one"
            )
        epoch = secrets.token_urlsafe(12)  # 96 random bits
        try:
            with self._sql.writing():
                self._sql.put("epoch", epoch)
        except JournalWriteError as exc:
            raise JournalError(str(exc)) from None
        return epoch

    # -- the engine ------------------------------------------------------------------

    def engine(self) -> EngineState | None:
        """The engine state stored, or None."""
        value = self._sql.get("engine")
        if value is None:
            return None
        try:
            return EngineState.from_dict(json.loads(value))
        except json.JSONDecodeError:
            raise self._sql.corrupt("stored engine state is not JSON") from None
        except ValueError as exc:
            raise self._sql.corrupt(str(exc)) from None

    def load_engine(self) -> EngineState | None:
        """The engine state to resume from: the last run's, never behind ``game-ids``.

        None on a first start (no journal state and no game id ever used).
        """
        stored = self.engine()
        state = stored
        if state is None:
            if self._ids.file.high_water == 0:
                return None
            state = EngineState()
        after = self._ids.next_after(stored)
        if state.next_game_id <= after:
            state = replace(state, next_game_id=after + 1)
        return state

    def put_engine(self, state: EngineState) -> None:
        """Store the engine state (inside the transaction it belongs to)."""
        self._sql.put("engine", json.dumps(state.to_dict(), sort_keys=True))

    def save_engine(self, state: EngineState) -> None:
        """Store the engine state on its own (no decision came with the change)."""
        self._ids.reserve([], state)
        with self._sql.writing(durable=fsync_due(Effects(state=state))):
            self.put_engine(state)
            self._ids.put_mark(self._sql)

    # -- the message chain --------------------------------------------------------------

    def load_chain(self) -> ChainState:
        """Where the message chain stands: the next ``seq`` and ``prev`` (a fresh chain if none).

        Never behind a message already published: the stored state, the last
        signed payload in the journal (should the state row be gone), and, when
        the journal was lost or is older than ``game-ids``, past every seq ever
        reserved there (a new segment: ``prev`` null, a gap a verifier shows).
        """
        chain = self._stored_chain()
        last = self._sql.read("SELECT payload FROM decisions ORDER BY id DESC LIMIT 1")
        if last:
            try:
                payload = json.loads(unpack_payload(last[0][0]))
                seq = payload.get("seq") if isinstance(payload, dict) else None
                if type(seq) is int and (chain is None or chain.seq <= seq):
                    chain = ChainState(seq + 1, digest(payload))
            except (ValueError, TypeError):
                pass  # an unreadable payload is the hash chain's to report
        reserved = self._ids.file.seq_reserved
        if self._ids.lost and reserved > (chain.seq if chain is not None else 1):
            # The chain jumps past every seq ever reserved, never where a consumer may
            # hold one: kept as a floor, for verify to tell it from a gap.
            self.record_floor(reserved - 1, "", self._clock())
            return ChainState(reserved, None)
        return chain if chain is not None else ChainState()

    def _stored_chain(self) -> ChainState | None:
        value = self._sql.get("chain")
        if value is None:
            return None
        try:
            stored = json.loads(value)
            if not isinstance(stored, dict):
                raise ValueError("stored chain state is not an object")
            return ChainState.from_dict(stored)
        except json.JSONDecodeError:
            raise self._sql.corrupt("stored chain state is not JSON") from None
        except ValueError as exc:
            raise self._sql.corrupt(str(exc)) from None

    def put_chain(self, chain: ChainState) -> None:
        """Store where the chain stands (inside the commit of the messages that moved it)."""
        self._sql.put("chain", json.dumps(chain.to_dict(), sort_keys=True))

    def writable(self, now: float, probe_bytes: int = PROBE_BYTES) -> bool:
        """Whether durable writes work again (at host time ``now``): tries a write of
        each kind, as large as a game's commit.

        For the daemon to poll while writes are failing. A tiny write is no proof: under
        a file-size limit (``ulimit -f``) the write-ahead log had room for one page and
        not for the next game, and the fault cleared and came back every few seconds. So
        the probe writes ``probe_bytes`` (more when ``JournalFault`` asks) in its commit
        and takes them back in the same one: it leaves only a ``write_probe`` row (the
        time of the last success) in the state table.
        """
        db = self._sql.db
        # Freed pages zeroed, so written: without it SQLite may skip pages a commit
        # both took and gave back, and the probe would prove nothing.
        (secure,) = db.execute("PRAGMA secure_delete").fetchone()
        db.execute("PRAGMA secure_delete = ON")
        try:
            with self._sql.writing():
                self._sql.put("write_probe", repr(now))
                db.execute(
                    "INSERT INTO state (key, value) VALUES ('write_probe_room', zeroblob(?))",
                    (probe_bytes,),
                )
                db.execute("DELETE FROM state WHERE key = 'write_probe_room'")
            self._ids.file.write(self._ids.file.high_water)
        except JournalWriteError:
            return False
        finally:
            db.execute(f"PRAGMA secure_delete = {int(secure)}")
        return True

    def record_floor(self, seq: int, digest_: str, at: float) -> None:
        """The message chain goes on past ``seq`` (``digest_``), another journal's message.

        Kept as an anchor of the ``messages`` chain: ``wheeld verify`` tells the
        jump it makes from a gap. No fsync: the alarm it comes with has one.
        """
        with self._sql.writing(durable=False):
            self._sql.db.execute(
                "INSERT INTO anchors (at, chain, after_id, hash, reason) VALUES (?, ?, ?, ?, ?)",
                (at, "messages", seq, digest_, FLOOR),
            )

    def record_takeover(
        self, taken_from: tuple[str, int, str], history: list[str] | None = None
    ) -> None:
        """The marker of another controller this journal took the table over from (its
        epoch, seq or game id, event): read again, at a reconnect or the next start, it
        changes nothing. No fsync: the alarm it comes with has one.

        ``history``: the table's numbers from then on (latest first), kept with it, and
        with the last game id of this journal's own results then: the history a start
        rebuilds is the results after that one, then these (``history``).
        """
        with self._sql.writing(durable=False):
            self._sql.put("taken_from", json.dumps(list(taken_from)))
            if history is not None:
                ((after,),) = self._sql.read("SELECT COALESCE(MAX(game_id), 0) FROM results")
                taken = {"after": after, "numbers": history}
                self._sql.put("taken_history", json.dumps(taken))

    def history(self, length: int) -> list[str]:
        """The last ``length`` winning numbers the table shows, newest first: this journal's
        results, and since a takeover, those after it, then the ones it took over."""
        try:
            taken = json.loads(self._sql.get("taken_history") or "null")
            after, numbers = (0, []) if taken is None else (taken["after"], taken["numbers"])
        except (ValueError, TypeError, KeyError):  # unreadable: this journal's results only
            after, numbers = 0, []
        strings = isinstance(numbers, list) and all(isinstance(n, str) for n in numbers)
        if type(after) is not int or not strings:
            after, numbers = 0, []
        rows = self._sql.read(
            "SELECT number FROM results WHERE game_id > ? ORDER BY game_id DESC LIMIT ?",
            (after, length),
        )
        return ([row[0] for row in rows] + numbers)[:length]

    def taken_from(self) -> tuple[str, int, str] | None:
        """The marker this journal last took the table over from; None if never (or unreadable)."""
        try:
            epoch, number, event = json.loads(self._sql.get("taken_from") or "null")
        except (ValueError, TypeError):
            return None
        if isinstance(epoch, str) and type(number) is int and isinstance(event, str):
            return epoch, number, event
        return None

    # -- the table ----------------------------------------------------------------------

    def table(self) -> TableState:
        """Whether the operator last opened or closed the table; open until told."""
        value = self._sql.get("table")
        if value is None or value == "open":
            return "open"
        if value == "closed":
            return "closed"
        raise self._sql.corrupt(f"stored table state {value!r} is neither open nor closed")

    def save_table(self, state: TableState) -> None:
        """Store the table's open/closed state, durably: a restart must not reopen it."""
        with self._sql.writing(durable=fsync_due(Effects(table_state=state))):
            self._sql.put("table", state)

    def claim(self, table: str) -> None:
        """Mark the journal as ``table``'s; refuse it (JournalCorrupt) when another table's.

        A journal carried into another table's state directory would go on with
        that table's game ids and chain: two tables, one chain, forked.
        """
        owner = self._sql.get("table_id")
        if owner is not None:
            if owner != table:
                raise JournalCorrupt(another_table(self._sql.path, owner, table))
            return
        with self._sql.writing(durable=False):
            self._sql.put("table_id", table)

    def set_alerts(self) -> dict[str, dict[str, Any]]:
        """The alerts and faults the last run left set (code -> since, detail, ack); {} if none.

        Unreadable, it is forgotten rather than refused: the alerts are judged afresh.
        """
        try:
            stored = json.loads(self._sql.get("set_alerts") or "{}")
        except ValueError:
            return {}
        if not isinstance(stored, dict):
            return {}
        return {code: value for code, value in stored.items() if isinstance(value, dict)}

    def put_set_alerts(self, set_alerts: dict[str, dict[str, Any]]) -> None:
        """Store the alerts now set (inside the commit of the alarms that changed them)."""
        self._sql.put("set_alerts", json.dumps(set_alerts, sort_keys=True))

    # -- the statistics' running aggregates ---------------------------------------------

    def statistics(self, last_decision: int) -> tuple[dict[str, Any] | None, int]:
        """The statistics snapshot kept, and the last decision row it counts (0: none)."""
        value = self._sql.get("statistics")
        if value is None:
            return None, 0
        try:
            stored = json.loads(value)
            after = stored["after"]
            snapshot = stored["snapshot"]
            if type(after) is not int or not isinstance(snapshot, dict):
                raise ValueError("malformed")
            if not 0 <= after <= last_decision:
                raise ValueError("counts decisions the journal never had")
        except (ValueError, TypeError, KeyError):
            return None, 0  # rebuilt from the decisions kept
        return snapshot, after

    def save_statistics(self, snapshot: dict[str, Any], after: int) -> None:
        """Keep the statistics as they stand after decision row ``after`` (no fsync)."""
        with self._sql.writing(durable=False):
            self._sql.put("statistics", json.dumps({"after": after, "snapshot": snapshot}))
