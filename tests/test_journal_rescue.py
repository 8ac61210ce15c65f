"""A journal deleted or replaced under the running daemon: noticed, and put back whole.

SQLite goes on writing to a file whose name was taken away; every game recorded
after the ``rm`` would go with it at the close. The daemon notices at the WAL
job's turn and stops; the close copies the open file back to its path."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_jobs import _parts
from tests.test_journal import JOURNAL, play
from wheeld.shell.jobs.wal import JournalLost, WalCheckpointJob
from wheeld.shell.journal import Journal, JournalError


def _results(path: Path) -> list[int]:
    journal = Journal(path)
    try:
        assert not journal.warnings, journal.warnings
        return [game_id for game_id, _, _ in journal.decisions()]
    finally:
        journal.close()


def test_a_journal_deleted_under_the_daemon_is_put_back_with_every_game(tmp_path: Path) -> None:
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    assert journal.file.lost() is None
    path.unlink()
    assert journal.file.lost() == f"{path} was deleted under the running daemon"
    play(journal, 2)  # recorded in the deleted file: it must not go with it
    said: list[str] = []
    working: list[str] = []
    journal.close(tell=said.append, working=working.append)
    assert said == [f"the journal, copied out of the open file, is back at {path}"]
    assert working and working[-1].startswith("copying the deleted journal back: "), working
    assert _results(path) == [1, 2]
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(JOURNAL)) == [JOURNAL]


def test_a_journal_replaced_under_the_daemon_is_kept_beside_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.rename(tmp_path / "moved-away")
    path.write_bytes(b"someone else's file")
    assert journal.file.lost() == f"{path} was replaced by another file under the running daemon"
    play(journal, 2)
    said: list[str] = []
    journal.close(tell=said.append)
    (line,) = said
    kept = Path(line.rsplit(" ", 1)[1])
    assert kept.name.startswith(f"{JOURNAL}.rescued-") and kept.parent == path.parent
    assert path.read_bytes() == b"someone else's file", "the new file is left as it is"
    assert _results(kept) == [1, 2]


def test_a_journal_in_place_is_closed_as_ever(tmp_path: Path) -> None:
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    said: list[str] = []
    journal.close(tell=said.append)
    assert said == []
    assert _results(path) == [1]


def test_retention_never_makes_a_new_file_where_the_journal_was(tmp_path: Path) -> None:
    """Found while building the rescue: the pruner's connection, opened after the
    ``rm``, made an empty journal at the path, and the copy had to go beside it."""
    from wheeld.shell.journal import Retention

    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.unlink()
    pruner = journal.pruner(Retention())
    with pytest.raises((JournalError, sqlite3.Error)):
        pruner.step(0.0)
    pruner.close()
    assert not path.exists()
    journal.close()
    assert _results(path) == [1]


def _job(lost: Callable[[], str | None], broke: list[Exception]) -> WalCheckpointJob:
    def guard(action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:
            broke.append(exc)

    journal = SimpleNamespace(file=SimpleNamespace(lost=lost), path=Path("nowhere"))
    return WalCheckpointJob(_parts(journal=journal, guard=guard))


async def test_the_wal_job_stops_the_daemon_when_the_journal_is_lost() -> None:
    broke: list[Exception] = []
    lost: list[str | None] = [None]
    job = _job(lambda: lost[0], broke)
    lost[0] = "journal.sqlite3 was deleted under the running daemon"
    job.tick(1000.0)
    await asyncio.wait_for(job.stopping(), timeout=10)
    (error,) = broke
    assert isinstance(error, JournalLost)
    assert str(error) == (
        "journal.sqlite3 was deleted under the running daemon: stopping; the open journal"
        " is put back at its close"
    )
