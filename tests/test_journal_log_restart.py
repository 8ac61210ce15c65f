"""The write-ahead log started over in the checkpoint's thread, not by the loop's next commit.

SQLite syncs the log's header when a commit starts a log that was copied back whole
over: an fsync, whatever ``synchronous`` says of commits. Left to the loop's next commit
(a retention step's, a game's start) it held the loop for up to tens of milliseconds on
a year's first retention run; the checkpoint's thread takes it now. Seen from outside:
the log's checkpoint sequence (its header's bytes 12-15) moves at the checkpoint, and the
loop's next commit leaves it where it is.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.test_journal import JOURNAL, play
from wheeld.shell.journal import Journal
from wheeld.shell.journal.connection import checkpoint_wal


def _restarts(path: Path) -> int:
    """The log's checkpoint sequence: one more at each start over."""
    header = path.with_name(f"{path.name}-wal").read_bytes()[:16]
    return int.from_bytes(header[12:16], "big")


def _journal(tmp_path: Path) -> Journal:
    journal = Journal(tmp_path / "state" / JOURNAL)
    journal.checkpoint_elsewhere()
    play(journal, 1)
    return journal


def test_the_checkpoint_thread_starts_the_log_over_and_the_loops_commit_does_not(
    tmp_path: Path,
) -> None:
    journal = _journal(tmp_path)
    before = _restarts(journal.path)
    thread = threading.Thread(target=journal.checkpoint_log)
    thread.start()
    thread.join(timeout=30)
    assert _restarts(journal.path) == before + 1, "started over in the checkpoint's thread"
    play(journal, 2)
    assert _restarts(journal.path) == before + 1, "the loop's commit went on in that log"
    journal.close()


def test_without_the_write_lock_the_loops_next_commit_starts_it_over(tmp_path: Path) -> None:
    """What the daemon did before, and still does while the loop is writing."""
    journal = _journal(tmp_path)
    before = _restarts(journal.path)
    checkpoint_wal(journal.path)
    assert _restarts(journal.path) == before
    play(journal, 2)
    assert _restarts(journal.path) == before + 1
    journal.close()


def test_a_writing_loop_is_never_made_to_wait(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    before = _restarts(journal.path)
    lock = threading.RLock()
    held, release = threading.Event(), threading.Event()

    def loop_writing() -> None:
        with lock:
            held.set()
            release.wait(timeout=30)

    writer = threading.Thread(target=loop_writing)
    writer.start()
    held.wait(timeout=30)
    checkpoint_wal(journal.path, lock)  # returns at once: the lock is the loop's
    release.set()
    writer.join(timeout=30)
    assert _restarts(journal.path) == before
    journal.close()


def test_a_loop_done_writing_soon_leaves_the_start_over_to_the_thread(tmp_path: Path) -> None:
    """The loop's commits take a fraction of a millisecond: the thread waits them out
    (never the other way round) and still takes the header's fsync."""
    journal = _journal(tmp_path)
    before = _restarts(journal.path)
    lock = threading.RLock()
    held = threading.Event()

    def loop_writing_briefly() -> None:
        with lock:
            held.set()
            threading.Event().wait(0.005)  # a commit's length: what is tested, not a wait

    writer = threading.Thread(target=loop_writing_briefly)
    writer.start()
    held.wait(timeout=30)
    checkpoint_wal(journal.path, lock)
    writer.join(timeout=30)
    assert _restarts(journal.path) == before + 1
    journal.close()


def test_an_idle_journal_is_not_started_over_at_every_checkpoint(tmp_path: Path) -> None:
    """Found by a fresh-eyes attack: the start over's own write was the next checkpoint's
    whole log, so an idle journal (a wheel unplugged) started its log over, a commit and
    its fsyncs, every 30 s for nothing."""
    journal = _journal(tmp_path)
    journal.checkpoint_log()
    after_first = _restarts(journal.path)
    for _ in range(5):
        journal.checkpoint_log()
    assert _restarts(journal.path) == after_first
    journal.close()
