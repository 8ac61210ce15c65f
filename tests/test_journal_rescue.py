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
from wheeld.shell.journal.connection import checkpoint_wal
from wheeld.shell.journal.rescue import copy_out


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
    """The new file is left whole: found by a fresh-eyes attack, the deleted journal's log
    stayed beside it and SQLite replayed it into the new file at the next start (a
    "corrupt" journal, exit 65, the new file overwritten)."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.rename(tmp_path / "moved-away")
    other = sqlite3.connect(tmp_path / "other.sqlite3")
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE other (x)")
    other.executemany("INSERT INTO other VALUES (?)", [(n,) for n in range(1000)])
    other.commit()
    other.close()
    (tmp_path / "other.sqlite3").rename(path)
    assert journal.file.lost() == f"{path} was replaced by another file under the running daemon"
    play(journal, 2)
    said: list[str] = []
    journal.close(tell=said.append)
    (line,) = said
    kept = Path(line.split(" is kept at ", 1)[1].split(": ", 1)[0])
    assert kept.name.startswith(f"{JOURNAL}.rescued-") and kept.parent == path.parent, line
    assert line.endswith("stop wheeld and move it back to keep its games")
    assert not path.with_name(f"{JOURNAL}-wal").exists(), "the deleted journal's log is gone"
    with sqlite3.connect(path) as again:
        assert again.execute("SELECT COUNT(*) FROM other").fetchone() == (1000,)
    assert _results(kept) == [1, 2]


def test_a_journal_emptied_under_the_daemon_is_said_and_its_log_not_deleted(
    tmp_path: Path,
) -> None:
    """Found by a fresh-eyes attack: ``: > journal.sqlite3`` kept the inode, went unnoticed,
    and the WAL job's checkpoint (SQLite opening an empty database) deleted the live log."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.write_bytes(b"")
    assert journal.file.lost() == f"{path} was emptied under the running daemon"
    log = path.with_name(f"{JOURNAL}-wal")
    assert log.exists()
    assert checkpoint_wal(path) == 0
    assert log.exists(), "no checkpoint opens an emptied journal"
    said: list[str] = []
    journal.close(tell=said.append)
    assert said == [
        f"{path} was emptied under the running daemon: its pages are gone, nothing to copy"
        " out; the next start begins a new journal, game ids going on from game-ids"
    ]


def test_a_copy_is_named_whole_only_once_it_is(tmp_path: Path) -> None:
    """A copy killed midway is ``.rescue`` (never opened, replaced by the next rescue); a
    whole one is ``.rescued-<time>``, found beside the journal even if its put-back never
    came."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.unlink()
    said: list[str] = []
    steps: list[str] = []
    whole = copy_out(journal._db, path, steps.append)
    assert whole.name.startswith(f"{JOURNAL}.rescued-")
    assert not path.with_name(f"{JOURNAL}.rescue").exists()
    assert steps[0] == "copying the deleted journal back"
    assert steps[-1] == "copying the deleted journal back: syncing the copy"
    with sqlite3.connect(whole) as copied:
        assert copied.execute("SELECT game_id FROM decisions").fetchall() == [(1,)]
    journal.close(tell=said.append)


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
