"""wheeld verify: signed, chained messages in a file, an export, and the journal's hash chain."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from wheeld.cli import main
from wheeld.effects import FrameRecord, GameRecord, Outgoing
from wheeld.engine import EngineState
from wheeld.journal import JOURNAL_FILE, Journal
from wheeld.signing import ChainState, Signer, chain
from wheeld.verify import Failure, read_lines

SIGNER = Signer.generate()


def game_events(game_id: int, number: str = "17") -> list[dict[str, Any]]:
    """One whole game's payloads, unsigned, as the pipeline builds them."""
    common = {"game_id": game_id, "table": "T1", "ts": f"2025-01-02T10:{game_id % 60:02d}:00.000Z"}
    return [
        {"event": "spinning", "rotor_direction": "cw", "ball_direction": "ccw", **common},
        {"event": "no_more_bets", **common},
        {"event": "result", "number": number, "color": "black", **common},
    ]


def signed(events: list[dict[str, Any]], state: ChainState | None = None) -> list[dict[str, Any]]:
    """The events chained and signed, as a consumer receives them."""
    state = state or ChainState()
    out = []
    for event in events:
        message, state = chain(event, state, SIGNER)
        out.append(message)
    return out


def games(count: int) -> list[dict[str, Any]]:
    return signed([event for game_id in range(1, count + 1) for event in game_events(game_id)])


def write_journal(state_dir: Path, messages: list[dict[str, Any]]) -> Journal:
    """Journal the messages through the real API, a game per durable commit, with frames."""
    journal = Journal(state_dir / JOURNAL_FILE)
    state = ChainState()
    for message in messages:
        game_id = message["game_id"]
        body = json.dumps(message)
        state = ChainState(message["seq"] + 1, _digest(message))
        journal.record_frames([FrameRecord(1000.0 + message["seq"], "<", b"$X,1*00", game_id)])
        journal.record(
            [GameRecord(game_id, message["event"], body)],
            [Outgoing("t/game", body)],
            EngineState(next_game_id=game_id + 1),
            state,
        )
    return journal


def _digest(message: dict[str, Any]) -> str:
    from wheeld.signing import digest

    return digest(message)


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    path = tmp_path / "signing.pub"
    path.write_bytes(SIGNER.public_pem())
    return path


def verify(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    status = main(["verify", *map(str, args)])
    captured = capsys.readouterr()
    out = (captured.out + captured.err).strip()
    assert "\n" not in out and "Traceback" not in out
    return status, out


def recording(tmp_path: Path, messages: list[dict[str, Any]]) -> Path:
    path = tmp_path / "game.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


# -- a file of messages ---------------------------------------------------------


def test_an_intact_recording_verifies(tmp_path: Path, public_key: Path, capsys: Any) -> None:
    path = recording(tmp_path, games(3))
    assert verify(capsys, "--key", public_key, path) == (0, f"{path}: intact")


def test_a_recording_joined_late_verifies(tmp_path: Path, public_key: Path, capsys: Any) -> None:
    assert verify(capsys, "--key", public_key, recording(tmp_path, games(3)[3:]))[0] == 0


def altered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages[5] = {**messages[5], "number": "0"}
    return messages


def dropped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    del messages[4]
    return messages


def repeated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages.insert(5, messages[4])
    return messages


def reordered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages[3], messages[4] = messages[4], messages[3]
    return messages


def unsigned(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for game_id in range(1, 4) for event in game_events(game_id)]


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (altered, "seq 6 (game 2): bad signature"),
        (dropped, "seq 6 (game 2): gap: seq 5 missing"),
        (repeated, "seq 5 (game 2): repeat of seq 5"),
        (reordered, "seq 5 (game 2): reordered: seq 5 where seq 4 was due"),
        (
            unsigned,
            "game 1 (line 1): unsigned (written by a daemon with signing.required = false?)",
        ),
    ],
)
def test_a_tampered_recording_names_the_first_failing_message(
    tmp_path: Path, public_key: Path, capsys: Any, tamper: Any, expected: str
) -> None:
    path = recording(tmp_path, tamper(games(3)))
    assert verify(capsys, "--key", public_key, path) == (1, f"{path}: {expected}")


def test_a_game_ended_twice_or_never(tmp_path: Path, public_key: Path, capsys: Any) -> None:
    twice = signed([*game_events(1), game_events(1, "5")[2]])
    path = recording(tmp_path, twice)
    assert verify(capsys, "--key", public_key, path) == (
        1,
        f"{path}: seq 4 (game 1): game 1 ended twice",
    )
    never = signed([*game_events(1)[:2], *game_events(2)])
    path = recording(tmp_path, never)
    status, out = verify(capsys, "--key", public_key, path)
    assert (status, out) == (
        1,
        f"{path}: seq 3 (game 2): game 1 never ended (game 2 began after it)",
    )


def test_another_key_is_named(tmp_path: Path, capsys: Any) -> None:
    other = tmp_path / "other.pub"
    other.write_bytes(Signer.generate().public_pem())
    status, out = verify(capsys, "--key", other, recording(tmp_path, games(1)))
    assert status == 1 and "seq 1 (game 1): signed with another key" in out


