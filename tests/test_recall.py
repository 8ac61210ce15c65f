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
from wheeld.shell.journal.recall import frame_line


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


@pytest.mark.parametrize("last", ["0", "-1", "ten"])
def test_a_bad_count_is_refused(tmp_path: Path, capsys: Any, last: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["recall", "--state-dir", str(tmp_path), "--last", last])
    assert exited.value.code == 2


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
