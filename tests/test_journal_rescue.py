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

from tests.test_jobs import _parts
from tests.test_journal import JOURNAL, play
from wheeld.shell.jobs.wal import JournalLost, WalCheckpointJob
from wheeld.shell.journal import Journal, Retention
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
        f"{path} was emptied under the running daemon: nothing to copy out; the log's pages"
        " are written back into it at the close, and the next start opens it if that made"
        " it whole, else says to move it aside (game ids going on from game-ids)"
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
    pruner = journal.pruner(Retention(keep_games=0))
    assert pruner.step(0.0) == 0, "a run stops once the path names no journal of the daemon's"
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
        "journal.sqlite3 was deleted under the running daemon: stopping; the close says"
        " what became of the journal"
    )


def test_a_journal_moved_away_under_the_daemon_is_said_where_it_is(tmp_path: Path) -> None:
    """Renamed, or its state directory moved (found by a fresh-eyes attack: "could not be
    copied out: the games it held go with it", of a journal whole elsewhere)."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    moved = tmp_path / "state" / "journal.old"
    path.rename(moved)
    play(journal, 2)
    said: list[str] = []
    journal.close(tell=said.append)
    assert said == [
        f"{path} was moved to {moved} under the running daemon: it is whole there; stop"
        f" wheeld and move it back to {path} to keep its games; else the next start begins"
        " a new journal, game ids going on from game-ids"
    ]
    assert not path.exists()
    moved.rename(path)
    assert _results(path) == [1, 2]


def test_a_checkpoint_never_touches_a_file_moved_over_the_journal(tmp_path: Path) -> None:
    """Found by a fresh-eyes attack: the log beside the path is the daemon's; copied into
    the file moved over the journal it corrupted that one, and the daemon's open file
    lost the pages that were only in the log (its rescued copy unreadable)."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    journal.checkpoint_elsewhere()
    for game_id in range(1, 30):
        play(journal, game_id)
    other = sqlite3.connect(tmp_path / "other.sqlite3")
    other.execute("CREATE TABLE other (x)")
    other.execute("INSERT INTO other VALUES (1)")
    other.commit()
    other.close()
    (tmp_path / "other.sqlite3").rename(path)
    assert journal.checkpoint_log() == 0
    pruner = journal.pruner(Retention(keep_games=1))
    assert pruner.step(0.0) == 0
    pruner.close()
    said: list[str] = []
    journal.close(tell=said.append)
    with sqlite3.connect(path) as again:  # once the daemon's log is gone from beside it
        assert again.execute("SELECT x FROM other").fetchall() == [(1,)]
    (line,) = said
    kept = Path(line.split(" is kept at ", 1)[1].split(": ", 1)[0])
    assert _results(kept) == list(range(1, 30))


def test_a_journal_swapped_for_a_link_to_itself_is_lost(tmp_path: Path) -> None:
    """Found by a fresh-eyes attack: the path led to the same inode through a symbolic link,
    so nothing was lost, while every checkpoint opened the link's target and its own
    (empty) log: the daemon's log was never copied back, and a kill -9 lost its games."""
    state = tmp_path / "state"
    path = state / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    path.rename(state / "real.sqlite3")
    path.symlink_to("real.sqlite3")
    assert journal.file.lost() == f"{path} was replaced by another file under the running daemon"
    journal.close()


def test_a_linked_journal_whose_file_is_deleted_is_put_back_where_the_link_leads(
    tmp_path: Path,
) -> None:
    """Found by a fresh-eyes attack: the copy went beside the dangling link, said "another
    file has its name", and the deleted file's log stayed where the link leads."""
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / JOURNAL
    path.symlink_to(data / JOURNAL)
    journal = Journal(path)
    play(journal, 1)
    (data / JOURNAL).unlink()
    play(journal, 2)
    said: list[str] = []
    journal.close(tell=said.append)
    assert said == [f"the journal, copied out of the open file, is back at {data / JOURNAL}"]
    assert sorted(p.name for p in data.iterdir()) == [JOURNAL]
    assert _results(path) == [1, 2]


def test_a_log_deleted_alone_under_the_daemon_is_noticed_and_the_journal_kept_whole(
    tmp_path: Path,
) -> None:
    """Found by a fresh-eyes attack: ``rm journal.sqlite3-wal`` went unnoticed (every
    checkpoint failed, warned every 30 s), and the commits since the last checkpoint went
    with the log at the close."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    journal.checkpoint_elsewhere()
    play(journal, 1)
    journal.checkpoint_log()
    play(journal, 2)
    assert journal.file.lost() is None
    log = path.with_name(f"{JOURNAL}-wal")
    log.unlink()
    play(journal, 3)
    assert journal.file.lost() == f"{log} was deleted under the running daemon"
    pruner = journal.pruner(Retention(keep_games=1))
    assert pruner.step(0.0) == 0
    pruner.close()
    said: list[str] = []
    journal.close(tell=said.append)
    assert said == [f"the journal, copied out of the open file, is back at {path}"]
    assert _results(path) == [1, 2, 3]


def test_a_whole_copy_left_by_a_rescue_is_said_at_the_next_start(tmp_path: Path) -> None:
    """Found by a fresh-eyes attack: killed after the copy was whole and before it had the
    journal's name back, the next start began a new journal and said nothing of it."""
    path = tmp_path / "state" / JOURNAL
    journal = Journal(path)
    play(journal, 1)
    journal.close()
    whole = path.with_name(f"{JOURNAL}.rescued-20261207T051500")
    path.rename(whole)  # as a rescue killed before its put-back leaves it
    opened = Journal(path)
    try:
        assert any(w.startswith(f"{whole}: a whole journal rescued") for w in opened.warnings)
    finally:
        opened.close()
