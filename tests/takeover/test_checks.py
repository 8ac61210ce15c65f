"""The takeover checks bite: each thing consumers must never see is found, and a clean
record (duplicates included) passes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.takeover.checks import judge, marker_seq, regressions, sequence_behind
from wheeld.core.signing import ChainState, Signer, chain

SIGNER = Signer.generate()


class Table:
    """Signs and chains game payloads as a daemon would, from ``seq`` on; ``extra``
    members go into every payload (an ``epoch``, or anything telling two runs apart)."""

    def __init__(self, seq: int = 1, **extra: Any) -> None:
        self.state = ChainState(seq)
        self.extra = extra

    def say(self, game_id: int, event: str, **members: Any) -> dict[str, Any]:
        payload = {"event": event, "game_id": game_id, "table": "T", **self.extra, **members}
        signed, self.state = chain(payload, self.state, SIGNER)
        return signed


def _games(table: Table, *game_ids: int) -> list[dict[str, Any]]:
    said = []
    for game_id in game_ids:
        said += [table.say(game_id, e) for e in ("spinning", "no_more_bets", "result")]
    return said


def _kinds(received: list[Any], **options: Any) -> list[str]:
    return [problem.kind for problem in judge(received, SIGNER.public_key, **options)]


def test_a_clean_record_with_duplicates_passes() -> None:
    said = _games(Table(), 1, 2, 3)
    assert judge(said + said[2:5] + [said[-1]], SIGNER.public_key) == []


def test_a_void_of_a_game_never_announced_passes() -> None:
    table = Table()
    said = [*_games(table, 1), table.say(2, "no_spin", reason="controller_restart")]
    assert judge(said, SIGNER.public_key) == []


def test_a_seq_reused_by_another_game_is_found() -> None:
    first = Table()
    said = [*_games(first, 1), first.say(2, "spinning")]
    again = Table(seq=4)  # a successor that went on from game 1's end: seq 4 again
    said += [again.say(2, "spinning", ball_direction="cw"), again.say(2, "no_spin")]
    kinds = _kinds(said)
    assert "seq reused" in kinds
    assert "game event repeated" in kinds


def test_two_ends_and_an_event_after_the_end_are_found() -> None:
    table = Table()
    said = _games(table, 1)
    said.append(table.say(1, "no_spin", reason="controller_restart"))
    said.append(table.say(1, "no_more_bets", late=True))
    kinds = _kinds(said)
    assert "ended twice" in kinds
    assert "event after its end" in kinds


def test_a_game_never_ended_is_found_unless_exempt() -> None:
    table = Table()
    said = [*_games(table, 1), table.say(2, "spinning")]
    assert _kinds(said) == ["never ended"]
    assert _kinds(said, exempt={(2,)}) == []


def test_a_bad_signature_is_found() -> None:
    said = _games(Table(), 1)
    said[1] = {**said[1], "ts": "forged"}
    assert _kinds(said) == ["signature"]


def test_per_epoch_ids_may_start_again_in_a_new_epoch_only() -> None:
    said = _games(Table(epoch="a"), 1, 2) + _games(Table(epoch="b"), 1)
    assert _kinds(said, per_epoch=True) == []
    assert "seq reused" in _kinds(said)  # without per_epoch, seqs are the table's alone
    same = _games(Table(epoch="a"), 1) + _games(Table(epoch="a", run=2), 1)
    kinds = _kinds(same, per_epoch=True)
    assert "seq reused" in kinds and "game event repeated" in kinds


def test_without_an_epoch_a_restart_from_one_is_found_per_epoch_too() -> None:
    said = _games(Table(), 1, 2) + _games(Table(run=2), 1)
    assert "seq reused" in _kinds(said, per_epoch=True)


@pytest.mark.parametrize(
    ("sequence", "seq"),
    [
        ({"game_id": 3, "event": "result", "seq": 9}, 9),
        ({"intent": {"event": "result", "seq": 9}}, 9),
        ({"game_id": 3}, None),
        ("junk", None),
    ],
)
def test_the_marker_seq_is_read_from_the_marker_or_the_message_it_carries(
    sequence: Any, seq: int | None
) -> None:
    assert marker_seq(sequence) == seq


def test_a_retained_sequence_behind_what_consumers_saw_is_found() -> None:
    said = _games(Table(), 1, 2)
    assert sequence_behind({"seq": 6}, said) is None
    assert sequence_behind({"intent": {"seq": 6}}, said) is None
    behind = sequence_behind({"seq": 5}, said)
    assert behind is not None and "seq 5" in behind.key and "seq 6" in behind.key


def test_regressions_name_a_retained_value_going_back() -> None:
    results = [{"game_id": 1}, {"game_id": 3}, {"game_id": 2}, {"game_id": 4}]
    assert regressions(results, "game_id") == [({"game_id": 3}, {"game_id": 2})]
