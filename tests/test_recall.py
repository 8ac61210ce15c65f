"""wheeld recall: the last games with their events and frames, read beside a running daemon."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_verify import games, write_journal
from wheeld.cli import main
from wheeld.shell.journal import JOURNAL_FILE, Journal
from wheeld.shell.journal import recall as recall_module
from wheeld.shell.journal.recall import frame_line
from wheeld.table.effects import Outgoing


def recall(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["recall", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_recall_works_while_the_daemon_holds_the_journal(tmp_path: Path, capsys: Any) -> None:
    journal = write_journal(tmp_path, games(12))  # open: the state directory is locked
    try:
        status, out, err = recall(capsys, "--state-dir", tmp_path, "--json")
    finally:
        journal.close()
    assert (status, err) == (0, "")
    recalled = [json.loads(line) for line in out.splitlines()]
    assert [game["game_id"] for game in recalled] == list(range(3, 13))  # the last ten, in order
    last = recalled[-1]
    assert [event["event"] for event in last["events"]] == ["spinning", "no_more_bets", "result"]
    assert last["events"][2]["number"] == "17"
    assert last["frames"] == [
        {"t": 1034.0, "dir": "<", "line": "$X,1*00"},
        {"t": 1035.0, "dir": "<", "line": "$X,1*00"},
        {"t": 1036.0, "dir": "<", "line": "$X,1*00"},
    ]


def test_games_another_controller_went_on_past_are_never_recalled_as_results(
    tmp_path: Path, capsys: Any
) -> None:
    """Found by an attack: two daemons started at once for one table; the one that stood
    down had decided games 8-11 itself, never published, while the other announced
    them with other numbers. Its recall (the command line, the MQTT command, the
    archive's gap filling) served its own signed results for them."""
    journal = write_journal(tmp_path, games(12))
    try:
        announced = [
            e for e in journal.pending(0, 1000) if json.loads(e.message.payload)["game_id"] <= 8
        ]
        journal.acknowledge(*announced)
        # Game 8's retained copy had not gone out, its events had: it was announced here.
        journal.enqueue([Outgoing("t/result", json.dumps({"game_id": 8, "event": "result"}))])
        assert journal.supersede(["t/game", "t/result"]) == 13  # games 9-12, 3 events each
    finally:
        journal.close()
    for game_id in (9, 12):
        status, out, err = recall(capsys, "--state-dir", tmp_path, "--game", str(game_id))
        assert (status, out) == (2, "")
        assert err == (
            f"wheeld recall: {tmp_path / JOURNAL_FILE}: game {game_id} was superseded: decided"
            f" here but never announced; another controller's game {game_id} stands\n"
        )
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--json")
    assert status == 0
    assert [json.loads(line)["game_id"] for line in out.splitlines()] == list(range(1, 9))
    # The last three games are the last three the table's own (found by review: the last
    # three ids were taken first, all superseded, and recall said there was no game).
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--json", "--last", "3")
    assert [json.loads(line)["game_id"] for line in out.splitlines()] == [6, 7, 8]
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--game", "8", "--last", "1")
    assert status == 0 and out.startswith("game 8: result 17 black")


def test_recall_of_one_game_and_the_ones_before_it(tmp_path: Path, capsys: Any) -> None:
    write_journal(tmp_path, games(5)).close()
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--game", "3", "--last", "2", "--json")
    assert status == 0
    assert [json.loads(line)["game_id"] for line in out.splitlines()] == [2, 3]


def test_recall_reads_as_a_table(tmp_path: Path, capsys: Any) -> None:
    write_journal(tmp_path, games(2)).close()
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--last", "1")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "game 2: result 17 black"
    assert lines[1].startswith("  2025-01-02T10:02:00.000Z  spinning  (rotor_direction cw")
    # Frame times as the events': ISO 8601 UTC to the millisecond, never epoch seconds.
    assert lines[-1] == "    1970-01-01T00:16:46.000Z < $X,1*00"
    assert "sig" not in out


def test_an_empty_or_missing_journal(tmp_path: Path, capsys: Any) -> None:
    status, _, err = recall(capsys, "--state-dir", tmp_path)
    assert (
        status == 2 and err.strip() == f"wheeld recall: {tmp_path / JOURNAL_FILE}: no journal there"
    )
    Journal(tmp_path / JOURNAL_FILE).close()
    status, out, err = recall(capsys, "--state-dir", tmp_path)
    assert (status, out) == (0, "") and "no game in the journal" in err


def test_a_state_dir_that_cannot_be_looked_at_is_one_line(tmp_path: Path, capsys: Any) -> None:
    """Found by an attack: a name too long (or a directory the operator may not enter)
    was an OSError traceback."""
    state = tmp_path / ("x" * 300)
    status, _, err = recall(capsys, "--state-dir", state)
    assert status == 2
    assert err == f"wheeld recall: {state / JOURNAL_FILE}: cannot look at it: File name too long\n"


@pytest.mark.parametrize("last", ["0", "-1", "ten", "9" * 5000])
def test_a_bad_count_is_refused(tmp_path: Path, capsys: Any, last: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["recall", "--state-dir", str(tmp_path), "--last", last])
    assert exited.value.code == 2
    err = capsys.readouterr().err  # one line, the number cut (5,000 digits: int()'s limit)
    assert err.count("\n") == 1 and f"{last[:40]!r} is not a whole number from 1" in err


@pytest.mark.parametrize("game", [str(2**53), str(10**30)])
def test_a_game_id_past_every_game_is_no_game_not_a_crash(
    tmp_path: Path, capsys: Any, game: str
) -> None:
    """Past SQLite's integers the lookup itself overflowed (a traceback)."""
    write_journal(tmp_path, games(2)).close()
    status, out, err = recall(capsys, "--state-dir", tmp_path, "--game", game)
    assert (status, out) == (2, "")
    assert err.strip() == f"wheeld recall: {tmp_path / JOURNAL_FILE}: no game {game} in the journal"


def test_a_count_past_every_game_recalls_them_all(tmp_path: Path, capsys: Any) -> None:
    write_journal(tmp_path, games(2)).close()
    status, out, _ = recall(capsys, "--state-dir", tmp_path, "--last", str(10**30), "--json")
    assert status == 0
    assert [json.loads(line)["game_id"] for line in out.splitlines()] == [1, 2]


def test_recall_carries_each_game_s_messages_as_published(tmp_path: Path, capsys: Any) -> None:
    """A consumer (the archive) keeps what recall gives: the signed payloads themselves."""
    journal = write_journal(tmp_path, games(3))
    try:
        published = [json.loads(payload) for _, _, payload in journal.decisions()]
        status, out, _ = recall(capsys, "--state-dir", tmp_path, "--json")
    finally:
        journal.close()
    assert status == 0
    recalled = [json.loads(line) for line in out.splitlines()]
    assert [m for game in recalled for m in game["messages"]] == published
    assert all(game["messages"] == game["events"] for game in recalled)


@given(
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**40), 2**40),
    st.sampled_from(["<", ">", "!"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=80),
    st.integers(1, 2**53 - 1),
)
def test_an_export_frame_line_is_what_json_writes(
    t: float, direction: str, line: str, game_id: int
) -> None:
    expected = json.dumps({"frame": {"t": t, "dir": direction, "line": line, "game_id": game_id}})
    assert frame_line(t, direction, line, game_id) == expected