def test_a_line_that_is_not_json(tmp_path: Path, public_key: Path, capsys: Any) -> None:
    path = tmp_path / "game.jsonl"
    path.write_text(json.dumps(games(1)[0]) + "\n{oops\n")
    assert verify(capsys, "--key", public_key, path) == (1, f"{path}: line 2: not JSON")


def test_bad_arguments_are_one_line_and_exit_2(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    status, out = verify(capsys, "--key", public_key, tmp_path / "missing.jsonl")
    assert status == 2 and "cannot read" in out
    status, out = verify(capsys, "--key", tmp_path / "nokey.pub", recording(tmp_path, games(1)))
    assert status == 2 and out.startswith("wheeld verify: --key:")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path / "nowhere")
    assert status == 2 and "no journal there" in out


# -- the journal ---------------------------------------------------------------------


def test_an_intact_journal_verifies(tmp_path: Path, public_key: Path, capsys: Any) -> None:
    write_journal(tmp_path, games(3)).close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path) == (
        0,
        f"{tmp_path}: intact",
    )


def tamper_with(state_dir: Path, *statements: str) -> None:
    with sqlite3.connect(state_dir / JOURNAL_FILE) as db:
        for statement in statements:
            db.execute(statement)
    db.close()


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (
            ["UPDATE decisions SET payload = replace(payload, '17', '18') WHERE id = 6"],
            "decisions row 6 (game 2): hash does not match",
        ),
        (
            ["DELETE FROM decisions WHERE id = 4"],
            "decisions row 5 (game 2): row 4 before it missing",
        ),
        (
            ["DELETE FROM decisions WHERE id = 9"],
            "decisions row 9: rows after 8 missing (deleted): the journal's head is row 9",
        ),
        (
            [
                "UPDATE decisions SET id = -4 WHERE id = 4",
                "UPDATE decisions SET id = 4 WHERE id = 5",
                "UPDATE decisions SET id = 5 WHERE id = -4",
            ],
            "decisions row 4 (game 2): hash does not match",
        ),
        (
            ["UPDATE commands SET outcome = 'ok' WHERE id = 1"],
            "commands row 1: hash does not match",
        ),
        (
            ["UPDATE frames SET line = replace(line, 'X', 'Y') WHERE game_id = 3"],
            "frames row 7 (game 3): hash does not match",
        ),
        (["DELETE FROM frames WHERE id = 5"], "frames row 6 (game 2): row 5 before it missing"),
        (
            ["DELETE FROM frames WHERE game_id = 2"],
            "frames row 7 (game 3): rows 4-6 before it missing",
        ),
        (
            [
                "UPDATE frames SET id = -3 WHERE id = 3",
                "UPDATE frames SET id = 3 WHERE id = 4",
                "UPDATE frames SET id = 4 WHERE id = -3",
            ],
            "frames row 3 (game 2): hash does not match",
        ),
        (
            ["DELETE FROM frames WHERE id >= 8"],
            "frames row 8: rows after 7 missing (deleted): the journal's head is row 9",
        ),
    ],
    ids=[
        "edited",
        "deleted",
        "deleted-last",
        "reordered",
        "command-edited",
        "frame-edited",
        "frame-deleted",
        "game-frames-deleted",
        "frames-swapped",
        "frames-tail-deleted",
    ],
)
def test_a_tampered_journal_names_the_first_bad_row(
    tmp_path: Path, public_key: Path, capsys: Any, statements: list[str], expected: str
) -> None:
    from wheeld.effects import CommandRecord

    journal = write_journal(tmp_path, games(3))
    journal.record_commands([CommandRecord(1.5, "close", "pit-7", "{}", True, '{"ok": true}')])
    journal.close()
    tamper_with(tmp_path, *statements)
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and out.startswith(f"{tmp_path}: journal: {expected}")


