"""wheeld verify: signed, chained messages in a file, an export, and the journal's hash chain."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wheeld.audit import journal_check
from wheeld.audit.verify import MAX_LINE_CHARS, Failure, read_lines
from wheeld.cli import main
from wheeld.core.engine import EngineState
from wheeld.core.signing import ChainState, Signer, chain
from wheeld.shell.journal import JOURNAL_FILE, Journal, Retention
from wheeld.shell.journal.codec import (
    BlockLine,
    decode_block,
    encode_block,
    pack_payload,
    unpack_payload,
)
from wheeld.table.effects import FrameRecord, GameRecord, Outgoing

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
    from wheeld.core.signing import digest

    return digest(message)


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    path = tmp_path / "signing.pub"
    path.write_bytes(SIGNER.public_pem())
    return path


@pytest.fixture(params=["in-process", "in-workers"])
def batches(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A journal's rows judged in this process (fewer than a batch), or in worker processes
    two rows a batch, as a long journal's are: the verdict is the same."""
    if request.param == "in-workers":
        monkeypatch.setattr(journal_check, "SIGNATURE_BATCH", 2)
    return str(request.param)


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
    # An old seq again, another message under it: a forgery, not a redelivery.
    again = dict(messages[2], game_id=99)
    messages.insert(5, again)
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
        (repeated, "seq 3 (game 99): bad signature"),
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


