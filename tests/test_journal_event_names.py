"""Decisions on disk by the contract's names: an older journal's class names renamed at open.

The older journal is built here as an older wheeld wrote it: the same journal,
the pipeline handing it each decision's Python class name as its ``event``
(``Result``), at schema version 2.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from tests.helpers import clean_game_after_fault
from tests.test_pipeline import Table
from tests.test_verify import SIGNER, games, prune, tamper_with
from wheeld.cli import main
from wheeld.config import load
from wheeld.core.engine import EngineState
from wheeld.core.messages import EventName, GamePayload
from wheeld.core.signing import ChainState, digest
from wheeld.shell.daemon import resume_statistics
from wheeld.shell.journal import JOURNAL_FILE, Journal, JournalView, Retention
from wheeld.shell.journal.recall import recall
from wheeld.shell.journal.schema import (
    LEGACY_EVENT_NAMES,
    SCHEMA_VERSION,
    EventNames,
    transaction,
)
from wheeld.table.effects import FrameRecord, GameRecord, Outgoing

#: How an older wheeld named each event in the journal: its class's name.
CLASS_NAMES = {wire: legacy for legacy, wire in LEGACY_EVENT_NAMES.items()}
WIRE = ["spinning", "no_more_bets", "result"]


def write(state_dir: Path, messages: list[dict[str, Any]], *, legacy: bool) -> None:
    """Journal ``messages`` as the daemon does, by class names when ``legacy``."""
    journal = Journal(state_dir / JOURNAL_FILE)
    for message in messages:
        game_id, body = message["game_id"], json.dumps(message)
        event = CLASS_NAMES[message["event"]] if legacy else message["event"]
        number = message.get("number")
        journal.record_frames([FrameRecord(1000.0 + message["seq"], "<", b"$X,1*00", game_id)])
        journal.record(
            # An old journal's class names, which the type no longer allows: on purpose.
            [GameRecord(game_id, cast(EventName, event), body, number)],
            [Outgoing("t/game", body)],
            EngineState(next_game_id=game_id + 1),
            ChainState(message["seq"] + 1, digest(message)),
        )
    journal.close()


def older(state_dir: Path) -> None:
    """Make the journal in ``state_dir`` say it is of schema 2, as an older wheeld left it."""
    with contextlib.closing(sqlite3.connect(state_dir / JOURNAL_FILE)) as db:
        db.execute("PRAGMA user_version = 2")


def events(state_dir: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(state_dir / JOURNAL_FILE)) as db:
        return [row[0] for row in db.execute("SELECT event FROM decisions ORDER BY id")]


def verify(capsys: pytest.CaptureFixture[str], public_key: Path, state_dir: Path) -> str:
    status = main(["verify", "--key", str(public_key), "--state-dir", str(state_dir)])
    out = capsys.readouterr()
    assert status == 0, out
    return out.out.strip()


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    path = tmp_path / "signing.pub"
    path.write_bytes(SIGNER.public_pem())
    return path


def test_the_pipeline_hands_the_journal_the_contracts_names() -> None:
    """What the journal keeps as ``event`` is the payload's own, whatever the core's classes
    are called: the names the contract's models allow."""
    contract = {model.model_fields["event"].default for model in GamePayload.__args__}
    table = Table()
    table.launch()
    table.command("close", b'{"operator": "boss"}')  # the game voided: a no_spin
    table.command("open", b'{"operator": "boss"}')
    clean_game_after_fault(table.wheel, "17")
    table.feed()
    records = table.effects.games
    assert [record.event for record in records] == ["spinning", "no_spin", *WIRE]
    assert all(record.event == json.loads(record.payload)["event"] for record in records)
    assert {record.event for record in records} == contract


def test_the_older_journal_is_what_an_older_wheeld_wrote(tmp_path: Path, public_key: Any) -> None:
    write(tmp_path, games(2), legacy=True)
    older(tmp_path)
    assert events(tmp_path) == ["Spinning", "NoMoreBets", "Result"] * 2
    # Its chain holds as written, and it reads (read-only readers never upgrade it).
    with JournalView(tmp_path / JOURNAL_FILE) as view:
        assert all(not walked.breaks for walked in view.walks().values())
        recalled = recall(view, 2, None)
    assert [[event["event"] for event in game.events] for game in recalled] == [WIRE, WIRE]