def test_a_rehashed_forgery_still_fails_its_signature(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Whoever recomputes the journal's hashes still cannot sign: the payload check names it."""
    from wheeld.journal import CHAINED, link_hash

    write_journal(tmp_path, games(2)).close()
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        db.execute("UPDATE decisions SET payload = replace(payload, '17', '18') WHERE id = 3")
        previous = ""
        for row in db.execute(
            f"SELECT {', '.join(CHAINED['decisions'])} FROM decisions ORDER BY id"
        ).fetchall():
            previous = link_hash(previous, row)
            db.execute("UPDATE decisions SET hash = ? WHERE id = ?", (previous, row[0]))
        (stored,) = db.execute("SELECT value FROM state WHERE key = 'journal_heads'").fetchone()
        db.execute(
            "UPDATE state SET value = ? WHERE key = 'journal_heads'",
            (json.dumps({**json.loads(stored), "decisions": [6, previous]}),),
        )
    db.close()
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert (status, out) == (1, f"{tmp_path}: seq 3 (game 1): bad signature")


def test_a_broken_journal_goes_on_in_a_new_segment_and_stays_reported(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write_journal(tmp_path, games(2)).close()
    tamper_with(tmp_path, "UPDATE decisions SET event = 'Edited' WHERE id = 2")
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is not None
    assert journal.chain_problem.startswith("decisions row 2 (game 1): hash does not match")
    more = signed(game_events(3), journal.load_chain())
    for message in more:  # the new segment chains on: nothing kept was lost
        body = json.dumps(message)
        journal.record([GameRecord(3, message["event"], body)], [], EngineState(next_game_id=4))
    journal.close()
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is None  # told once, at the start that found it
    assert len(journal.decisions()) == 9
    journal.close()
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "decisions row 2 (game 1): hash does not match" in out


def test_retention_keeps_the_journal_verifiable(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    journal = write_journal(tmp_path, games(5))
    assert journal.prune(keep_games=2) == 9
    assert [game_id for game_id, _, _ in journal.decisions()] == [4, 4, 4, 5, 5, 5]
    journal.close()
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is None
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0
    tamper_with(tmp_path, "DELETE FROM decisions WHERE id = 10")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "decisions row 11 (game 4): row 10 before it missing" in out


# -- an export -------------------------------------------------------------------------


def test_an_export_verifies_and_its_ends_are_anchored(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write_journal(tmp_path, games(5)).close()
    out = tmp_path / "audit.jsonl"
    assert (
        main(
            [
                "export",
                "--state-dir",
                str(tmp_path),
                "--out",
                str(out),
                "--from-game",
                "2",
                "--to-game",
                "4",
                "--key",
                str(public_key),
            ]
        )
        == 0
    )
    capsys.readouterr()
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])["export"]
    assert header["games"] == [2, 4] and header["kid"] == SIGNER.kid
    assert header["anchor"]["start"]["seq"] == 4
    assert sum('"frame"' in line for line in lines) == 9
    assert verify(capsys, "--key", public_key, out) == (0, f"{out}: intact")
    messages = [i for i, line in enumerate(lines) if '"frame"' not in line and i > 0]
    for dropped_line, expected in [(messages[0], "gap"), (messages[-1], "missing at the end")]:
        out.write_text("\n".join(line for i, line in enumerate(lines) if i != dropped_line) + "\n")
        status, said = verify(capsys, "--key", public_key, out)
        assert status == 1 and expected in said


def test_a_member_named_twice_and_an_empty_file_vouch_for_nothing() -> None:
    root = Path(__file__).parent
    lines = (root / "captures" / "signed" / "normal-games.expected.jsonl").read_text().splitlines()
    result = next(number for number, line in enumerate(lines) if '"event":"result"' in line)
    genuine = lines[result]
    lines[result] = genuine[:-1] + ',"number":"0"}'  # a second number after the signed one
    failure = read_lines(lines)
    assert isinstance(failure, Failure) and "'number' appears twice" in failure.why
    empty = read_lines(["", "  "])
    assert isinstance(empty, Failure) and "no message" in empty.why


def test_a_table_whose_key_was_rotated_verifies_with_both_keys(tmp_path: Path) -> None:
    old, new = Signer.generate(), Signer.generate()
    state = ChainState()
    lines = []
    for game_id, signer in ((1, old), (2, new)):
        payload, state = chain({"event": "no_spin", "game_id": game_id}, state, signer)
        lines.append(json.dumps(payload))
    recorded = tmp_path / "rotated.jsonl"
    recorded.write_text("\n".join(lines) + "\n")
    keys = []
    for name, signer in (("old", old), ("new", new)):
        keys.append(tmp_path / f"{name}.pub")
        keys[-1].write_bytes(signer.public_pem())
    assert main(["verify", "--key", str(keys[0]), str(recorded)]) == 1
    assert main(["verify", "--key", str(keys[0]), "--key", str(keys[1]), str(recorded)]) == 0


# -- the frames chain ------------------------------------------------------------------


def test_frames_chain_on_across_reopens_and_every_kind_of_write(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    from wheeld.effects import CommandRecord

    journal = write_journal(tmp_path, games(2))
    journal.record_commands([CommandRecord(1.5, "close", "pit-7", "{}", True, '{"ok": true}')])
    journal.close()
    journal = Journal(tmp_path / JOURNAL_FILE)
    journal.record_frames([FrameRecord(2000.0 + n, ">", b"QRY", None) for n in range(100)])
    journal.save_table_state("open")
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path) == (
        0,
        f"{tmp_path}: intact",
    )


def test_retention_anchors_the_frames_chain_too(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    journal = write_journal(tmp_path, games(5))
    journal.record_frames([FrameRecord(3000.0, "<", b"$X,0*00", None)])
    journal.prune(keep_games=2)
    journal.record_frames([FrameRecord(3001.0, "<", b"$X,0*00", None)])
    journal.close()
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        kept = db.execute("SELECT id, game_id FROM frames ORDER BY id").fetchall()
    db.close()
    assert kept == [(10, 4), (11, 4), (12, 4), (13, 5), (14, 5), (15, 5), (16, None), (17, None)]
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0
    tamper_with(tmp_path, "DELETE FROM frames WHERE id = 10")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "frames row 11 (game 4): row 10 before it missing" in out
