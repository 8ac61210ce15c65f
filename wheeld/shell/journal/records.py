"""What the table decided and was told: game decisions, operator commands and alarms.

The three chained records the journal keeps itself (``store.Journal`` hands
them here), written and read back. A decision is written with everything it
changes in one commit: its messages into the outbox, the engine state, where
the signed chain stands, and the game id reserved in ``game-ids``; so a
restart finds the decision and what followed from it, or neither. Commands
and alarms are chained without an fsync of their own: the next durable commit
makes them durable (``durability``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from wheeld.shell.journal.chain import insert_chained, insert_stored
from wheeld.shell.journal.codec import pack_payload, unpack_payload
from wheeld.shell.journal.durability import fsync_due
from wheeld.shell.journal.outbox import enqueue
from wheeld.table.effects import Effects

#: Decisions read at a time by ``decisions_after``.
READ_BATCH = 1000

if TYPE_CHECKING:
    from wheeld.core.engine import EngineState
    from wheeld.core.signing import ChainState
    from wheeld.shell.journal.chain import Chains, Heads
    from wheeld.shell.journal.connection import Connection
    from wheeld.shell.journal.marks import GameIds
    from wheeld.shell.journal.state import StateTable
    from wheeld.table.effects import AlarmRecord, CommandRecord, GameRecord, Outgoing


class Records:
    """The decisions, commands and alarms of an open journal."""

    def __init__(self, sql: Connection, ids: GameIds, chains: Chains, state: StateTable) -> None:
        self._sql = sql
        self._ids = ids
        self._chains = chains
        self._state = state

    # -- decisions ------------------------------------------------------------------------

    def record(
        self,
        games: list[GameRecord],
        messages: list[Outgoing],
        state: EngineState,
        chain: ChainState | None,
        *,
        alarm: bool,
        before: Callable[[Heads], None] | None = None,
    ) -> list[int]:
        """Decisions, their messages, the engine state and the chain in one commit
        (``Journal.record``), after ``before``'s rows (the lines that led to them); the
        outbox ids of the messages, in order."""
        durable = fsync_due(Effects(games=games, alarmed=alarm or not games))
        self._ids.reserve(games, state, chain)
        marking = not self._ids.run_marked
        db = self._sql.db
        with self._chains.extending(durable=durable or marking) as heads:
            if before is not None:
                before(heads)
            if marking:
                self._ids.put_run(self._sql, closed=False)
            self._ids.put_mark(self._sql)
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
            ids = [enqueue(db, message) for message in messages]
            self._state.put_engine(state)
            if chain is not None:
                self._state.put_chain(chain)
        self._ids.run_marked = True
        return ids

    def decisions_after(self, row_id: int) -> Iterator[tuple[int, str, str]]:
        """The decisions after row ``row_id``: (game id, event, payload), oldest first.

        Read ``READ_BATCH`` rows at a time: statistics counted again from every decision
        (another wheel's journal, other arcs) stream a year of them in bounded memory,
        where one read of them all held the whole table (345 MiB at 229,440 games).
        """
        while rows := self._sql.read(
            "SELECT id, game_id, event, payload FROM decisions WHERE id > ? ORDER BY id"
            f" LIMIT {READ_BATCH}",
            (row_id,),
        ):
            for _, game_id, event, payload in rows:
                yield game_id, event, unpack_payload(payload)
            row_id = rows[-1][0]

    def last_decision_id(self) -> int:
        """The row id of the last decision kept (0 for none)."""
        return self._chains.last("decisions")[0]

    # -- commands and alarms: chained, no fsync of their own ------------------------------

    def record_commands(self, commands: Sequence[CommandRecord]) -> None:
        """Operator commands, accepted or refused, with who sent them (``Journal``'s)."""
        self._chains.append(
            "commands",
            [(c.at, c.name, c.sender, c.payload, int(c.accepted), c.outcome) for c in commands],
        )

    def commands(self) -> list[tuple[float, str, str | None, str, bool, str]]:
        """Every operator command kept: (at, name, sender, payload, accepted, outcome)."""
        rows = self._sql.read(
            "SELECT at, name, sender, payload, accepted, outcome FROM commands ORDER BY id"
        )
        return [(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in rows]

    def record_alarms(
        self, alarms: Sequence[AlarmRecord], set_alerts: dict[str, dict[str, Any]] | None
    ) -> None:
        """Alarms raised, cleared and acknowledged (chained), and the alerts now set."""
        rows = [(a.at, a.code, a.state, a.payload) for a in alarms]
        with self._chains.extending(durable=False) as heads:
            for values in rows:
                insert_chained(self._sql.db, heads, "alarms", values)
            if set_alerts is not None:
                self._state.put_set_alerts(set_alerts)

    def alarms(self) -> list[tuple[float, str, str, str]]:
        """Every alarm kept: (at, code, state, payload), oldest first."""
        rows = self._sql.read("SELECT at, code, state, payload FROM alarms ORDER BY id")
        return [(r[0], r[1], r[2], r[3]) for r in rows]
