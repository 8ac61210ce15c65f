"""A daemon cut at every publish boundary of a game, a successor taking over each time.

The boundaries come from a reference game the daemon plays through the proxy
(its publish order of the day, never written down here); at each one the
daemon in charge is SIGKILLed, before or after the broker has that PUBLISH,
and a successor takes the table over while the wheel plays on: a standby with
a state directory of its own, the same daemon with its state directory lost,
or the daemon that ran before, back with its old journal. Everything a
persistent subscriber received is then judged (``tests/takeover/checks.py``).

The quick run (a cut just after each game message) is in the normal suite;
``pytest --long tests/takeover`` cuts at every boundary, once per kind of
successor; ``python -m tests.takeover.run`` prints a sweep's whole report.

Any violation fails a test, its report naming the cut, the payloads, who
published them and the defect that likely explains it (``CAUSES`` in
``tests/takeover/rig.py``: the ones these tests found before the marker was
said first and a journal gone past let go of its outbox).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import GAME_TOPIC
from tests.takeover.checks import canonical, carries_epoch
from tests.takeover.plans import SUCCESSORS, after_game_message, every_boundary, quick
from tests.takeover.proxy import Publish, Record
from tests.takeover.rig import (
    CutRecord,
    Outcome,
    Segment,
    Successor,
    run_plan,
    takeover_rig,
)
from wheeld.core.signing import ChainState, Signer, chain

#: Fixed so runs are reproducible; set WHEELD_TAKEOVER_SEED to explore.
SEED = int(os.environ.get("WHEELD_TAKEOVER_SEED", "3"))


def _judge(outcome: Outcome, workdir: Path) -> None:
    """Pass when nothing was found; else fail with the whole report."""
    violations = outcome.violations()
    assert not violations, f"{outcome.report(violations)}\nlogs in {workdir}"


@pytest.mark.chaos
def test_takeover_just_after_each_game_message(tmp_path: Path) -> None:
    with takeover_rig(tmp_path, seed=SEED) as rig:
        plan = quick(rig.reference())
        run_plan(rig, plan)
        outcome = rig.finish()
    assert [cut.successor for cut in outcome.cuts] == ["standby", "lost_disk", "returning"]
    _judge(outcome, tmp_path)


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("successor", SUCCESSORS)
def test_takeover_at_every_boundary(successor: Successor, tmp_path: Path, long_run: bool) -> None:
    if not long_run:
        pytest.skip("every boundary only under --long (minutes): the quick run covers a few")
    with takeover_rig(tmp_path, seed=SEED) as rig:
        boundaries = rig.reference()
        run_plan(rig, every_boundary(boundaries, successor))
        outcome = rig.finish()
    assert len(outcome.cuts) == len(boundaries) >= 2 * 3  # a game has three game messages
    _judge(outcome, tmp_path)


@pytest.mark.chaos
def test_lost_disk_and_forgetful_broker_go_on_in_a_new_epoch(tmp_path: Path) -> None:
    """State directory lost and the broker restarted without its database: ids may start
    again, but only in a new epoch (checked per epoch; the game left open when everything
    that knew it was lost may stay open)."""
    with takeover_rig(tmp_path, seed=SEED) as rig:
        for event in ("spinning", "result"):
            rig.cut(after_game_message(event), "lost_disk", forget=True)
        outcome = rig.finish()
    assert outcome.per_epoch and carries_epoch(outcome.received)
    _judge(outcome, tmp_path)


# -- the judging itself ------------------------------------------------------------


def _outcome(tmp_path: Path, *, marker_seq: int) -> Outcome:
    """Game 1 announced twice under seq 1, by the primary and by the standby that took
    over at a cut where the broker's sequence named ``marker_seq`` (its last game message
    being seq 1)."""
    signer = Signer.generate()
    (tmp_path / "signing.pub").write_bytes(signer.public_pem())
    spinning = {"event": "spinning", "game_id": 1, "table": "T"}
    first, _ = chain({**spinning, "ts": "2025-01-01T00:00:00.000Z"}, ChainState(), signer)
    again, state = chain({**spinning, "ts": "2025-01-01T00:00:09.000Z"}, ChainState(), signer)
    end, _ = chain({"event": "no_spin", "game_id": 1, "table": "T"}, state, signer)
    publish = Publish(GAME_TOPIC, canonical(first).encode(), 1, False, False, 1)
    cut = CutRecord(
        1,
        after_game_message("spinning"),
        "standby",
        "1:primary",
        Record(0, "1:primary", 1, "wheeld-T", publish, True),
        marker_seq=marker_seq,
        game_seq=1,
    )
    segments = [Segment("1:primary", "primary", "a fresh journal", None, ended_by=cut)]
    segments.append(Segment("2:standby-1", "standby-1", "a fresh journal", cut))
    publisher = {canonical(first): "1:primary"}
    publisher.update({canonical(p): "2:standby-1" for p in (again, end)})
    return Outcome(
        received=[first, again, end],
        retained={},
        results=[],
        sequences=[],
        publisher=publisher,
        segments=segments,
        cuts=[cut],
        boundaries=[],
        public_key_path=tmp_path / "signing.pub",
    )


def test_a_violation_fails_naming_its_likely_cause(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path, marker_seq=0)  # the cut left the sequence behind
    with pytest.raises(AssertionError, match="seq reused: seq 1 \\(marker behind\\)"):
        _judge(outcome, tmp_path)


def test_a_violation_nothing_known_explains_fails_too(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path, marker_seq=1)  # the sequence was not behind
    with pytest.raises(AssertionError, match="NO KNOWN CAUSE"):
        _judge(outcome, tmp_path)