def test_a_message_said_again_right_after_itself_is_dropped(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A broker's redelivery, or a successor saying again what may not have gone out."""
    messages = games(3)
    messages.insert(5, messages[4])
    path = recording(tmp_path, messages)
    assert main(["verify", "--key", str(public_key), str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: epoch (none: an older wheeld): seq 1-9 (9 messages)",
        f"{path}: 1 message(s) said again word for word: dropped",
        f"{path}: intact",
    ]


def test_a_second_signed_message_under_a_seq_seen_is_a_forgery(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Not a redelivery: another message, validly signed, under seq 2 again (the chain
    state it was signed from is the one before seq 2)."""
    messages = games(3)
    another = game_events(1)[1] | {"ts": "2025-01-02T10:01:30.000Z"}
    other = signed([another], ChainState(2, _digest(messages[0])))
    messages.insert(4, other[0])
    path = recording(tmp_path, messages)
    status, out = verify(capsys, "--key", public_key, path)
    assert status == 1 and "a second, different message with seq 2" in out


def test_a_run_in_flight_said_again_after_a_reconnect_is_dropped(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A publisher keeps several messages in flight: after a reconnect the broker may
    deliver a run of them again (seq 4, 5, 6, then 4, 5, 6): a redelivery, word for word,
    not a replay; a consumer drops it, and so does the verifier."""
    messages = games(3)
    messages[6:6] = messages[3:6]
    path = recording(tmp_path, messages)
    assert main(["verify", "--key", str(public_key), str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: epoch (none: an older wheeld): seq 1-9 (9 messages)",
        f"{path}: 3 message(s) said again word for word: dropped",
        f"{path}: intact",
    ]


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


def test_a_line_nested_past_the_recursion_limit_is_not_json(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A consumer's recording with 100 KB of '[' on a line was a RecursionError traceback."""
    path = tmp_path / "game.jsonl"
    path.write_text(json.dumps(games(1)[0]) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    assert verify(capsys, "--key", public_key, path) == (
        1,
        f"{path}: line 2: not JSON (nested too deeply)",
    )


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


def _edit_payload(stored: bytes, old: str, new: str) -> bytes:
    return pack_payload(unpack_payload(stored).replace(old, new))


def _edit_block(stored: bytes, old: str, new: str) -> bytes:
    lines = decode_block(stored)
    return encode_block([BlockLine(x.t_ms, x.dir, x.line.replace(old, new)) for x in lines])


def tamper_with(state_dir: Path, *statements: str) -> None:
    """Run SQL on the journal; ``edit(payload, old, new)`` and ``edit_block(data, old, new)``
    change what a compressed payload or frame block holds, as a forger would."""
    with sqlite3.connect(state_dir / JOURNAL_FILE) as db:
        db.create_function("edit", 3, _edit_payload)
        db.create_function("edit_block", 3, _edit_block)
        for statement in statements:
            db.execute(statement)
    db.close()


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (
            ["UPDATE decisions SET payload = edit(payload, '17', '18') WHERE id = 6"],
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
            ["UPDATE frame_blocks SET data = edit_block(data, 'X', 'Y') WHERE game_id = 3"],
            "frame_blocks row 3 (game 3): hash does not match",
        ),
        (
            ["DELETE FROM frame_blocks WHERE id = 2"],
            "frame_blocks row 3 (game 3): row 2 before it missing",
        ),
        (
            ["DELETE FROM frame_blocks WHERE game_id < 3"],
            "frame_blocks row 3 (game 3): rows 1-2 before it missing",
        ),
        (
            [
                "UPDATE frame_blocks SET id = -1 WHERE id = 1",
                "UPDATE frame_blocks SET id = 1 WHERE id = 2",
                "UPDATE frame_blocks SET id = 2 WHERE id = -1",
            ],
            "frame_blocks row 1 (game 2): hash does not match",
        ),
        (
            ["DELETE FROM frame_blocks WHERE id >= 3"],
            "frame_blocks row 3: rows after 2 missing (deleted): the journal's head is row 3",
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
    tmp_path: Path,
    public_key: Path,
    capsys: Any,
    statements: list[str],
    expected: str,
    batches: str,
) -> None:
    from wheeld.table.effects import CommandRecord

    journal = write_journal(tmp_path, games(3))
    journal.record_commands([CommandRecord(1.5, "close", "pit-7", "{}", True, '{"ok": true}')])
    journal.close()
    tamper_with(tmp_path, *statements)
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and out.startswith(f"{tmp_path}: journal: {expected}")


def rehashed_forgery(state_dir: Path) -> None:
    """Game 1's result changed in row 3, and every decision's hash made again after it."""
    from wheeld.shell.journal import CHAINED, link_hash

    with sqlite3.connect(state_dir / JOURNAL_FILE) as db:
        db.create_function("edit", 3, _edit_payload)
        # The number's JSON string exactly: a bare 17 can be inside the random key id too.
        db.execute("UPDATE decisions SET payload = edit(payload, '\"17\"', '\"18\"') WHERE id = 3")
        previous = ""
        for row in db.execute(
            f"SELECT {', '.join(CHAINED['decisions'])} FROM decisions ORDER BY id"
        ).fetchall():
            previous = link_hash(previous, (*row[:3], unpack_payload(row[3])))
            db.execute("UPDATE decisions SET hash = ? WHERE id = ?", (previous, row[0]))
        (stored,) = db.execute("SELECT value FROM state WHERE key = 'journal_heads'").fetchone()
        last = db.execute("SELECT MAX(id) FROM decisions").fetchone()[0]
        db.execute(
            "UPDATE state SET value = ? WHERE key = 'journal_heads'",
            (json.dumps({**json.loads(stored), "decisions": [last, previous]}),),
        )
    db.close()


def test_a_rehashed_forgery_still_fails_its_signature(
    tmp_path: Path, public_key: Path, capsys: Any, batches: str
) -> None:
    """Whoever recomputes the journal's hashes still cannot sign: the payload check names it."""
    write_journal(tmp_path, games(2)).close()
    rehashed_forgery(tmp_path)
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert (status, out) == (1, f"{tmp_path}: seq 3 (game 1): bad signature")


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (
            "UPDATE decisions SET event = 'Edited' WHERE id = 14",
            "decisions row 14 (game 5): hash does not match",
        ),
        ("DELETE FROM decisions WHERE id = 15", "decisions row 15: rows after 14 missing"),
        ("DELETE FROM frame_blocks WHERE id = 2", "frame_blocks row 3 (game 3): row 2 before"),
    ],
    ids=["decision-edited-later", "last-decision-deleted", "frame-deleted"],
)
def test_a_broken_chain_is_told_before_a_message_that_fails_earlier(
    tmp_path: Path, public_key: Path, capsys: Any, batches: str, statement: str, expected: str
) -> None:
    """The chains are walked as the messages are judged, and the verdict is still the one
    walking them first gave: a break anywhere in any chain, not the bad signature of row 3."""
    write_journal(tmp_path, games(5)).close()
    rehashed_forgery(tmp_path)
    tamper_with(tmp_path, statement)
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and out.startswith(f"{tmp_path}: journal: {expected}"), out


def test_a_read_that_fails_in_the_one_pass_stops_the_other_walk(
    tmp_path: Path, public_key: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other chains' walk (a year's frame blocks: many seconds) is interrupted, not
    waited for, when the decisions' pass fails (or ^C): one line, exit 2, at once."""
    from wheeld.shell.journal import JournalError, JournalView

    write_journal(tmp_path, games(2)).close()
    interrupted = threading.Event()

    def long_walk(self: JournalView, tables: Any = None) -> dict[str, Any]:
        assert interrupted.wait(30), "never interrupted"
        raise JournalError(f"{self.path}: cannot read the journal: interrupted")

    def failing(self: Any, check: Any) -> None:
        raise JournalError(f"{tmp_path}: cannot read the journal: disk I/O error")

    monkeypatch.setattr(JournalView, "walks", long_walk)
    monkeypatch.setattr(JournalView, "interrupt", lambda self: interrupted.set())
    monkeypatch.setattr(journal_check._DecisionsCheck, "verify", failing)
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    said = f"wheeld verify: {tmp_path}: cannot read the journal: disk I/O error"
    assert (status, out) == (2, said)
    assert interrupted.is_set()


def test_the_decisions_walked_with_their_messages_are_walked_as_alone(
    tmp_path: Path, batches: str
) -> None:
    """The one pass over the decisions walks their chain as ``walk`` does: the same first
    break (where it stops), and on an intact chain the same end."""
    from wheeld.audit.journal_check import _DecisionsCheck
    from wheeld.audit.verify import ChainCheck
    from wheeld.shell.journal import JournalView
    from wheeld.shell.journal.chain import walk

    write_journal(tmp_path, games(6)).close()
    tamper_with(
        tmp_path,
        "UPDATE decisions SET event = 'Edited' WHERE id = 5",
        "DELETE FROM decisions WHERE id = 9",
        "UPDATE decisions SET payload = edit(payload, '\"17\"', '\"18\"') WHERE id = 15",
    )
    with JournalView(tmp_path / JOURNAL_FILE) as view:
        alone = walk(view._db, "decisions")
        together = _DecisionsCheck(view.walker("decisions"), [SIGNER.public_key])
        assert together.verify(ChainCheck([SIGNER.public_key])) is None  # ended by the break
        first = together.walked.breaks[0]
    assert alone.breaks[0] == first and first.describe().startswith("decisions row 5 (game 2)")
    intact = tmp_path / "intact"
    intact.mkdir()
    write_journal(intact, games(6)).close()
    with JournalView(intact / JOURNAL_FILE) as view:
        alone = walk(view._db, "decisions")
        together = _DecisionsCheck(view.walker("decisions"), [SIGNER.public_key])
        assert together.verify(ChainCheck([SIGNER.public_key])) is None
    assert together.walked == alone and alone.breaks == [] and alone.end[0] == 18


def test_a_broken_journal_goes_on_in_a_new_segment_and_stays_reported(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    crashed = write_journal(tmp_path, games(2))
    # Killed: what it wrote is past the last checkpoint, walked again at the next start.
    crashed._db.close()
    for fd in crashed._locks:
        os.close(fd)
    crashed._locks = ()
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


def prune(journal: Journal, retention: Retention, now: float = 1e9) -> int:
    """Retention run to its end, a batch at a time, as the daemon runs it."""
    pruner = journal.pruner(retention)
    deleted = 0
    while step := pruner.step(now):
        deleted += step
    return deleted


def test_retention_keeps_the_journal_verifiable(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    journal = write_journal(tmp_path, games(5))
    # Games 1-3 go (decisions and their frame blocks), 4 and 5 are kept.
    assert prune(journal, Retention(keep_games=2), now=0.0) == 9 + 3
    assert [game_id for game_id, _, _ in journal.decisions()] == [4, 4, 4, 5, 5, 5]
    journal.close()
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is None
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0
    tamper_with(tmp_path, "DELETE FROM decisions WHERE id = 10")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "decisions row 11 (game 4): row 10 before it missing" in out


def test_retention_in_a_worker_thread_beside_the_journal_s_writes_keeps_it_verifiable(
    tmp_path: Path, public_key: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step in a thread, on the pruner's own connection, while the journal goes on
    writing on its own: the two take turns at the write lock."""
    import threading

    from wheeld.shell.journal import retention as retention_module

    monkeypatch.setattr(retention_module, "BATCH", {**retention_module.BATCH, "decisions": 6})
    journal = write_journal(tmp_path, games(40))
    pruner = journal.pruner(Retention(keep_games=5))
    deleted: list[int] = []

    def prune_all() -> None:
        while step := pruner.step(0.0):
            deleted.append(step)
        pruner.close()

    worker = threading.Thread(target=prune_all)
    worker.start()
    written = 0
    while worker.is_alive() or written < 20:
        journal.record_frames([FrameRecord(5000.0 + written, "<", b"$X,1*00", 40)])
        written += 1
    worker.join(30)
    assert len(deleted) > 5 and sum(deleted) == 35 * 3 + 35
    assert [game_id for game_id, _, _ in journal.decisions()][::3] == [36, 37, 38, 39, 40]
    journal.close()
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is None
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0


def test_a_game_with_more_decisions_than_a_batch_still_goes_whole(
    tmp_path: Path, public_key: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch smaller than one game's decisions (3 here) takes that game whole in a larger
    one, rather than finding nothing to let go and stopping retention for good."""
    from wheeld.shell.journal import retention as retention_module

    monkeypatch.setattr(retention_module, "BATCH", {**retention_module.BATCH, "decisions": 2})
    journal = write_journal(tmp_path, games(10))
    pruner = journal.pruner(Retention(keep_games=4))
    while pruner.step(0.0):
        pass
    pruner.close()
    assert [game_id for game_id, _, _ in journal.decisions()][::3] == [7, 8, 9, 10]
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0


def test_a_batch_that_held_the_loop_past_its_budget_makes_the_next_smaller(
    tmp_path: Path, public_key: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention's deletes are paced by their wall time (their cost is I/O, not rows):
    past the budget the next batch shrinks (to a floor), under half of it it grows back
    (to ``BATCH``); what goes is the same either way, whole games, still verifiable."""
    from wheeld.shell.journal import retention as retention_module

    monkeypatch.setattr(retention_module, "DELETE_BUDGET_S", 0.0)  # every batch too long
    journal = write_journal(tmp_path, games(40))
    pruner = journal.pruner(Retention(keep_games=5))
    sizes: list[int] = []
    while pruner.step(0.0):
        sizes.append(pruner._rows["decisions"])
    assert sizes[0] == retention_module.BATCH["decisions"], "other tables' steps first"
    assert sizes[-1] == retention_module.MIN_BATCH, "a batch past the budget: to the floor"
    assert [game_id for game_id, _, _ in journal.decisions()][::3] == [36, 37, 38, 39, 40]
    monkeypatch.setattr(retention_module, "DELETE_BUDGET_S", 3600.0)  # every batch short
    pace = retention_module._paced
    budget, least = retention_module.DELETE_BUDGET_S, retention_module.MIN_BATCH
    most = retention_module.BATCH["decisions"]
    pruner._rows["decisions"] = pace(pruner._rows["decisions"], 0.0, budget, least, most)
    assert pruner._rows["decisions"] == retention_module.MIN_BATCH * 3 // 2 + 1
    for _ in range(30):
        pruner._rows["decisions"] = pace(pruner._rows["decisions"], 0.0, budget, least, most)
    assert pruner._rows["decisions"] == retention_module.BATCH["decisions"], "back, no further"
    pruner.close()
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0


def test_the_journal_and_its_pruner_take_turns_at_one_write_lock(tmp_path: Path) -> None:
    """A journal write that meets a step's transaction waits for it on a thread's lock (so
    goes on as soon as it ends), not at SQLite's polls of a busy file (1, 2, 5, 10... up to
    100 ms apart): with SQLite's own wait off it would fail at once."""
    import threading

    journal = write_journal(tmp_path, games(3))
    journal._sql.db.execute("PRAGMA busy_timeout = 0")
    pruner = journal.pruner(Retention())
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pruner._write():
            pruner._db.execute("DELETE FROM alarms WHERE id < 0")
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    threading.Timer(0.1, release.set).start()
    journal.checkpoint()  # a write: waits for the step's transaction, then is made
    assert release.is_set()
    holder.join(10)
    pruner.close()
    journal.close()


def test_the_pruner_leaves_the_log_s_checkpoints_where_the_journal_does(tmp_path: Path) -> None:
    """Its delete runs on the loop: with the checkpoints left to the WAL job's thread, none
    of its commits may run one (fsyncs on the loop)."""
    journal = write_journal(tmp_path, games(2))
    journal.checkpoint_elsewhere()
    pruner = journal.pruner(Retention())
    assert pruner._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    pruner.close()
    journal.close()


def test_retention_gives_the_space_back_to_the_file_system(tmp_path: Path) -> None:
    """Each step returns the pages it freed: ``PRAGMA incremental_vacuum`` run through
    ``execute`` was stepped once, and gave back one page a step."""
    journal = write_journal(tmp_path, games(60))
    assert prune(journal, Retention(keep_games=1), now=0.0) > 0
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as reader:
        (free,) = reader.execute("PRAGMA freelist_count").fetchone()
    journal.close()
    assert free == 0


def test_retention_keeps_the_write_ahead_log_short_from_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``WAL_LIMIT_BYTES`` of log, ``find`` (the worker thread's half) checkpoints it:
    the loop's commit that starts the log over then cuts back little, where a first run's
    deletes left tens of megabytes to cut back on the loop."""
    from wheeld.shell.journal import retention as retention_module

    journal = write_journal(tmp_path, games(20))
    journal.checkpoint_elsewhere()
    pruner = journal.pruner(Retention(keep_games=1))
    checkpoints: list[Path] = []
    left_behind = [3]  # a commit of the loop's, made meanwhile

    def checkpoint(path: Path, write_lock: object, file: object) -> int:
        checkpoints.append(path)
        return left_behind[0]

    monkeypatch.setattr(retention_module, "checkpoint_wal", checkpoint)
    assert pruner.find(0.0) is not None
    assert checkpoints == [], "a short log is left to the WAL job"
    monkeypatch.setattr(retention_module, "WAL_LIMIT_BYTES", 0)
    assert pruner.find(0.0) is not None
    assert checkpoints == [tmp_path / JOURNAL_FILE]
    left_behind[0] = 5000  # a reader's snapshot holds the log: deleting would grow it
    assert pruner.find(0.0) is None
    pruner.close()
    journal.close()


def test_retention_waits_while_a_reader_holds_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader's snapshot (an export, a verify) keeps the checkpoint from copying the log
    back: retention stops its run rather than grow the log the loop must cut back."""
    from wheeld.shell.journal import retention as retention_module

    journal = write_journal(tmp_path, games(20))
    journal.checkpoint_elsewhere()
    monkeypatch.setattr(retention_module, "WAL_LIMIT_BYTES", 0)
    monkeypatch.setattr(retention_module, "LEFT_IN_LOG_MAX", 1)
    pruner = journal.pruner(Retention(keep_games=1))
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM decisions").fetchone()  # its snapshot, held
        journal.record_frames([FrameRecord(1.0, "<", b"$WRHBT,1,1*00", None)])
        assert pruner.find(0.0) is None
        reader.execute("COMMIT")
    assert pruner.find(0.0) is not None
    pruner.close()
    journal.close()


def test_retention_reads_the_database_s_last_pages_before_the_vacuum_moves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``find`` reads, in its thread, the pages the vacuum will move on the loop: the
    database's last ones by its page count (not the file's size, which shrinks only at a
    checkpoint), as many as the next vacuum gives back at most."""
    from wheeld.shell.journal import retention as retention_module

    journal = write_journal(tmp_path, games(30))
    pruner = journal.pruner(Retention(keep_games=1))
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        reads.append((offset, length))
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    assert pruner.find(0.0) is not None
    (count,) = pruner._db.execute("PRAGMA page_count").fetchone()
    (size,) = pruner._db.execute("PRAGMA page_size").fetchone()
    pages = min(retention_module.VACUUM_PAGES, retention_module.BATCH_PAGES_FREED, count)
    assert reads == [((count - pages) * size, pages * size)]
    pruner.close()
    journal.close()


def test_pages_given_back_past_their_budget_make_the_next_step_give_back_fewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vacuum after a delete is paced on its own wall time: past ``VACUUM_BUDGET_S``
    the next step gives back fewer pages (to a floor), and under half of it more again
    (to ``VACUUM_PAGES``); the file still gets them all back in the end."""
    from wheeld.shell.journal import retention as retention_module

    monkeypatch.setattr(retention_module, "VACUUM_BUDGET_S", 0.0)  # every vacuum too long
    journal = write_journal(tmp_path, games(60))
    pruner = journal.pruner(Retention(keep_games=1))
    assert pruner.step(0.0) > 0
    assert pruner._vacuum_pages == retention_module.MIN_VACUUM_PAGES
    monkeypatch.setattr(retention_module, "VACUUM_BUDGET_S", 3600.0)  # every vacuum short
    while pruner.step(0.0):
        pass
    assert pruner._vacuum_pages > retention_module.MIN_VACUUM_PAGES
    pruner._give_back()  # what a short step left free: given back by the next
    pruner.close()
    with contextlib.closing(sqlite3.connect(tmp_path / JOURNAL_FILE)) as reader:
        (free,) = reader.execute("PRAGMA freelist_count").fetchone()
    journal.close()
    assert free == 0


def test_retention_by_age_keeps_a_year_of_decisions_and_a_quarter_of_frames(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    day = 86_400.0
    journal = write_journal(tmp_path, games(5))  # games of 2025-01-02, frames at t = 1000 s
    played = datetime(2025, 1, 2, 10, 30, tzinfo=UTC).timestamp()
    # Ages count to the newest line the journal holds: the wheel talked until a year on.
    journal.record_frames([FrameRecord(played + 401 * day, "<", b"$X,0*00", None)])
    # 100 days later: the frames (at 1970 + 1000 s, long past 90 days) go, the decisions
    # stay; the last game's lines went into a block when the next line came.
    assert prune(journal, Retention(), now=played + 100 * day) == 5
    assert len(journal.decisions()) == 15
    # 401 days later every game is past 400 days: all go, the chain anchored where they ended.
    assert prune(journal, Retention(), now=played + 401 * day) == 15
    assert journal.decisions() == [] and journal.history(10) == []
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0


def test_a_clock_ahead_of_everything_the_journal_holds_takes_nothing(tmp_path: Path) -> None:
    """Back after a long stop, or with a clock set a year ahead: nothing goes before the
    wheel has said a word in that time."""
    journal = write_journal(tmp_path, games(3))
    played = datetime(2025, 1, 2, 10, 30, tzinfo=UTC).timestamp()
    prune(journal, Retention(), now=played + 500 * 86_400.0)
    assert len(journal.decisions()) == 9  # 500 days by the clock, none by the journal
    journal.close()


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
    said = capsys.readouterr().out
    lines = out.read_text().splitlines()
    # The count is the file's, and the times are ISO, as the messages have them.
    assert out.read_bytes().count(b"\n") == len(lines) == 19
    assert said == (
        f"{out}: 19 lines: games 2-4, 9 messages and 9 serial lines, "
        "2025-01-02T10:02:00.000Z to 2025-01-02T10:04:00.000Z\n"
    )
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


def test_the_private_key_given_to_verify_is_named_as_such(tmp_path: Path, capsys: Any) -> None:
    """Found on the first day: `verify --key signing.key` said the library's "Valid PEM but
    no BEGIN PUBLIC KEY/END PUBLIC KEY delimiters"; it names the mistake and the file."""
    private = tmp_path / "signing.key"
    private.write_bytes(SIGNER.private_pem())
    recorded = recording(tmp_path, games(1))
    assert verify(capsys, "--key", private, recorded) == (
        2,
        f"wheeld verify: --key: {private}: a private key (signing.key?), not the public key: "
        "give the signing.pub that wheeld keygen wrote beside it (a verifier needs no secret)",
    )


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
    from wheeld.table.effects import CommandRecord

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
    prune(journal, Retention(keep_games=2), now=0.0)
    journal.record_frames([FrameRecord(3001.0, "<", b"$X,0*00", None)])
    journal.close()
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        kept = db.execute("SELECT id, game_id, lines FROM frame_blocks ORDER BY id").fetchall()
    db.close()
    assert kept == [(4, 4, 3), (5, 5, 3), (6, None, 2)]
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path)[0] == 0
    tamper_with(tmp_path, "DELETE FROM frame_blocks WHERE id = 4")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "frame_blocks row 5 (game 5): row 4 before it missing" in out


# -- epochs ------------------------------------------------------------------------------


def _in_epoch(events: list[dict[str, Any]], epoch: str) -> list[dict[str, Any]]:
    return [{**event, "epoch": epoch} for event in events]


def test_a_new_epoch_is_a_new_chain_said_as_such_never_a_gap(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A journal and the broker's memory both lost: ids start again, in a new epoch; the
    game the old epoch left open could never end (everything that knew it was lost)."""
    old = signed(_in_epoch([*game_events(1), *game_events(2)[:1]], "epoch-aaaaaaaaaaa"))
    new = signed(_in_epoch([*game_events(1, "5"), *game_events(2, "9")], "epoch-bbbbbbbbbbb"))
    path = recording(tmp_path, [*old, *new])
    assert main(["verify", "--key", str(public_key), str(path)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said == [
        f"{path}: epoch epoch-aaaaaaaaaaa: seq 1-4 (4 messages)",
        f"{path}: epoch epoch-bbbbbbbbbbb: seq 1-6 (6 messages)",
        f"{path}: intact",
    ]


def test_a_takeover_goes_on_after_the_last_message_whatever_its_seq(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A standby takes over after the primary's seq 4 (its own chain was at 9): its next
    message names the primary's as prev, the game the primary launched voided once."""
    primary = signed(_in_epoch([*game_events(1), *game_events(2)[:1]], "epoch-primaryaaa"))
    from wheeld.core.signing import digest

    said_again = primary[-1]
    handed = ChainState(10, digest(said_again))
    void = {"event": "no_spin", "game_id": 2, "table": "T1", "reason": "controller_restart"}
    standby = signed(_in_epoch([void, *game_events(3)], "epoch-standbyaaa"), handed)
    path = recording(tmp_path, [*primary, said_again, *standby])
    assert main(["verify", "--key", str(public_key), str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "epoch epoch-standbyaaa: seq 10-13 (4 messages), on from epoch epoch-primaryaaa seq 4"
        in out
    )
    assert "said again word for word" in out and out.endswith(": intact\n")


def _game_3_after_a_floor(journal: Journal, floor: int, theirs: dict[str, Any]) -> None:
    """Game 3 journaled after another controller's message ``theirs`` at seq ``floor``
    (the floor kept, as a takeover keeps it), then the journal closed."""
    from wheeld.core.signing import digest

    journal.record_floor(floor, digest(theirs), 1.0)
    for message in signed(game_events(3), ChainState(floor + 1, digest(theirs))):
        journal.record(
            [GameRecord(3, message["event"], json.dumps(message))],
            [],
            EngineState(next_game_id=4),
            ChainState(message["seq"] + 1, digest(message)),
        )
    journal.close()


def test_a_journal_that_took_a_table_over_verifies(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Its chain jumps to go on after another's message (kept as a floor), and the game it
    had open then was the other's to end: neither is a failure."""
    from wheeld.core.signing import digest

    ours = signed([*game_events(1), *game_events(2)[:1]])  # seq 1-4, game 2 left open
    journal = write_journal(tmp_path, ours)
    void = {"event": "no_spin", "game_id": 2, "table": "T1", "reason": "controller_restart"}
    elsewhere = signed(_in_epoch([void], "epoch-elsewhere"), ChainState(5, digest(ours[-1])))
    _game_3_after_a_floor(journal, 5, elsewhere[-1])
    # Said, not only passed: this journal alone does not hold seq 5 (found: "intact" alone).
    assert main(["verify", "--key", str(public_key), "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path}: epoch (none: an older wheeld): seq 1-8 (7 messages)",
        f"{tmp_path}: went on past another journal's message at seq 5 (a takeover, or a lost"
        " state directory): its messages are in that journal, not a gap",
        f"{tmp_path}: intact",
    ]
    # Its export too (found by an attack: the journal verified, its export said "gap").
    exported = tmp_path / "export.jsonl"
    assert main(["export", "--state-dir", str(tmp_path), "--out", str(exported)]) == 0
    header = json.loads(exported.read_text().splitlines()[0])["export"]
    assert header["floors"] == {"5": digest(elsewhere[-1])}
    capsys.readouterr()
    # The header is not signed: a floor in it is no proof (found by review: a forger who
    # cut messages out copied the next message's prev into a floor, and verify said
    # intact). The jump stays a failure, the floor named as where to look.
    assert main(["verify", "--key", str(public_key), str(exported)]) == 1
    out = capsys.readouterr().out
    assert "gap: seq 5 missing (the export's header, unsigned, says its chain went on" in out
    assert "another controller's message at seq 5" in out


def test_a_journal_that_took_over_level_with_the_other_verifies(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Found by review: two controllers decided the same seqs (both passed the start-up
    check at once); the one that took over went on at its own next seq, after the other's
    message of the seq it had reached too, and verify called that a broken link."""
    from wheeld.core.signing import digest

    ours = signed([*game_events(1), *game_events(2)])  # seq 1-6
    elsewhere = signed(
        _in_epoch(game_events(2, "5"), "epoch-elsewhere"), ChainState(4, digest(ours[2]))
    )
    assert elsewhere[-1]["seq"] == 6
    journal = write_journal(tmp_path, ours)
    _game_3_after_a_floor(journal, 6, elsewhere[-1])
    assert main(["verify", "--key", str(public_key), "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "went on past another journal's message at seq 6" in out and out.endswith(": intact\n")


def test_a_retention_anchor_cannot_hide_rows_deleted_from_the_middle(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Retention only ever lets go of a chain's oldest rows (found: a copied anchor row hid a
    game deleted from the middle, and verify said intact)."""
    write_journal(tmp_path, games(3)).close()
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as db:
        (link,) = db.execute("SELECT hash FROM decisions WHERE id = 6").fetchone()
        db.execute("DELETE FROM decisions WHERE id BETWEEN 4 AND 6")
        db.execute(
            "INSERT INTO anchors (at, chain, after_id, hash, reason) VALUES (0, 'decisions', 6, ?,"
            " 'retention')",
            (link.hex() if isinstance(link, bytes) else link,),
        )
    db.close()
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "decisions row 7 (game 3): rows 4-6 before it missing" in out


def test_a_malformed_anchor_is_one_line_not_a_traceback(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    write_journal(tmp_path, games(2)).close()
    tamper_with(
        tmp_path,
        "INSERT INTO anchors (at, chain, after_id, hash, reason)"
        " VALUES (0, 'decisions', 'abc', 'x', 'retention')",
    )
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "decisions row 0: anchor 1 is malformed" in out
    journal = Journal(tmp_path / JOURNAL_FILE)  # a start says so too, and goes on
    assert journal.chain_problem is not None and "malformed" in journal.chain_problem
    journal.close()


def test_a_checked_mark_that_names_no_row_is_no_proof(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A bogus mark is walked past, not taken as the chain's end (found: the daemon linked
    its own next row to it and broke its own chain)."""
    write_journal(tmp_path, games(2)).close()
    tamper_with(
        tmp_path,
        "UPDATE state SET value = '{\"decisions\": [99999, \"ab\"]}' WHERE key = 'checked'",
    )
    journal = Journal(tmp_path / JOURNAL_FILE)
    assert journal.chain_problem is None
    more = signed(game_events(3), journal.load_chain())
    for message in more:
        body = json.dumps(message)
        journal.record(
            [GameRecord(3, message["event"], body)],
            [],
            EngineState(next_game_id=4),
            ChainState(message["seq"] + 1, _digest(message)),
        )
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path) == (
        0,
        f"{tmp_path}: intact",
    )


def test_a_blocks_times_and_count_are_in_its_hash(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """Retention goes by a block's last time: it is hashed with the block."""
    write_journal(tmp_path, games(3)).close()
    tamper_with(tmp_path, "UPDATE frame_blocks SET last_t = last_t - 1e6 WHERE id = 2")
    status, out = verify(capsys, "--key", public_key, "--state-dir", tmp_path)
    assert status == 1 and "frame_blocks row 2 (game 2): hash does not match" in out


def test_a_journal_that_went_on_past_a_power_cut_verifies(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """After a power cut the chain jumps past every seq reserved (some may have gone out
    unjournaled): kept as a floor, the jump is no gap (found: verify failed for good)."""
    journal = Journal(tmp_path / JOURNAL_FILE, boot_id="boot-a")
    state = ChainState()
    for message in signed(game_events(1)):
        body = json.dumps(message)
        state = ChainState(message["seq"] + 1, _digest(message))
        journal.record(
            [GameRecord(1, message["event"], body)], [], EngineState(next_game_id=2), state
        )
    journal._db.close()  # the power goes: no clean close
    for fd in journal._locks:
        os.close(fd)
    journal._locks = ()
    journal = Journal(tmp_path / JOURNAL_FILE, boot_id="boot-b")
    assert journal.lost
    after = journal.load_chain()
    assert after.seq > 4 and after.prev is None
    for message in signed(game_events(2), after):
        body = json.dumps(message)
        journal.record(
            [GameRecord(2, message["event"], body)],
            [],
            EngineState(next_game_id=3),
            ChainState(message["seq"] + 1, _digest(message)),
        )
    journal.close()
    assert verify(capsys, "--key", public_key, "--state-dir", tmp_path) == (
        0,
        f"{tmp_path}: intact",
    )


def test_an_export_of_a_game_id_past_any_journal_is_one_line(tmp_path: Path, capsys: Any) -> None:
    """Past SQLite's integers (once an OverflowError traceback): no game is past every
    game, and every game is before it."""
    write_journal(tmp_path, games(2)).close()
    out = tmp_path / "audit.jsonl"
    huge = str(10**26)
    export = ["export", "--state-dir", str(tmp_path), "--out", str(out)]
    assert main([*export, "--from-game", huge]) == 1
    err = capsys.readouterr().err
    assert err == "wheeld export: no game in the journal is in that range\n"
    assert not out.exists()
    assert main([*export, "--to-game", huge]) == 0
    assert json.loads(out.read_text().splitlines()[0])["export"]["games"] == [1, 2]


def test_an_export_never_replaces_what_is_not_a_file(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A pipe (or a device: /dev/full was replaced by a regular file) is refused in one
    line and left as it was; a symlink's file is written, the symlink kept."""
    write_journal(tmp_path, games(2)).close()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["export", "--state-dir", str(tmp_path), "--out", str(fifo)]) == 2
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert "not a regular file" in capsys.readouterr().err
    audit, link = tmp_path / "audit.jsonl", tmp_path / "latest.jsonl"
    audit.write_text("old\n")
    link.symlink_to(audit)
    assert main(["export", "--state-dir", str(tmp_path), "--out", str(link)]) == 0
    assert link.is_symlink() and audit.read_text().startswith('{"export"')
    capsys.readouterr()
    assert verify(capsys, "--key", public_key, link) == (0, f"{link}: intact")


def test_two_exports_to_one_file_at_once_each_write_a_whole_one(
    tmp_path: Path, public_key: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found on the first day: two exports to one --out shared one partial file; the
    second truncated it and renamed it away under the first, which then failed with
    `No such file or directory` (and could leave a mix of both). Each writes its own."""
    from wheeld.shell.journal import recall

    write_journal(tmp_path, games(3)).close()
    out = tmp_path / "audit.jsonl"
    export = ["export", "--state-dir", str(tmp_path), "--out", str(out)]
    lines = recall.export_text
    second: list[int | None] = []

    def first_then_second(*args: Any, **kwargs: Any) -> Any:
        for number, line in enumerate(lines(*args, **kwargs)):
            yield line
            if number == 0 and not second:  # the first is writing: the second runs whole
                second.append(None)
                second[0] = main([*export, "--to-game", "2"])

    monkeypatch.setattr(recall, "export_text", first_then_second)
    assert main(export) == 0
    assert second == [0]
    said = capsys.readouterr()
    assert said.err == ""
    assert json.loads(out.read_text().splitlines()[0])["export"]["games"] == [1, 3]
    assert sorted(path.name for path in tmp_path.iterdir() if "audit" in path.name) == [
        "audit.jsonl"
    ]
    assert verify(capsys, "--key", public_key, out) == (0, f"{out}: intact")


def test_an_export_stopped_by_ctrl_c_leaves_no_half_file(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wheeld.shell.journal import recall

    write_journal(tmp_path, games(2)).close()
    lines = recall.export_text

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        yield next(lines(*args, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(recall, "export_text", interrupted)
    out = tmp_path / "audit.jsonl"
    assert main(["export", "--state-dir", str(tmp_path), "--out", str(out)]) == 130
    assert capsys.readouterr().err == "wheeld export: interrupted\n"
    assert not [path.name for path in tmp_path.iterdir() if "audit" in path.name]


def test_an_export_stopped_by_sigterm_leaves_no_half_file(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found on the first day: SIGTERM (not only Ctrl-C) left the partial file."""
    import os
    import signal

    from wheeld.shell.journal import recall

    write_journal(tmp_path, games(2)).close()
    lines = recall.export_text

    def terminated(*args: Any, **kwargs: Any) -> Any:
        yield next(lines(*args, **kwargs))
        # Unhandled, SIGTERM would end this test's process: say so instead.
        assert callable(signal.getsignal(signal.SIGTERM)), "export leaves SIGTERM to kill it"
        os.kill(os.getpid(), signal.SIGTERM)
        yield from lines(*args, **kwargs)  # the handler runs before this goes far

    monkeypatch.setattr(recall, "export_text", terminated)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "audit.jsonl"
    assert main(["export", "--state-dir", str(tmp_path), "--out", str(out)]) == 128 + 15
    assert capsys.readouterr().err == "wheeld export: terminated\n"
    assert not [path.name for path in tmp_path.iterdir() if "audit" in path.name]
    assert signal.getsignal(signal.SIGTERM) == before, "the handler is put back"


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Any:
    """``ulimit -f`` for this process, for the length of the block (SQLite's writes past
    it fail with EFBIG: Python ignores SIGXFSZ)."""
    import resource

    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)


@pytest.mark.parametrize("command", ["recall", "export"])
def test_a_journal_read_under_a_file_size_limit_says_the_limit(
    command: str, tmp_path: Path, capsys: Any
) -> None:
    """Found on the first day: `recall` and `export` under `ulimit -f 4` said SQLite's
    `disk I/O error` (its shared-memory file, 32 KiB, could not be made)."""
    write_journal(tmp_path, games(2)).close()
    argv = [command, "--state-dir", str(tmp_path)]
    if command == "export":
        argv += ["--out", str(tmp_path / "audit.jsonl")]
    with _file_size_limit(4096):
        status = main(argv)
    assert status == 2
    assert capsys.readouterr().err == (
        f"wheeld {command}: {tmp_path / JOURNAL_FILE}: cannot read the journal: this process"
        f" may write no file past 4 KiB (ulimit -f): {JOURNAL_FILE}-shm beside it needs 32 KiB;"
        " raise the limit (SQLite said: disk I/O error)\n"
    )


def test_an_export_past_a_file_size_limit_says_the_limit(tmp_path: Path, capsys: Any) -> None:
    write_journal(tmp_path, games(60)).close()  # an export of some 60 KiB
    out = tmp_path / "audit.jsonl"
    with _file_size_limit(40 * 1024):
        status = main(["export", "--state-dir", str(tmp_path), "--out", str(out)])
    assert status == 2
    assert capsys.readouterr().err == (
        f"wheeld export: --out: {out}: File too large: this process may write no file past"
        " 40 KiB (ulimit -f)\n"
    )
    assert not [path.name for path in tmp_path.iterdir() if "audit" in path.name]


def test_a_file_of_one_endless_line_is_refused_unread(
    tmp_path: Path, public_key: Path, capsys: Any
) -> None:
    """A file of NULs (what a crash can leave) was read as one line as large as the file,
    and /dev/zero for ever; a line past MAX_LINE_CHARS is no message, said at once."""
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_bytes(b"\0" * (MAX_LINE_CHARS + 10) + b"\n")
    assert verify(capsys, "--key", public_key, zeros) == (
        1,
        f"{zeros}: line 1: longer than {MAX_LINE_CHARS} characters: not a message",
    )
    assert verify(capsys, "--key", public_key, "/dev/zero") == (
        1,
        f"/dev/zero: line 1: longer than {MAX_LINE_CHARS} characters: not a message",
    )
