"""When keeping something costs an fsync: decided here, and only here.

A message goes out only once what it says is in the journal, so what a
consumer may act on must also outlive a power cut: such a commit is made with
``synchronous=FULL``, on disk when it returns. That is a game's end (a
``result`` is paid out on, a ``no_spin`` voids the bets), an alarm (the
operator was told), the table opened or closed (a restart must not reopen a
closed table) and the engine's state when it changes on its own (what the
next game is judged by). An accepted command that changed the table did so
through one of these: a game voided, the table closed.

A game's start (``spinning``, ``no_more_bets``) is not fsync'd: it comes with
every launch, and should a power cut take it, the next open finds the run
not closed cleanly and continues past the reserved game ids
(``wheeld.shell.journal.marks``): the game announced and forgotten is never
reused. The rest (commands as received, frames, alarms' chain rows,
acknowledgements, wheel state, statistics, retention) is committed with
NORMAL and made durable by the next FULL commit: the write-ahead log is
written in order. A crash of the daemon alone loses none of it.

The daemon asks ``fsync_due`` of what the pipeline hands it (and flushes the
lines and commands that led to it into the same durable state); the journal
asks it of each commit it makes from effects.
"""

from __future__ import annotations

from wheeld.core.messages import OPENING_EVENTS
from wheeld.table.effects import Effects

#: The decisions that start a game, by the contract's names (as published, as journalled).
GAME_STARTS = OPENING_EVENTS


def fsync_due(effects: Effects) -> bool:
    """Whether keeping ``effects`` takes a commit on disk before any of its messages goes out."""
    if effects.alarmed or effects.table_state is not None:
        return True
    if effects.games:
        return any(game.event not in GAME_STARTS for game in effects.games)
    return effects.state is not None