# -- export: the same file whichever way it is written ----------------------------------------


def _journal_of_lines(state_dir: Path, count: int) -> Journal:
    """Signed games with the traffic between them (heartbeats, a line with quotes and a
    backslash), each game's block leading with it; the last game's lines still open (the
    journal is left open)."""
    from wheeld.core.engine import EngineState
    from wheeld.core.signing import ChainState, digest
    from wheeld.table.effects import FrameRecord, GameRecord, Outgoing

    journal = Journal(state_dir / JOURNAL_FILE)
    at, beat = 1000.0, 0
    for message in games(count):
        game_id = message["game_id"]
        frames = []
        for _ in range(5):  # between games, then during the game
            beat += 1
            at += 0.25
            line = f"$WRHBT,{beat},{int(at * 1000)}*{beat % 256:02X}".encode()
            frames.append(FrameRecord(at, "<", line, None if beat % 3 else game_id))
        frames.append(FrameRecord(at + 0.1, ">", b'say "hi" \\ there', game_id))
        frames.append(FrameRecord(at + 0.2, "<", b"$WRPOC,7,0*0A", game_id))
        at += 0.2
        journal.record_frames(frames)
        body = json.dumps(message)
        journal.record(
            [GameRecord(game_id, message["event"], body)],
            [Outgoing("t/game", body)],
            EngineState(next_game_id=game_id + 1),
            ChainState(message["seq"] + 1, digest(message)),
        )
    return journal


