"""When a commit is fsync'd: ``fsync_due``, the one place that decides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheeld.core.engine import EngineState
from wheeld.core.messages import (
    EventName,
    NoMoreBetsPayload,
    NoSpinPayload,
    ResultPayload,
    SpinningPayload,
)
from wheeld.shell.journal import Journal, fsync_due
from wheeld.shell.journal.durability import GAME_STARTS
from wheeld.table.effects import Effects, GameRecord

STATE = EngineState(next_game_id=3, open_game=2)


def game(event: EventName) -> GameRecord:
    return GameRecord(2, event, "{}")


def test_a_games_starts_are_the_contracts_names() -> None:
    assert (
        GAME_STARTS
        == {
            SpinningPayload.model_fields["event"].default,
            NoMoreBetsPayload.model_fields["event"].default,
        }
        == {"spinning", "no_more_bets"}
    )


@pytest.mark.parametrize(
    ("effects", "due"),
    [
        (Effects(), False),
        (Effects(games=[game("spinning")], state=STATE), False),
        (Effects(games=[game("no_more_bets")], state=STATE), False),
        (Effects(games=[game("spinning"), game("no_more_bets")], state=STATE), False),
        (Effects(games=[game(ResultPayload.model_fields["event"].default)], state=STATE), True),
        (Effects(games=[game(NoSpinPayload.model_fields["event"].default)], state=STATE), True),
        (Effects(games=[game("spinning"), game("no_spin")], state=STATE), True),
        (Effects(games=[game("spinning")], state=STATE, alarmed=True), True),
        (Effects(alarmed=True), True),
        (Effects(table_state="closed"), True),  # a command that closed the table
        (Effects(state=STATE), True),  # the engine's state on its own
    ],
    ids=[
        "nothing",
        "spinning",
        "no_more_bets",
        "both starts",
        "result",
        "no_spin",
        "a start and an end",
        "a start with an alarm",
        "an alarm",
        "the table closed",
        "the engine state alone",
    ],
)
def test_what_is_fsynced(effects: Effects, due: bool) -> None:
    assert fsync_due(effects) is due


def synchronous(journal: Journal) -> str:
    mode = journal._db.execute("PRAGMA synchronous").fetchone()[0]
    return {1: "NORMAL", 2: "FULL"}[mode]


def test_the_journal_asks_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite3", boot_id="boot")
    try:
        journal.record([game("spinning")], [], STATE)  # the run's first commit: fsync'd anyway
        journal.record([game("no_more_bets")], [], STATE)
        assert synchronous(journal) == "NORMAL"
        journal.record([game("no_more_bets")], [], STATE, alarm=True)
        assert synchronous(journal) == "FULL"
        journal.record([game("spinning")], [], STATE)
        journal.record([], [], STATE)  # messages alone are an alarm's
        assert synchronous(journal) == "FULL"
        journal.record([game("spinning")], [], STATE)
        journal.save_table_state("closed")
        assert synchronous(journal) == "FULL"
        journal.record([game("spinning")], [], STATE)
        journal.save_state(STATE)
        assert synchronous(journal) == "FULL"
    finally:
        journal.close()
