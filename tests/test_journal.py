"""The journal: integrity at open, game ids never reused, the lock, and full disks."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wheeld.core.engine import EngineState
from wheeld.core.signing import ChainState
from wheeld.shell.journal import (
    GAME_IDS_FILE,
    Journal,
    JournalCorrupt,
    JournalError,
    JournalFrame,
    JournalView,
    JournalWriteError,
)
from wheeld.table.effects import AlarmRecord, CommandRecord, FrameRecord, GameRecord, Outgoing

JOURNAL = "journal.sqlite3"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def journal(state_dir: Path) -> Iterator[Journal]:
    opened = Journal(state_dir / JOURNAL)
    yield opened
    opened.close()


def play(journal: Journal, game_id: int, number: str = "17", payload: str = "{}") -> list[int]:
    """Journal one whole game as the daemon does: its result and the next state."""
    return journal.record(
        [GameRecord(game_id, "result", payload, number)],
        [Outgoing("t/game", payload), Outgoing("t/result", payload, retain=True)],
        EngineState(next_game_id=game_id + 1),
    )


def reopen(journal: Journal) -> Journal:
    journal.close()
    return Journal(journal.path)


def error_of(path: Path) -> str:
    with pytest.raises(JournalError) as caught:
        Journal(path).close()
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- decisions and the outbox, as the daemon uses them ------------------------------


def test_decisions_outbox_and_state_survive_a_reopen(journal: Journal) -> None:
    assert journal.load_state() is None
    ids = play(journal, 1, "17")
    play(journal, 2, "0")
    journal.enqueue([Outgoing("t/wheel", '{"link": "up"}', retain=True)])
    journal = reopen(journal)
    assert journal.load_state() == EngineState(next_game_id=3)
    assert journal.history(5) == ["0", "17"]
    assert [game_id for game_id, _, _ in journal.decisions()] == [1, 2]
    pending = journal.pending()
    assert [entry.message.topic for entry in pending] == [
        "t/game",
        "t/result",
        "t/game",
        "t/result",
        "t/wheel",
    ]
    assert pending[0].id == ids[0]
    for entry in pending:
        journal.acknowledge(entry)
    assert journal.pending() == []
    assert [m.topic for m in journal.retained()] == ["t/result", "t/wheel"]
    assert journal.warnings == []
    journal.close()


def test_decisions_are_read_a_batch_at_a_time_and_all_of_them(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted again from every decision (another wheel's journal, other arcs), a year of
    them streams: never one read of the whole table."""
    from wheeld.shell.journal import records

    monkeypatch.setattr(records, "READ_BATCH", 2)
    for game_id in range(1, 6):
        play(journal, game_id, str(game_id), f'{{"n": {game_id}}}')
    reads: list[str] = []
    read = journal._sql.read

    def counted(sql: str, *parameters: Any) -> list[Any]:
        reads.append(sql)
        return read(sql, *parameters)

    monkeypatch.setattr(journal._sql, "read", counted)
    got = list(journal.decisions_after(1))
    assert [(game_id, payload) for game_id, _, payload in got] == [
        (game_id, f'{{"n": {game_id}}}') for game_id in range(2, 6)
    ]
    assert len(reads) == 3 and all("LIMIT 2" in sql for sql in reads), "2 + 2 + none left"


# -- integrity at open ---------------------------------------------------------------


def test_a_file_that_is_not_sqlite_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / JOURNAL).write_text("wheel T1 games\n")
    message = error_of(state_dir / JOURNAL)
    assert message.startswith(f"{state_dir / JOURNAL}: not an SQLite database")


def test_a_corrupt_page_is_refused_naming_where_game_ids_continue(journal: Journal) -> None:
    for game_id in range(1, 40):
        play(journal, game_id, payload="x" * 300)
    journal.close()  # the last connection checkpoints: every page is in the file
    path = journal.path
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page in range(2, len(data) // page_size):
        start = page * page_size
        data[start : start + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))
    message = error_of(path)
    assert message.startswith(f"{path}: journal is corrupt (")
    assert message.endswith("move it aside to start a new one; game ids continue from 40")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