def _export_as_before(state_dir: Path) -> str:
    """An export written as it was before the work was spread: a game's frames (through
    ``JournalView.frames``), then its payloads, a ``frame_line`` and a ``\\n`` at a time."""
    from wheeld.shell.journal import JournalView

    with JournalView(state_dir / JOURNAL_FILE) as view:
        header = next(recall_module.export_text(view, workers=1))
        out, written = [header], set()
        for _, gid, payload in view.decisions():
            if gid not in written:
                written.add(gid)
                out += [frame_line(f.t, f.dir, f.line, gid) + "\n" for f in view.frames([gid])[gid]]
            out.append(payload + "\n")
    return "".join(out)


def test_an_export_is_the_same_file_in_one_process_or_in_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker processes decode runs of games: the file is byte for byte the one written in
    one process, a line at a time, a damaged block's line and the open lines included."""
    import sqlite3

    from wheeld.shell.journal import JournalView

    journal = _journal_of_lines(tmp_path, 12)
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        db.execute("UPDATE frame_blocks SET data = x'01ff' WHERE game_id = 4")
    monkeypatch.setattr(recall_module, "EXPORT_RUN", 5)  # 36 decisions: 8 runs
    expected = _export_as_before(tmp_path)
    assert '"dir": "!", "line": "frame block' in expected
    assert 'say \\"hi\\" \\\\x5C there' in expected  # json's escapes of the capture's text
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        assert db.execute("SELECT COUNT(*) FROM frame_tail WHERE game_id = 12").fetchone()[0]
    written = {}
    try:
        for workers in (1, 2):
            summary = recall_module.ExportSummary()
            with JournalView(tmp_path / JOURNAL_FILE) as view:
                written[workers] = "".join(
                    recall_module.export_text(view, workers=workers, summary=summary)
                )
            assert summary.lines == written[workers].count("\n")
    finally:
        journal.close()
    assert written[1] == written[2] == expected


async def _ended(worker: Any) -> None:
    """Wait (30 s at most) for the recall process to end. Not ``join`` then ``is_alive``:
    the pool's own thread reaps it too, and a ``join`` that loses that race returns
    with the process reaped but its exit code not yet set (``is_alive`` then says True)."""
    import asyncio

    from wheeld.testing.rig import wait_for

    await asyncio.to_thread(wait_for, lambda: not worker.is_alive(), 30, "the process's end")