def test_an_older_journal_is_renamed_at_open_and_every_reader_reads_it(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write(tmp_path, games(4), legacy=True)
    older(tmp_path)
    journal = Journal(tmp_path / JOURNAL_FILE)
    try:
        assert journal.upgraded and journal.chain_problem is None and journal.warnings == []
        assert [event for _, event, _ in journal.decisions()] == WIRE * 4
        config = tmp_path / "wheeld.toml"
        config.write_text("[signing]\nrequired = false\n")
        statistics = resume_statistics(load(config, {}), journal)
        assert statistics.snapshot()["whole"]["results"] == 4
    finally:
        journal.close()
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT 1 FROM state WHERE key = 'renaming_events'").fetchone() is None
    assert verify(capsys, public_key, tmp_path) == f"{tmp_path}: intact"
    with JournalView(tmp_path / JOURNAL_FILE) as view:
        recalled = recall(view, 4, None)
    assert [game.game_id for game in recalled] == [1, 2, 3, 4]
    assert [event["event"] for event in recalled[-1].events] == WIRE
    exported = tmp_path / "audit.jsonl"
    argv = ["export", "--state-dir", str(tmp_path), "--out", str(exported)]
    assert main([*argv, "--key", str(public_key)]) == 0
    capsys.readouterr()
    assert main(["verify", "--key", str(public_key), str(exported)]) == 0
    # A reopen has nothing left to rename, and the chain still holds.
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert not journal.upgraded and journal.chain_problem is None
    journal.close()


def test_a_journal_an_older_wheeld_began_and_this_one_went_on_with(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    messages = games(4)
    write(tmp_path, messages[:6], legacy=True)
    write(tmp_path, messages[6:], legacy=False)  # schema 2, the contract's names
    older(tmp_path)
    assert events(tmp_path) == ["Spinning", "NoMoreBets", "Result"] * 2 + WIRE * 2
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.upgraded and journal.chain_problem is None
    journal.close()
    assert events(tmp_path) == WIRE * 4
    assert verify(capsys, public_key, tmp_path) == f"{tmp_path}: intact"


def test_a_journal_of_the_contracts_names_is_left_as_it_is(tmp_path: Path) -> None:
    write(tmp_path, games(2), legacy=False)
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as db:
        before = db.execute("SELECT id, event, hash FROM decisions ORDER BY id").fetchall()
    older(tmp_path)
    Journal(tmp_path / JOURNAL_FILE).close()
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as db:
        assert db.execute("SELECT id, event, hash FROM decisions ORDER BY id").fetchall() == before


def breaks(state_dir: Path) -> list[str]:
    with JournalView(state_dir / JOURNAL_FILE) as view:
        return [brk.describe() for walked in view.walks().values() for brk in walked.breaks]


def test_renaming_keeps_a_break_where_it_was_and_makes_none(tmp_path: Path) -> None:
    write(tmp_path, games(4), legacy=True)
    tamper_with(
        tmp_path,
        "UPDATE decisions SET payload = edit(payload, '17', '18') WHERE id = 6",
        "DELETE FROM decisions WHERE id = 9",
    )
    older(tmp_path)
    found = breaks(tmp_path)
    assert found == [
        "decisions row 6 (game 2): hash does not match: the row was edited, moved,"
        " or one before it changed",
        "decisions row 10 (game 4): row 9 before it missing (deleted)",
    ]
    Journal(tmp_path / JOURNAL_FILE).close()
    assert events(tmp_path) == (WIRE * 4)[:8] + (WIRE * 4)[9:]
    assert breaks(tmp_path) == found


def test_a_segment_begun_before_the_renaming_still_acknowledges_its_break(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, games(4), legacy=True)
    tamper_with(
        tmp_path,
        "UPDATE decisions SET payload = edit(payload, '17', '18') WHERE id = 6",
        "DELETE FROM state WHERE key = 'checked'",  # walked whole at the next open
    )
    older(tmp_path)
    with monkeypatch.context() as patched:  # an older wheeld's open: a break, a segment
        patched.setattr(EventNames, "rename", lambda self: 0)
        journal = Journal(tmp_path / JOURNAL_FILE)
        assert journal.chain_problem is not None and "decisions row 6" in journal.chain_problem
        journal.close()
    older(tmp_path)
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as db:
        anchored = db.execute("SELECT after_id, hash FROM anchors").fetchall()
    assert [after for after, _ in anchored] == [12]
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.upgraded and journal.chain_problem is None
    journal.close()
    assert events(tmp_path) == WIRE * 4
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as db:
        renamed = db.execute("SELECT after_id, hash FROM anchors").fetchall()
    assert [after for after, _ in renamed] == [12] and renamed != anchored  # the row's new hash
    with JournalView(tmp_path / JOURNAL_FILE) as view:
        walked = view.walks()["decisions"]
    assert [(brk.row_id, brk.acknowledged) for brk in walked.breaks] == [(6, True)]


def test_renaming_goes_on_from_an_anchor_retention_left(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write(tmp_path, games(5), legacy=True)
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert prune(journal, Retention(keep_games=2), now=0.0) > 0  # games 1-3 go
    journal.close()
    older(tmp_path)
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.upgraded and journal.chain_problem is None
    assert [game_id for game_id, _, _ in journal.decisions()] == [4, 4, 4, 5, 5, 5]
    journal.close()
    assert verify(capsys, public_key, tmp_path) == f"{tmp_path}: intact"


def test_renaming_a_batch_at_a_time_goes_on_after_a_crash(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write(tmp_path, games(4), legacy=True)
    older(tmp_path)
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)) as db:
        renaming = EventNames(db, tmp_path / JOURNAL_FILE, batch=5)
        start = renaming._start()
        assert start is not None
        with transaction(db):  # one batch committed, then the process dies
            renaming._step(*start, renaming._anchors())
    assert (
        events(tmp_path)
        == [*WIRE, "spinning", "no_more_bets", "Result"]
        + [
            "Spinning",
            "NoMoreBets",
            "Result",
        ]
        * 2
    )
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.upgraded and journal.chain_problem is None
    journal.close()
    assert events(tmp_path) == WIRE * 4
    assert verify(capsys, public_key, tmp_path) == f"{tmp_path}: intact"
