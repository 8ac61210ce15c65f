"""``recall``: the last games with their events and serial lines, read from the journal.

Read in a worker thread with a connection of its own (indexed, a few games),
at most ``RECALLS_AT_ONCE`` at a time: the loop that decides games goes on
meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wheeld.core.commands import CommandError, OperatorCommand, Recall, named_operator, parse
from wheeld.shell.command_listener import RawJSON
from wheeld.shell.journal import JournalError, JournalView
from wheeld.table.effects import CommandRecord, Effects

#: Recalls read at once; the others wait their turn.
RECALLS_AT_ONCE = 2


class RecallDesk:
    """Answers ``recall`` and journals that it did (or why it did not)."""

    def __init__(self, *, log: Any, journal_path: Path, apply: Callable[[Effects], None]) -> None:
        self._log = log
        self._path = journal_path
        self._apply = apply
        self._reading = asyncio.Semaphore(RECALLS_AT_ONCE)

    async def answer(self, command: OperatorCommand, now: float) -> dict[str, Any]:
        """The reply (``schema_version`` is the caller's to add)."""
        text = command.payload[:2000].decode("utf-8", "replace")
        try:
            asked = parse(command)
            assert isinstance(asked, Recall)
            async with self._reading:
                games = await asyncio.to_thread(self._read_games, asked)
            reply: dict[str, Any] = {"ok": True, "games": games}
            record = CommandRecord(now, command.name, asked.operator, text, True, "recalled")
        except (CommandError, JournalError) as exc:
            reply = {"ok": False, "error": str(exc)}
            sender = named_operator(command)
            record = CommandRecord(now, command.name, sender, text, False, str(exc))
            self._log.warning(
                "command refused", command=command.name, sender=sender, error=str(exc)
            )
        self._apply(Effects(commands=[record]))
        return reply

    def _read_games(self, asked: Recall) -> RawJSON:
        """The games asked for, as the reply's JSON array, written here in the worker
        thread a game at a time (the loop takes the GIL back between them)."""
        # Imported at the first recall, not on the daemon's way to READY.
        from wheeld.shell.journal.recall import recall

        with JournalView(self._path) as view:
            games = recall(view, asked.last, asked.game_id)
        return RawJSON("[" + ",".join(json.dumps(game.to_json()) for game in games) + "]")
