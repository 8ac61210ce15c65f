"""An operator's commands carried out on a table: declare a no-spin, open or close the
table, acknowledge a fault or an alert. Each is journaled with its sender, refused
ones too; reading the journal (``recall``) is the daemon's, not the table's."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from wheeld.core.commands import (
    Acknowledge,
    CommandError,
    DeclareNoSpin,
    OperatorCommand,
    SetTable,
    named_operator,
    parse,
)
from wheeld.core.game import Decision, Spinning
from wheeld.table.effects import CommandRecord, Effects

if TYPE_CHECKING:
    from wheeld.table.pipeline import TablePipeline

#: How much of a command's payload the journal keeps.
MAX_JOURNALED_COMMAND = 2000
#: The note a spin launched while the table is closed is voided with.
CLOSED_TABLE_NOTE = "table closed"


class Operator:
    """What an operator may ask of one table."""

    def __init__(self, table: TablePipeline) -> None:
        self.table = table

    def carry_out(
        self, command: OperatorCommand, now: float
    ) -> tuple[dict[str, Any], Effects, bool]:
        """Judge and carry out ``command``: the reply, the effects, and whether it was accepted."""
        out = Effects()
        text = command.payload[:MAX_JOURNALED_COMMAND].decode("utf-8", "replace")
        try:
            asked = parse(command)
            if isinstance(asked, DeclareNoSpin):
                reply = self._no_spin(asked, now, out)
            elif isinstance(asked, SetTable):
                reply = self._open_or_close(asked, now, out)
            elif isinstance(asked, Acknowledge):
                out.extend(self.acknowledge(asked.alert, asked.operator, now))
                reply = {"ok": True, "alert": asked.alert, "operator": asked.operator}
            else:  # reading the journal is the shell's: the daemon answers recall itself
                raise CommandError("recall is answered by the daemon, not the table")
        except CommandError as refusal:
            reason = str(refusal)
            # Refused, it is journaled with whom it names all the same.
            sender = named_operator(command)
            out.commands.append(CommandRecord(now, command.name, sender, text, False, reason))
            out.log("warning", "command refused", command=command.name, sender=sender, error=reason)
            return {"ok": False, "error": reason}, out, False
        who = asked.operator
        out.commands.append(CommandRecord(now, command.name, who, text, True, json.dumps(reply)))
        return reply, out, True

    def acknowledge(self, code: str, operator: str, now: float) -> Effects:
        """An operator acknowledges a fault or alert that is set; CommandError otherwise."""
        table = self.table
        out = Effects()
        book = table.alerts.book if code in table.alerts.book else table.faults
        known = ", ".join(sorted(table.set_codes())) or "none"
        table.record.said(book.acknowledge(code, operator, now, known=known), out)
        return out

    def _no_spin(self, asked: DeclareNoSpin, now: float, out: Effects) -> dict[str, Any]:
        table = self.table
        if table.journal_failed:
            raise CommandError("the journal is unwritable: no game is being decided")
        open_game = table.engine.game_in_progress
        if open_game is None:
            raise CommandError("no game in progress")
        if asked.game_id is not None and asked.game_id != open_game:
            # A command queued while we were away must not void a later game.
            raise CommandError(f"game {asked.game_id} is not in progress (game {open_game} is)")
        out.log(
            "warning",
            "no spin declared",
            game_id=open_game,
            note=asked.note,
            operator=asked.operator,
        )
        self._void(asked.note, now, out)
        return {"ok": True, "game_id": open_game}

    def _open_or_close(self, asked: SetTable, now: float, out: Effects) -> dict[str, Any]:
        table = self.table
        table.table_state = "open" if asked.open else "closed"
        if not asked.open and not table.journal_failed:
            # A game still running when the table closes settles nothing either.
            self._void(CLOSED_TABLE_NOTE, now, out)
        # "anunciar las tres (3) últimas lanzadas" on closing.
        last = list(table.history)[:3]
        announcement = table.announce.table_state(table.table_state, last, now)
        out.messages.append(table.announce.table_message(announcement))
        out.log(
            "info",
            f"table {table.table_state}",
            last_numbers=announcement["last_numbers"],
            operator=asked.operator,
        )
        out.table_state = table.table_state
        return {"ok": True, **announcement}

    def _void(self, note: str, now: float, out: Effects) -> None:
        """The game in progress, if any, voided with ``note``; the session told."""
        table = self.table
        decisions = table.engine.declare_no_spin(note, now)
        table.record.decide(decisions, out)
        table.session.after_decisions(decisions, now, out)

    def closed_table(self, decisions: list[Decision], now: float) -> list[Decision]:
        """While the table is closed a spin settles nothing: every launch is voided at once."""
        out: list[Decision] = []
        for decision in decisions:
            out.append(decision)
            if isinstance(decision, Spinning):
                out += self.table.engine.declare_no_spin(CLOSED_TABLE_NOTE, now)
        return out