def test_a_full_disk_at_open_is_no_corrupt_journal(tmp_path: Path, existing: bool) -> None:
    """Found: opened on a full file system, an intact (or new) journal was refused as
    "journal is corrupt (...); move it aside to start a new one"."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], check=True)
    try:
        path = disk / "state" / JOURNAL
        if existing:
            journal = Journal(path)
            play(journal, 1)
            journal.close()
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        with pytest.raises(JournalError) as caught:
            Journal(path).close()
        assert not isinstance(caught.value, JournalCorrupt)
        message = str(caught.value)
        assert "corrupt" not in message and "move it aside" not in message, message
        assert f"free space in {path.parent}" in message
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_foreign_sqlite_database_is_refused(state_dir: Path) -> None:
    state_dir.mkdir()
    with sqlite3.connect(state_dir / JOURNAL) as db:
        db.execute("CREATE TABLE customers (name TEXT)")
    db.close()
    assert "not a wheeld journal (it holds the tables customers)" in error_of(state_dir / JOURNAL)


def test_a_journal_missing_a_table_is_corrupt(journal: Journal) -> None:
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("DROP TABLE outbox")
    db.close()
    assert "journal is corrupt (table outbox is missing)" in error_of(journal.path)


@pytest.mark.parametrize(
    "stored",
    [
        '{"next_game_id": 2.7}',
        '{"next_game_id": 1e300}',
        '{"next_game_id": true}',
        '{"next_game_id": "3"}',
        '{"next_game_id": 0}',
        '{"next_game_id": 9007199254740992}',
        '{"next_game_id": 5, "open_game": 4.0}',
        '{"next_game_id": 5, "open_game": 5}',
        '{"next_game_id": 5, "rotor_revolutions_since_no_spin": false}',
        '{"next_game_id": 5, "rotor_revolutions_since_no_spin": -1}',
        '{"next_game_id": 5, "last_result_rotor": "up"}',
        "[5]",
        "{",
    ],
)
def test_malformed_stored_state_is_one_clear_line(journal: Journal, stored: str) -> None:
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("INSERT INTO state (key, value) VALUES ('engine', ?)", (stored,))
    db.close()
    assert "journal is corrupt (" in error_of(journal.path)


@pytest.mark.parametrize(
    "data",
    [
        {"next_game_id": 2.7},
        {"next_game_id": 1e300},
        {"next_game_id": True},
        {"next_game_id": "3"},
        {"next_game_id": 2**53},
        {"next_game_id": None},
        {},
        {"next_game_id": 9, "open_game": True},
        {"next_game_id": 9, "open_game": 0},
        {"next_game_id": 9, "rotor_revolutions_since_no_spin": 2.0},
        {"next_game_id": 9, "rotor_revolutions_since_no_spin": "1"},
    ],
)
def test_engine_state_refuses_inexact_integers(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="stored engine state"):
        EngineState.from_dict(data)


def test_engine_state_round_trips() -> None:
    state = EngineState(2**53 - 1, "ccw", 2**53 - 2, 0)
    assert EngineState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_engine_state_is_stored_whole() -> None:
    # Written by hand (it is stored with every decision): a field added is stored too.
    from dataclasses import asdict

    for state in (EngineState(), EngineState(7, "cw", 6, 3)):
        assert state.to_dict() == asdict(state)


# -- game ids are never reused ---------------------------------------------------------


def test_game_ids_continue_after_the_journal_is_deleted(journal: Journal) -> None:
    for game_id in (1, 2, 3):
        play(journal, game_id)
    # A block of ids reserved while running; brought down to the last used at a clean close.
    assert (journal.path.parent / GAME_IDS_FILE).read_text() == "100 0\n"
    journal.close()
    assert (journal.path.parent / GAME_IDS_FILE).read_text() == "3 0\n"
    for stale in journal.path.parent.glob(JOURNAL + "*"):
        stale.unlink()
    journal = Journal(journal.path)
    state = journal.load_state()
    assert state is not None and state.next_game_id == 4
    assert journal.warnings == [
        f"{journal.path}: journal was missing or empty, a new one was started;"
        f" game ids continue from 4 ({journal.path.parent / GAME_IDS_FILE})"
    ]
    journal.close()


def test_game_ids_continue_after_the_journal_is_truncated(journal: Journal) -> None:
    play(journal, 1)
    play(journal, 2)
    journal.close()
    journal.path.write_bytes(b"")  # its -wal stays behind: it must not be replayed
    journal = Journal(journal.path)
    state = journal.load_state()
    assert state is not None and state.next_game_id == 3
    assert len(journal.warnings) == 1
    assert journal.decisions() == []
    play(journal, 3)
    journal = reopen(journal)
    assert [game_id for game_id, _, _ in journal.decisions()] == [3]
    assert journal.warnings == []
    journal.close()


def test_an_older_journal_does_not_rewind_game_ids(journal: Journal) -> None:
    play(journal, 1)
    journal.close()
    (journal.path.parent / GAME_IDS_FILE).write_text("41\n")
    journal = Journal(journal.path)
    assert journal.load_state() == EngineState(next_game_id=42)
    assert "the journal ends at game 1" in journal.warnings[0]
    journal.close()


def test_the_first_game_id_can_be_set_by_hand(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / GAME_IDS_FILE).write_text("999\n")
    journal = Journal(state_dir / JOURNAL)
    assert journal.load_state() == EngineState(next_game_id=1000)
    journal.close()


def test_a_journal_without_game_ids_writes_its_mark(journal: Journal) -> None:
    play(journal, 1)
    play(journal, 2)
    journal.close()
    (journal.path.parent / GAME_IDS_FILE).unlink()
    Journal(journal.path).close()
    assert (journal.path.parent / GAME_IDS_FILE).read_text() == "2 0\n"


@pytest.mark.parametrize(
    "content", ["", "12 13 14\n", "-4\n", "1e3\n", "\uff19\n", "9007199254740992\n"]
)
def test_a_malformed_game_ids_file_is_refused(state_dir: Path, content: str) -> None:
    state_dir.mkdir()
    (state_dir / GAME_IDS_FILE).write_text(content)
    assert f"{state_dir / GAME_IDS_FILE}: malformed" in error_of(state_dir / JOURNAL)


# -- one daemon per state directory ----------------------------------------------------

_HOLD_LOCK = """
import sys
from pathlib import Path
from wheeld.shell.journal import Journal
journal = Journal(Path(sys.argv[1]))
print("open", flush=True)
sys.stdin.read()
"""


def test_a_second_journal_on_one_state_directory_is_refused(journal: Journal) -> None:
    message = error_of(journal.path)
    assert message == (
        f"{journal.path.parent}: another wheeld (pid {os.getpid()}) is using this state directory"
    )
    journal.close()
    Journal(journal.path).close()


def test_the_lock_names_the_other_process_and_dies_with_it(state_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(state_dir / JOURNAL)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"open\n"
        assert f"another wheeld (pid {holder.pid})" in error_of(state_dir / JOURNAL)
    finally:
        holder.kill()
        holder.communicate(timeout=10)
    Journal(state_dir / JOURNAL).close()


# -- writes that fail ----------------------------------------------------------------------


#: A wall clock stepped far from the host's: what the journal keeps is the daemon's time.
STEPPED = 1_000_000_000.0


def test_the_journal_stamps_with_the_time_it_is_handed_never_its_own(state_dir: Path) -> None:
    """The daemon's clock (``HostClock``, which notices a stepped wall clock) is the one
    time in the shell: the journal reads none of its own, so what it keeps agrees with
    the pipeline's messages however the host's clock was stepped meanwhile."""
    journal = Journal(state_dir / JOURNAL, boot_id="boot-a")
    journal.record([GameRecord(1, "result", "{}", "7")], [], EngineState(2), ChainState(9))
    journal._db.close()  # the power goes: no clean close, so the next open lost commits
    for fd in journal._locks:
        os.close(fd)
    journal._locks = ()
    journal = Journal(state_dir / JOURNAL, boot_id="boot-b", clock=lambda: STEPPED)
    try:
        assert journal.lost
        journal.load_chain()  # the chain jumps past every seq reserved: a floor, at open
        journal.record_floor(20, "digest", STEPPED + 1)  # another journal's, at its time
        rows = journal._db.execute(
            "SELECT at, after_id FROM anchors WHERE chain = 'messages' ORDER BY id"
        ).fetchall()
        assert [at for at, _ in rows] == [STEPPED, STEPPED + 1]
        assert journal.writable(STEPPED + 2)
        probe = journal._db.execute("SELECT value FROM state WHERE key = 'write_probe'")
        assert probe.fetchone() == (repr(STEPPED + 2),)
    finally:
        journal.close()


def test_a_full_database_loses_nothing_and_recovers(journal: Journal) -> None:
    play(journal, 1)
    before = (journal.decisions(), journal.pending())
    # A genuine SQLITE_FULL: the database may not grow by another page.
    pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
    journal._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(JournalWriteError, match="database or disk is full") as caught:
        play(journal, 2, payload="x" * 20_000)
    assert str(caught.value).startswith(f"{journal.path}: cannot write to the journal")
    assert (journal.decisions(), journal.pending()) == before
    # Game 2 was decided though not journalled: its id is spent, never reused.
    assert journal.load_state() == EngineState(next_game_id=3)
    journal._db.execute(f"PRAGMA max_page_count = {pages + 1000}")
    assert journal.writable(1.0)
    play(journal, 2, payload="x" * 20_000)
    assert [game_id for game_id, _, _ in journal.decisions()] == [1, 2]


_FILE_SIZE_LIMIT = """
import json, resource, sys
from pathlib import Path
from wheeld.core.engine import EngineState
from wheeld.table.effects import AlarmRecord, CommandRecord, FrameRecord, GameRecord, Outgoing
from wheeld.shell.journal import Journal, JournalWriteError