async def test_the_daemon_s_recall_is_read_in_a_process_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not in a thread of the daemon (whose Python would hold the GIL from the loop): one
    process, niced behind the daemon, started at the first recall, kept for the next,
    ended after a while idle or at a stop; the reply is the games' JSON, the same as
    ``recall_json`` writes here."""
    import asyncio
    import multiprocessing
    import os

    from wheeld.shell import recall_desk
    from wheeld.shell.journal import JournalError
    from wheeld.shell.journal.recall import recall_json

    write_journal(tmp_path, games(12)).close()
    path = tmp_path / JOURNAL_FILE
    reader = recall_desk.RecallReader(path)
    before = set(multiprocessing.active_children())
    try:
        text = await asyncio.wait_for(reader.read(3, None), timeout=60)
        assert text == recall_json(path, 3, None)
        assert [game["game_id"] for game in json.loads(text)] == [10, 11, 12]
        workers = set(multiprocessing.active_children()) - before
        assert len(workers) == 1
        (worker,) = workers
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert worker.pid is not None
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == min(19, ours + 10), "behind us"
        await asyncio.wait_for(reader.read(1, 4), timeout=60)
        assert set(multiprocessing.active_children()) - before == workers, "the same one"
        with pytest.raises(JournalError, match="no game 99 in the journal"):
            await asyncio.wait_for(reader.read(1, 99), timeout=60)
        reader.close()
        (worker,) = workers
        await _ended(worker)
        monkeypatch.setattr(recall_desk, "RECALL_IDLE_S", 0.05)
        await asyncio.wait_for(reader.read(1, None), timeout=60)
        (worker,) = set(multiprocessing.active_children()) - before
        await _ended(worker)  # once idle
    finally:
        reader.close()


async def test_a_recall_process_that_died_is_said_and_replaced(tmp_path: Path) -> None:
    import asyncio
    import multiprocessing

    from wheeld.shell.journal import JournalError
    from wheeld.shell.recall_desk import RecallReader

    write_journal(tmp_path, games(3)).close()
    reader = RecallReader(tmp_path / JOURNAL_FILE)
    before = set(multiprocessing.active_children())
    try:
        await asyncio.wait_for(reader.read(1, None), timeout=60)
        (worker,) = set(multiprocessing.active_children()) - before
        worker.kill()
        await asyncio.to_thread(worker.join, 30)
        with pytest.raises(JournalError, match="the recall process ended; ask again"):
            await asyncio.wait_for(reader.read(1, None), timeout=60)
        text = await asyncio.wait_for(reader.read(1, None), timeout=60)
        assert [game["game_id"] for game in json.loads(text)] == [3]
    finally:
        reader.close()


#: A daemon's recall, read in its process, the process's id printed; then it waits.
KILLED_DAEMON = """
import asyncio, multiprocessing, sys
from pathlib import Path
from wheeld.shell.recall_desk import RecallReader

reader = RecallReader(Path(sys.argv[1]))
asyncio.run(asyncio.wait_for(reader.read(1, None), timeout=60))
(worker,) = multiprocessing.active_children()
print(worker.pid, flush=True)
sys.stdin.read()
"""


def test_the_recall_process_ends_with_a_killed_daemon(tmp_path: Path) -> None:
    """Found orphaned after the suite's runs: a daemon SIGKILLed (as the tests stop theirs)
    tells its recall process nothing, and that process, and the resource tracker beside
    it, lived on for ever."""
    import os
    import signal
    import subprocess
    import sys

    from wheeld.testing.rig import wait_for

    write_journal(tmp_path, games(3)).close()
    daemon = subprocess.Popen(
        [sys.executable, "-c", KILLED_DAEMON, str(tmp_path / JOURNAL_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert daemon.stdout is not None
    try:
        worker = int(daemon.stdout.readline())
    finally:
        daemon.kill()
        daemon.wait(30)

    def ended() -> bool:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{worker}/stat")
        return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"

    try:
        wait_for(ended, 30, "the recall process's end")
    finally:
        if not ended():
            os.kill(worker, signal.SIGKILL)


async def test_without_a_process_recall_is_read_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shared memory for a process pool's locks (a read-only /dev/shm): a thread."""
    import asyncio

    from wheeld.shell import recall_desk

    def no_pool(*args: Any, **kwargs: Any) -> Any:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", no_pool)
    write_journal(tmp_path, games(3)).close()
    reader = recall_desk.RecallReader(tmp_path / JOURNAL_FILE)
    text = await asyncio.wait_for(reader.read(2, None), timeout=60)
    assert [game["game_id"] for game in json.loads(text)] == [2, 3]
    reader.close()