journal = Journal(Path(sys.argv[1]))
# Room for a few games in the write-ahead log, not for 99. Python ignores
# SIGXFSZ: writes past the limit fail with EFBIG instead of killing it.
limit = journal.path.stat().st_size + 65536
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
recorded, error = [], None
for game_id in range(1, 100):
    body = "x" * 1500
    try:
        journal.record(
            [GameRecord(game_id, "result", body, "7")],
            [Outgoing("t/game", body)],
            EngineState(next_game_id=game_id + 1),
        )
    except JournalWriteError as exc:
        error = str(exc)
        break
    recorded.append(game_id)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
recovered = journal.writable(1.0)
after = [game_id for game_id, _, _ in journal.decisions()]
print(json.dumps({"recorded": recorded, "error": error,
                  "recovered": recovered, "after": after}))
"""


def _under_a_limit(script: str, state_dir: Path) -> Any:
    """What ``script`` prints (JSON), run on a fresh journal in a process of its own: the
    file-size limit it sets must not reach pytest's files."""
    Journal(state_dir / JOURNAL).close()  # the schema, before the limit
    done = subprocess.run(
        [sys.executable, "-c", script, str(state_dir / JOURNAL)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_a_file_size_limit_fails_writes_cleanly(state_dir: Path) -> None:
    outcome = _under_a_limit(_FILE_SIZE_LIMIT, state_dir)
    assert outcome["error"] is not None, "the limit was never reached"
    assert outcome["error"].startswith(f"{state_dir / JOURNAL}: cannot write")
    assert outcome["recorded"] and outcome["after"] == outcome["recorded"]
    assert outcome["recovered"] is True
    journal = Journal(state_dir / JOURNAL)  # consistent: it passes the integrity check
    assert [game_id for game_id, _, _ in journal.decisions()] == outcome["recorded"]
    journal.close()


_PROBE_UNDER_A_LIMIT = """
import json, resource, sys
from pathlib import Path
from wheeld.core.engine import EngineState
from wheeld.table.effects import GameRecord, Outgoing
from wheeld.shell.journal import Journal, JournalWriteError

journal = Journal(Path(sys.argv[1]))
wal = journal.path.with_name(journal.path.name + "-wal")

def game(game_id):
    body = "x" * 1500
    journal.record(
        [GameRecord(game_id, "result", body, "7")],
        [Outgoing("t/game", body), Outgoing("t/result", body, retain=True)],
        EngineState(next_game_id=game_id + 1),
    )

def room(limit):
    resource.setrlimit(resource.RLIMIT_FSIZE, (wal.stat().st_size + limit, resource.RLIM_INFINITY))

game(1)
said = {}
room(12 * 1024)  # a page or two fit, a game does not
said["tight"] = journal.writable(1.0)
try:
    game(2)
except JournalWriteError as exc:
    said["game"] = str(exc)
room(256 * 1024)
said["roomy"] = journal.writable(1.0)
# What a flapping fault asks for (wheeld/shell/journal_fault.py): more than the limit.
said["larger"] = journal.writable(1.0, 4 * 128 * 1024)
game(2)
print(json.dumps(said))
"""


def test_the_write_probe_needs_room_for_a_game(state_dir: Path) -> None:
    """Found on the first day: under `ulimit -f` the probe's one-page write fitted where
    the next game's did not, and the fault cleared and came back every few seconds."""
    said = _under_a_limit(_PROBE_UNDER_A_LIMIT, state_dir)
    assert "this process may write no file past" in said["game"], "a game's commit fails"
    assert "(ulimit -f)" in said["game"] and "\n" not in said["game"]
    assert said["tight"] is False, "room for a page is no room for a game"
    assert said["roomy"] is True
    assert said["larger"] is False, "a larger probe finds the limit a game's did not"


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(directory: Path) -> Path:
    """Write until the file system says it is full; the filler, to delete later."""
    filler = directory / "filler"
    with filler.open("wb") as file:
        block = b"x" * 65536
        try:
            while True:
                file.write(block)
                file.flush()
        except OSError:
            pass
    return filler


def test_a_full_file_system_fails_writes_cleanly(small_tmpfs: Path) -> None:
    journal = Journal(small_tmpfs / "state" / JOURNAL)
    try:
        play(journal, 1)
        filler = fill(small_tmpfs)
        written = 1
        with pytest.raises(JournalWriteError) as caught:
            for game_id in range(2, 200):
                play(journal, game_id, payload="x" * 2000)
                written = game_id
        assert "\n" not in str(caught.value)
        assert [game_id for game_id, _, _ in journal.decisions()] == list(range(1, written + 1))
        assert not journal.writable(1.0)
        filler.unlink()
        assert journal.writable(1.0)
        play(journal, written + 1)
        journal = reopen(journal)
        assert journal.load_state() == EngineState(next_game_id=written + 2)
    finally:
        journal.close()


# -- the table and operator commands -----------------------------------------------------


def test_table_state_and_commands_survive_a_reopen(journal: Journal) -> None:
    assert journal.table_state() == "open"
    journal.save_table_state("closed")
    journal.record_commands(
        [
            CommandRecord(1.5, "close", "pit-7", "{}", True, '{"ok": true}'),
            CommandRecord(2.5, "no_spin", None, "[]", False, "body must be an object"),
        ]
    )
    journal = reopen(journal)
    assert journal.table_state() == "closed"
    assert journal.commands() == [
        (1.5, "close", "pit-7", "{}", True, '{"ok": true}'),
        (2.5, "no_spin", None, "[]", False, "body must be an object"),
    ]
    journal.close()


def test_a_journal_from_before_the_commands_table_is_upgraded(journal: Journal) -> None:
    play(journal, 1)
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("DROP TABLE commands")
    db.close()
    journal = Journal(journal.path)
    assert journal.commands() == []
    assert [game_id for game_id, _, _ in journal.decisions()] == [1]
    journal.close()


def test_a_malformed_table_state_is_one_clear_line(journal: Journal) -> None:
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("INSERT INTO state (key, value) VALUES ('table', 'ajar')")
    db.close()
    journal = Journal(journal.path)
    with pytest.raises(JournalError, match="journal is corrupt \\(stored table state 'ajar'"):
        journal.table_state()
    journal.close()


# -- the message chain and the frames -------------------------------------------------------


def test_the_message_chain_is_stored_with_the_decisions(journal: Journal) -> None:
    assert journal.load_chain() == ChainState()
    journal.record(
        [GameRecord(1, "spinning", "{}")],
        [Outgoing("t/game", "{}")],
        EngineState(next_game_id=2),
        ChainState(2, "A" * 43),
    )
    play(journal, 1)  # no chain given: the stored one stays
    journal = reopen(journal)
    assert journal.load_chain() == ChainState(2, "A" * 43)
    journal.close()


def test_a_malformed_chain_state_is_one_clear_line(journal: Journal) -> None:
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("""INSERT INTO state (key, value) VALUES ('chain', '{"seq": 0}')""")
    db.close()
    journal = Journal(journal.path)
    with pytest.raises(JournalError, match="journal is corrupt \\(stored chain state has a"):
        journal.load_chain()
    journal.close()


def test_frames_are_kept_escaped_with_their_game(journal: Journal) -> None:
    journal.record_frames(
        [
            FrameRecord(10.25, "<", b"$SPN,1*00", 1),
            FrameRecord(10.5, ">", b"QRY\\\x00", None),
        ]
    )
    journal.record_frames([])
    journal = reopen(journal)  # a block left open by the last run is sealed at the next
    with JournalView(journal.path) as view:
        assert view.frames([1]) == {1: [JournalFrame(10.25, "<", "$SPN,1*00", 1)]}
    with sqlite3.connect(journal.path) as db:
        blocks = db.execute("SELECT game_id, lines, dropped FROM frame_blocks ORDER BY id")
        assert blocks.fetchall() == [(1, 1, 0), (None, 1, 0)]
        assert db.execute("SELECT COUNT(*) FROM frame_tail").fetchone() == (0,)
    db.close()
    journal.close()


def test_a_decision_s_commit_keeps_the_lines_before_it_or_neither(journal: Journal) -> None:
    """The lines that led to a game's end go in its own commit: both kept, or, when the
    disk refuses, neither, and the open block is what the journal still holds."""
    lines = [FrameRecord(10.0 + i, "<", f"$WRHBT,{i},1*00".encode(), 3) for i in range(3)]
    journal.record_frames(lines[:1])
    journal.record(
        [GameRecord(3, "result", "{}", "17")],
        [Outgoing("t/game", "{}")],
        EngineState(next_game_id=4),
        frames=lines[1:2],
    )
    with JournalView(journal.path) as view:
        assert [f.line for f in view.frames([3])[3]] == ["$WRHBT,0,1*00", "$WRHBT,1,1*00"]
    journal._sql.db.execute("PRAGMA query_only = ON")  # every write refused from here
    with pytest.raises(JournalWriteError):
        journal.record(
            [GameRecord(4, "result", "{}", "5")],
            [Outgoing("t/game", "{}")],
            EngineState(next_game_id=5),
            frames=lines[2:],
        )
    journal._sql.db.execute("PRAGMA query_only = OFF")
    assert [game for game, _, _ in journal.decisions()] == [3]
    journal.record_frames([FrameRecord(20.0, "<", b"$WRHBT,9,1*00", None)])  # game 3 ended
    with JournalView(journal.path) as view:
        assert len(view.frames([3])[3]) == 2, "the refused line is not in its block"
    journal.close()


def test_a_games_lines_and_the_traffic_before_it_are_one_block_sealed_at_its_end(
    journal: Journal,
) -> None:
    idle = [
        FrameRecord(1.0 + i / 4, "<", f"$WRHBT,{i},{i * 250}*00".encode(), None) for i in range(8)
    ]
    game = [FrameRecord(3.0 + i / 4, "<", f"$WRBAL,{i},CW*00".encode(), 7) for i in range(5)]
    journal.record_frames(idle)
    journal.record_frames(game[:2])
    with sqlite3.connect(journal.path) as db:
        # The game is under way: its lines and the traffic before it wait in the tail.
        assert db.execute("SELECT COUNT(*) FROM frame_blocks").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM frame_tail").fetchone() == (10,)
    db.close()
    journal.record_frames(game[2:])
    with JournalView(journal.path) as view:  # the open block is recallable too
        assert [f.line for f in view.frames([7])[7]] == [f.line.decode() for f in game]
    journal.record_frames([FrameRecord(5.0, "<", b"$WRHBT,9,5000*00", None)])  # the game ended
    with sqlite3.connect(journal.path) as db:
        block = db.execute("SELECT game_id, lines, lead FROM frame_blocks").fetchall()
        assert block == [(7, 13, 8)]
    db.close()
    with JournalView(journal.path) as view:
        assert [f.t for f in view.frames([7])[7]] == [f.at for f in game]
        assert view.walks()["frame_blocks"].breaks == []
        games = [game_id for block in view.blocks() for _, game_id in block]
        assert games == [None] * 8 + [7] * 5
    journal.close()


def test_a_long_idle_stretch_is_a_block_of_its_own(journal: Journal) -> None:
    from wheeld.shell.journal.frames import MAX_LEAD

    idle = [FrameRecord(1.0 + i / 10, "<", b"$WRHBT,1,1*00", None) for i in range(MAX_LEAD + 1)]
    journal.record_frames([*idle, FrameRecord(60.0, "<", b"$WRBAL,1,CW*00", 3)])
    with sqlite3.connect(journal.path) as db:
        assert db.execute("SELECT game_id, lines, lead FROM frame_blocks").fetchall() == [
            (None, MAX_LEAD + 1, 0)
        ]
    db.close()
    journal.close()


def test_line_noise_is_kept_as_a_sample_and_counted(journal: Journal) -> None:
    from wheeld.shell.journal.frames import NOISE_SAMPLE

    noise = [
        FrameRecord(1.0 + i / 100, "<", b"\xff\xfe garbage", None, noise=True) for i in range(500)
    ]
    journal.record_frames(noise)
    journal.record_frames([FrameRecord(9.0, "<", b"$WRBAL,1,CW*00", 1)])
    journal.record_frames([FrameRecord(9.5, "<", b"$WRHBT,1,1*00", None)])  # game 1 over
    with sqlite3.connect(journal.path) as db:
        block = db.execute("SELECT game_id, lines, lead, dropped FROM frame_blocks").fetchone()
    db.close()
    assert block == (1, NOISE_SAMPLE + 1, NOISE_SAMPLE, 500 - NOISE_SAMPLE)
    journal.close()


def test_an_older_journals_per_line_frames_stay_readable(journal: Journal) -> None:
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute(
            "CREATE TABLE frames (id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL,"
            " dir TEXT NOT NULL, line TEXT NOT NULL, game_id INTEGER)"
        )
        db.executemany(
            "INSERT INTO frames (t, dir, line, game_id) VALUES (?, '<', 'x', ?)",
            [(1.0, 1), (2.0, None), (3.0, 2)],
        )
        db.execute("PRAGMA user_version = 0")
    db.close()
    journal = Journal(journal.path)  # upgraded: the old lines chained as found, and indexed
    assert journal.upgraded
    journal.record_frames([FrameRecord(4.0, "<", b"y", 2)])
    journal.close()
    with JournalView(journal.path) as view:
        walks = view.walks()
        assert walks["frames"].breaks == [] and walks["frames"].end[0] == 3
        assert walks["frame_blocks"].breaks == []
        assert [(f.t, f.line) for f in view.frames([2])[2]] == [(3.0, "x"), (4.0, "y")]


def _signed_games(journal: Journal, count: int) -> ChainState:
    """Record ``count`` one-message games, signed and chained as the pipeline does."""
    from wheeld.core.signing import Signer, chain

    signer = Signer.generate()
    state = journal.load_chain()
    for game_id in range(1, count + 1):
        payload, state = chain({"event": "no_spin", "game_id": game_id}, state, signer)
        journal.record(
            [GameRecord(game_id, "no_spin", json.dumps(payload))],
            [],
            EngineState(next_game_id=game_id + 1),
            chain=state,
        )
    return state


def test_the_chain_continues_from_the_last_payload_when_its_state_row_is_gone(
    journal: Journal,
) -> None:
    after = _signed_games(journal, 3)
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("DELETE FROM state WHERE key = 'chain'")
    journal = Journal(journal.path)
    assert journal.load_chain() == after
    journal.close()


def test_a_lost_or_older_journal_restarts_the_chain_past_every_reserved_seq(
    journal: Journal,
) -> None:
    _signed_games(journal, 3)
    journal.close()
    assert (journal.path.parent / GAME_IDS_FILE).read_text() == "3 1002\n"
    for stale in journal.path.parent.glob(JOURNAL + "*"):
        stale.unlink()
    journal = Journal(journal.path)  # lost: a new journal, game ids and seqs go on
    assert journal.lost and journal.load_chain() == ChainState(1002, None)
    journal.close()


def test_opening_does_not_walk_the_frame_blocks(journal: Journal) -> None:
    """Frames are many: only ``wheeld verify`` walks their chain, never a start-up."""
    journal.record_frames([FrameRecord(1.0, "<", b"x", 1), FrameRecord(2.0, "<", b"y", None)])
    journal.record_frames([FrameRecord(3.0, "<", b"z", 2)])
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("UPDATE frame_blocks SET data = CAST(data || x'00' AS BLOB) WHERE id = 1")
    db.close()
    journal = Journal(journal.path)
    assert journal.chain_problem is None
    journal.close()
    with JournalView(journal.path) as view:
        assert "frame_blocks row 1" in view.walks()["frame_blocks"].breaks[0].describe()


# -- alarms ------------------------------------------------------------------------------


def _alarm(at: float, state: str) -> AlarmRecord:
    payload = json.dumps({"alarm": "deviation", "state": state})
    return AlarmRecord(at, "deviation", state, payload)


def test_alarms_and_the_set_alerts_survive_a_reopen(journal: Journal) -> None:
    set_alerts = {"deviation": {"since": 1.0, "detail": {"p_value": 0.0001}}}
    journal.record_alarms([_alarm(1.0, "set"), _alarm(2.0, "acknowledged")], set_alerts)
    journal = reopen(journal)
    assert [(at, state) for at, _, state, _ in journal.alarms()] == [
        (1.0, "set"),
        (2.0, "acknowledged"),
    ]
    assert journal.set_alerts() == set_alerts
    journal.record_alarms([_alarm(3.0, "clear")], {})
    assert reopen_set_alerts(journal) == {}


def reopen_set_alerts(journal: Journal) -> dict[str, object]:
    journal = reopen(journal)
    try:
        return dict(journal.set_alerts())
    finally:
        journal.close()


def test_an_edited_alarm_breaks_the_chain(journal: Journal) -> None:
    journal.record_alarms([_alarm(1.0, "set"), _alarm(2.0, "clear")], {})
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("UPDATE alarms SET state = 'acknowledged' WHERE id = 2")
    db.close()
    with JournalView(journal.path) as view:
        (brk,) = view.walks()["alarms"].breaks
    assert brk.describe() == (
        "alarms row 2: hash does not match: the row was edited, moved, or one before it changed"
    )
    # Written before the last clean close: checked then, walked again only by verify.
    reopened = Journal(journal.path)
    assert reopened.chain_problem is None
    reopened.close()


def test_a_start_walks_what_was_written_since_the_last_checkpoint(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL)
    journal.record_alarms([_alarm(1.0, "set")], {})
    journal.checkpoint()
    journal.record_alarms([_alarm(2.0, "clear")], {})
    crash(journal)  # no clean close: the second alarm is past the checked mark
    with sqlite3.connect(state_dir / JOURNAL) as db:
        db.execute("UPDATE alarms SET state = 'acknowledged' WHERE id = 2")
    db.close()
    reopened = Journal(state_dir / JOURNAL)
    try:
        assert reopened.chain_problem is not None and "alarms row 2" in reopened.chain_problem
    finally:
        reopened.close()
    again = Journal(state_dir / JOURNAL)  # found once: a new segment, anchored, begins after it
    assert again.chain_problem is None
    again.close()


def test_a_journal_from_before_the_alarms_table_is_upgraded(journal: Journal) -> None:
    play(journal, 1)
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("DROP TABLE alarms")
    db.close()
    journal = Journal(journal.path)
    try:
        assert journal.alarms() == [] and journal.set_alerts() == {}
        journal.record_alarms([_alarm(1.0, "set")], None)
        assert [game_id for game_id, _, _ in journal.decisions()] == [1]
    finally:
        journal.close()
    with JournalView(journal.path) as view:
        assert not any(walk.breaks for walk in view.walks().values())
        assert [row[2:4] for row in view.alarms()] == [("deviation", "set")]


def test_a_malformed_set_alerts_row_is_forgotten(journal: Journal) -> None:
    journal.record_alarms([], {"deviation": {"since": 1.0}})
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("UPDATE state SET value = '[oops' WHERE key = 'set_alerts'")
    db.close()
    assert reopen_set_alerts(journal) == {}


def test_a_journal_from_before_the_alarms_table_reads_without_alarms(journal: Journal) -> None:
    play(journal, 1)
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("DROP TABLE alarms")
    db.close()
    with JournalView(journal.path) as view:
        assert view.alarms() == [] and "alarms" not in view.walks()
        assert [game_id for _, game_id, _ in view.decisions()] == [1]


# -- game ids reserved in blocks; a game's start without an fsync -----------------------

BOOT = "3f0c7a9e-boot-a"
REBOOTED = "8d41b2c6-boot-b"


def spin(journal: Journal, game_id: int) -> list[int]:
    """Journal a game's start as the daemon does: ``spinning``, the game open."""
    return journal.record(
        [GameRecord(game_id, "spinning", "{}")],
        [Outgoing("t/game", "{}")],
        EngineState(next_game_id=game_id + 1, open_game=game_id),
    )


def synchronous(journal: Journal) -> str:
    """The mode the journal's last commit was made in (it is set before each one)."""
    mode = journal._db.execute("PRAGMA synchronous").fetchone()[0]
    return {1: "NORMAL", 2: "FULL"}[mode]


def crash(journal: Journal) -> None:
    """Let go of the journal as a killed process would: no clean close written."""
    journal._db.close()
    del journal._db
    for fd in journal._locks:
        os.close(fd)
    journal._locks = ()


def game_ids(state_dir: Path) -> str:
    return (state_dir / GAME_IDS_FILE).read_text()


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every os.fsync the journal makes itself (those of game-ids)."""
    made: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        made.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return made


def test_a_games_start_within_the_block_pays_no_fsync(state_dir: Path, fsyncs: list[int]) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    spin(journal, 1)  # reserves the block, and marks the run open: fsync'd
    assert game_ids(state_dir) == "100 0\n" and synchronous(journal) == "FULL"
    play(journal, 1)
    assert synchronous(journal) == "FULL"  # a result is durable before it is published
    fsyncs.clear()
    for game_id in range(2, 101):
        spin(journal, game_id)
        assert synchronous(journal) == "NORMAL"
        journal.record(
            [GameRecord(game_id, "no_more_bets", "{}")],
            [Outgoing("t/game", "{}")],
            EngineState(next_game_id=game_id + 1, open_game=game_id),
        )
        assert synchronous(journal) == "NORMAL"
        play(journal, game_id)
        assert synchronous(journal) == "FULL"
    assert fsyncs == [] and game_ids(state_dir) == "100 0\n"
    spin(journal, 101)  # the next block: game-ids is written (file and directory)
    assert len(fsyncs) == 2 and game_ids(state_dir) == "200 0\n"
    assert synchronous(journal) == "NORMAL"
    journal.close()
    assert game_ids(state_dir) == "101 0\n"  # a clean close: down to the last id used


def test_an_alarm_with_a_games_start_is_fsynced(journal: Journal) -> None:
    spin(journal, 1)
    journal.record(
        [GameRecord(2, "spinning", "{}")],
        [Outgoing("t/game", "{}"), Outgoing("t/alarm", "{}")],
        EngineState(next_game_id=3, open_game=2),
        alarm=True,
    )
    assert synchronous(journal) == "FULL"
    journal.record([], [Outgoing("t/alarm", "{}")], EngineState(next_game_id=3, open_game=2))
    assert synchronous(journal) == "FULL"


def test_a_clean_restart_goes_on_by_one(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    play(journal, 1)
    spin(journal, 2)
    journal.close()
    for boot in (BOOT, REBOOTED):  # closed cleanly: nothing was lost, whatever the boot
        journal = Journal(state_dir / JOURNAL, boot_id=boot)
        assert journal.warnings == [] and not journal.lost
        assert journal.load_state() == EngineState(next_game_id=3, open_game=2)
        journal.close()


_KILLED_MID_GAME = """
import os, signal, sys
from pathlib import Path
from wheeld.table.effects import GameRecord, Outgoing
from wheeld.core.engine import EngineState
from wheeld.shell.journal import Journal

journal = Journal(Path(sys.argv[1]), boot_id=sys.argv[2])
for game_id in range(1, 6):
    journal.record([GameRecord(game_id, "spinning", "{}")], [Outgoing("t/game", "{}")],
                   EngineState(next_game_id=game_id + 1, open_game=game_id))
    if game_id < 5:
        journal.record([GameRecord(game_id, "result", "{}", "7")], [Outgoing("t/game", "{}")],
                       EngineState(next_game_id=game_id + 1))
os.kill(os.getpid(), signal.SIGKILL)  # mid-game 5, its spinning committed without an fsync
"""


def test_a_process_killed_mid_game_goes_on_by_one(state_dir: Path) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_GAME, str(state_dir / JOURNAL), BOOT],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    assert game_ids(state_dir) == "100 0\n"
    # The same boot: the kernel kept every commit, the journal is complete.
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    assert journal.warnings == [] and not journal.lost
    assert journal.load_state() == EngineState(next_game_id=6, open_game=5)
    assert journal.decisions()[-1][:2] == (5, "spinning")
    journal.close()


def test_a_power_cut_that_took_a_games_start_skips_the_reserved_block(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    for game_id in (1, 2, 3):
        play(journal, game_id)
    # What is on the disk after game 3's fsync'd result ...
    saved = {
        name: (state_dir / name).read_bytes()
        for name in (JOURNAL, JOURNAL + "-wal")
        if (state_dir / name).exists()
    }
    spin(journal, 4)  # ... published, but not fsync'd: a power cut takes it
    crash(journal)
    for name in (JOURNAL, JOURNAL + "-wal", JOURNAL + "-shm"):
        (state_dir / name).unlink(missing_ok=True)
    for name, data in saved.items():
        (state_dir / name).write_bytes(data)
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)
    assert [game_id for game_id, _, _ in journal.decisions()] == [1, 2, 3]
    assert journal.lost
    assert journal.warnings == [
        f"{journal.path}: the last run did not close cleanly and the machine restarted since:"
        " its last commits, made without an fsync, may be lost; game ids continue from 101"
        f" ({state_dir / GAME_IDS_FILE})"
    ]
    assert journal.load_state() == EngineState(next_game_id=101)
    # Killed again before a game: still told, still past the block.
    crash(journal)
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)
    assert journal.lost and journal.load_state() == EngineState(next_game_id=101)
    spin(journal, 101)
    assert game_ids(state_dir) == "200 0\n"
    crash(journal)
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)  # the same boot: complete again
    assert journal.warnings == []
    assert journal.load_state() == EngineState(next_game_id=102, open_game=101)
    journal.close()


def test_an_unknown_boot_takes_an_unclean_close_as_a_power_cut(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wheeld.shell.journal.marks

    monkeypatch.setattr(wheeld.shell.journal.marks, "BOOT_ID_FILE", state_dir / "no-such-boot-id")
    journal = Journal(state_dir / JOURNAL)
    spin(journal, 1)
    crash(journal)
    journal = Journal(state_dir / JOURNAL)
    # Game 1 stays open, for the engine to void; the next game is past the block.
    assert journal.lost and journal.load_state() == EngineState(next_game_id=101, open_game=1)
    journal.close()


def test_the_boot_id_is_the_kernels(journal: Journal) -> None:
    from wheeld.shell.journal import BOOT_ID_FILE

    if not BOOT_ID_FILE.exists():
        pytest.skip("no boot id from this kernel")
    assert journal._boot_id == BOOT_ID_FILE.read_text().strip()


def test_an_older_journal_is_found_behind_a_clean_close(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    play(journal, 1)
    play(journal, 2)
    journal.close()
    copy = {name: (state_dir / name).read_bytes() for name in (JOURNAL,)}
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    for game_id in (3, 4, 5):
        play(journal, game_id)
    journal.close()
    assert game_ids(state_dir) == "5 0\n"
    for name, data in copy.items():
        (state_dir / name).write_bytes(data)
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    assert journal.lost
    assert "the journal ends at game 2" in journal.warnings[0]
    assert journal.warnings[0].endswith("game ids continue from 6")
    assert journal.load_state() == EngineState(next_game_id=6)
    journal.close()


def test_an_older_journal_from_an_earlier_block_is_found(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    play(journal, 1)
    journal.close()
    copy = (state_dir / JOURNAL).read_bytes()
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    for game_id in range(2, 151):
        spin(journal, game_id)
    crash(journal)  # not closed cleanly: game-ids still reserves the second block
    assert game_ids(state_dir) == "201 0\n"  # blocks from 2 (after the close), then 102
    for name in (JOURNAL + "-wal", JOURNAL + "-shm"):
        (state_dir / name).unlink(missing_ok=True)
    (state_dir / JOURNAL).write_bytes(copy)
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    assert journal.lost and journal.load_state() == EngineState(next_game_id=202)
    journal.close()


def test_a_journal_without_a_game_never_brings_the_mark_down(state_dir: Path) -> None:
    state_dir.mkdir()
    Journal(state_dir / JOURNAL).close()  # a journal, no game in it
    (state_dir / GAME_IDS_FILE).write_text("999\n")
    journal = Journal(state_dir / JOURNAL)
    journal.save_table_state("closed")
    journal.close()
    assert game_ids(state_dir) == "999\n"  # untouched
    journal = Journal(state_dir / JOURNAL)
    assert journal.load_state() == EngineState(next_game_id=1000)
    journal.close()


def test_a_lost_journal_closed_before_any_game_is_still_lost_at_the_next_start(
    state_dir: Path,
) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    spin(journal, 1)
    crash(journal)
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)
    assert journal.lost
    journal.close()  # a clean close, but nothing past the block was recorded
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)
    assert journal.lost and journal.load_state() == EngineState(next_game_id=101, open_game=1)
    spin(journal, 101)
    journal.close()
    assert game_ids(state_dir) == "101 0\n"
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    assert not journal.lost and journal.load_state() == EngineState(next_game_id=102, open_game=101)
    journal.close()


def test_a_power_cut_restarts_the_chain_past_every_reserved_seq(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    _signed_games(journal, 3)
    crash(journal)
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)
    assert journal.lost and journal.load_chain() == ChainState(1002, None)
    journal.close()


def test_a_journal_from_an_older_wheeld_behind_the_mark_is_older(state_dir: Path) -> None:
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    play(journal, 1)
    journal.close()
    with sqlite3.connect(journal.path) as db:  # as an older wheeld left it
        db.execute("DELETE FROM state WHERE key IN ('game_ids', 'run')")
    db.close()
    (state_dir / GAME_IDS_FILE).write_text("7 0\n")  # its per-game mark, ahead
    journal = Journal(state_dir / JOURNAL, boot_id=BOOT)
    assert journal.lost and journal.load_state() == EngineState(next_game_id=8)
    journal.close()
    (state_dir / GAME_IDS_FILE).write_text("8 0\n")
    with sqlite3.connect(journal.path) as db:
        db.execute("DELETE FROM state WHERE key IN ('game_ids', 'run')")
        db.execute("""UPDATE state SET value = '{"next_game_id": 9}' WHERE key = 'engine'""")
    db.close()
    journal = Journal(state_dir / JOURNAL, boot_id=REBOOTED)  # level with it: complete
    assert not journal.lost and journal.load_state() == EngineState(next_game_id=9)
    journal.close()


def test_both_blocks_due_at_once_are_one_write(journal: Journal, fsyncs: list[int]) -> None:
    journal.record(
        [GameRecord(1, "spinning", "{}")],
        [Outgoing("t/game", "{}")],
        EngineState(next_game_id=2, open_game=1),
        ChainState(2, "A" * 43),
    )
    assert game_ids(journal.path.parent) == "100 1002\n"
    assert len(fsyncs) == 2  # the file and its directory, once


def test_a_journal_is_its_tables_and_no_other_tables(tmp_path: Path) -> None:
    """Carried into another table's state directory, a journal would go on with that
    table's ids and chain (two tables, one chain, forked): it is refused, untouched."""
    path = tmp_path / JOURNAL
    journal = Journal(path)
    journal.claim_table("T1")
    journal.claim_table("T1")  # its own, again: fine
    journal.close()
    journal = Journal(path)
    with pytest.raises(JournalError, match="this journal is table T1's, not T2's"):
        journal.claim_table("T2")
    journal.close()
    journal = Journal(path)
    journal.claim_table("T1")  # still T1's
    journal.close()


def test_deleting_the_lock_file_lets_no_second_journal_in(journal: Journal) -> None:
    """The directory itself is locked: an operator removing a 'stale' lock file frees nothing."""
    (journal.path.parent / "lock").unlink()
    with pytest.raises(JournalError, match=r"another wheeld.* is using this state directory"):
        Journal(journal.path)
    journal.close()


def test_the_history_a_takeover_adopted_survives_a_restart(journal: Journal) -> None:
    """A start rebuilds the history from the journal: after a takeover, the table's numbers
    it adopted, with this journal's results since, never its own older ones."""
    play(journal, 1, "8")  # its own stint, before the takeover
    assert journal.history(5) == ["8"]
    journal.record_takeover(("journal-aaaa", 7, "result"), ["17", "3"])
    assert journal.history(5) == ["17", "3"]
    play(journal, 8, "5")
    journal = reopen(journal)
    assert journal.history(5) == ["5", "17", "3"] and journal.history(2) == ["5", "17"]
    assert journal.taken_from() == ("journal-aaaa", 7, "result")
    journal.record_takeover(("journal-cccc", 9, "no_spin"), [])  # the latest unknown: none
    assert journal.history(5) == []
    journal.close()


@pytest.mark.parametrize(
    "stored", ['{"after": "x", "numbers": []}', '{"numbers": "17"}', "[", '{"after": 0}']
)
def test_an_unreadable_adopted_history_leaves_the_journals_own(
    journal: Journal, stored: str
) -> None:
    play(journal, 1, "8")
    journal.close()
    with sqlite3.connect(journal.path) as db:
        db.execute("INSERT INTO state (key, value) VALUES ('taken_history', ?)", (stored,))
    db.close()
    journal = Journal(journal.path)
    assert journal.history(5) == ["8"]
    journal.close()
