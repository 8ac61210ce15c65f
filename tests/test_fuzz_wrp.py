"""The WRP/1 fuzz target: a short run in CI, and proof that its oracles bite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fuzz import wrp_fuzz
from wheeld.core.events import BallPassed, PocketReading, WheelEvent
from wheeld.core.game import Decision, NoSpin, Result, Spinning
from wheeld.core.open_game import OpenGame
from wheeld.core.rules import RulesConfig
from wheeld.drivers.wrp import WrpDecoder, frame_splitter

#: Fixed so CI is reproducible; set WHEELD_FUZZ_SEED to explore elsewhere.
SEED = int(os.environ.get("WHEELD_FUZZ_SEED", "20240917"))


def test_corpus_is_cut_from_the_golden_captures() -> None:
    expected = wrp_fuzz.corpus_from_captures()
    found = {path.name: path.read_bytes() for path in wrp_fuzz.CORPUS.glob("*.wrp")}
    assert found == expected, "stale seeds: run python -m tests.fuzz.wrp_fuzz --make-corpus"


def test_seeds_pass_every_oracle_byte_by_byte() -> None:
    rules = RulesConfig()
    for seed in wrp_fuzz.load_corpus():
        assert wrp_fuzz.check(seed, [wrp_fuzz.bytewise(seed)], rules) is None


def test_three_seconds_of_fuzzing_find_nothing(tmp_path: Path) -> None:
    report = wrp_fuzz.fuzz(3.0, SEED, tmp_path)
    assert report.failure is None, report.summary()
    assert report.inputs > 0, report.summary()  # how many is speed: not asserted here


_result = OpenGame.result


def _announce_another_number(self: OpenGame, number: str, now: float) -> Result | NoSpin:
    """A broken game: it settles on a pocket next to the one the sensor read."""
    return _result(self, "17" if number != "17" else "18", now)


def test_an_invented_result_is_caught_saved_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(OpenGame, "result", _announce_another_number)
    report = wrp_fuzz.fuzz(20.0, SEED, tmp_path, shrink_s=1.0)

    assert report.failure is not None and report.failure.oracle == "invented"
    assert report.saved is not None and report.saved.exists()
    note = json.loads(report.saved.with_suffix(".json").read_text())
    assert note["seed"] == SEED and note["oracle"] == "invented"
    assert wrp_fuzz.main(["--replay", str(report.saved)]) == 1
    assert "pocket sensor last read" in capsys.readouterr().out
    shrunk = tmp_path / note["shrunk"]
    assert len(shrunk.read_bytes()) < len(report.saved.read_bytes())


def test_a_chunking_dependent_decoder_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = WrpDecoder.feed

    def forgetful(self: WrpDecoder, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        self._frames = frame_splitter()  # the bug: a frame split across reads is lost
        return feed(self, data, now)

    monkeypatch.setattr(WrpDecoder, "feed", forgetful)
    report = wrp_fuzz.fuzz(20.0, SEED, tmp_path, shrink_s=0.0)
    assert report.failure is not None and report.failure.oracle == "chunking"


def test_a_hang_is_bounded() -> None:
    with pytest.raises(wrp_fuzz.InputTimeout), wrp_fuzz.cpu_limit(0.1):
        while True:
            pass


def _launch(tick: int) -> BallPassed:
    return BallPassed(1, tick, "ccw", 0)


def _steps(*pairs: tuple[WheelEvent | None, list[Decision]]) -> list[wrp_fuzz.Step]:
    return [wrp_fuzz.Step(event, decisions) for event, decisions in pairs]


def _passes(count: int) -> list[tuple[WheelEvent | None, list[Decision]]]:
    return [(BallPassed(2 + i, 100 + i, "ccw", 500), []) for i in range(count)]


def test_judge_accepts_a_justified_result() -> None:
    steps = _steps(
        (_launch(0), [Spinning(1, 0.0, "cw", "ccw")]),
        *_passes(3),
        (PocketReading(9, 900, "26"), []),
        (None, [Result(1, 1.0, "26", 3, "cw", "ccw")]),
    )
    assert wrp_fuzz.judge(steps, 3) is None


@pytest.mark.parametrize(
    ("steps", "oracle", "words"),
    [
        (
            _steps((PocketReading(9, 900, "26"), [Result(1, 1.0, "26", 3, "cw", "ccw")])),
            "lifecycle",
            "open None",
        ),
        (
            _steps((PocketReading(9, 900, "26"), [Spinning(1, 0.0, "cw", "ccw")])),
            "invented",
            "without a launch",
        ),
        (
            _steps(
                (_launch(0), [Spinning(1, 0.0, "cw", "ccw")]),
                *_passes(3),
                (PocketReading(9, 900, "26"), []),
                (PocketReading(10, 950, None), []),
                (None, [Result(1, 1.0, "26", 3, "cw", "ccw")]),
            ),
            "invented",
            "last read None",
        ),
        (
            _steps(
                (_launch(0), [Spinning(1, 0.0, "cw", "ccw")]),
                *_passes(2),
                (PocketReading(9, 900, "26"), []),
                (None, [Result(1, 1.0, "26", 3, "cw", "ccw")]),
            ),
            "invented",
            "2 ball passes",
        ),
        (
            _steps(
                (_launch(0), [Spinning(1, 0.0, "cw", "ccw")]),
                (None, [NoSpin(1, 1.0, "frame_loss", ("frame_loss",))]),
                (None, [NoSpin(1, 2.0, "frame_loss", ("frame_loss",))]),
            ),
            "lifecycle",
            "for game 1, open None",
        ),
        (_steps((_launch(0), [Spinning(1, 0.0, "cw", "ccw")])), "lifecycle", "never ended"),
        (_steps((_launch(0), [Spinning(2, 0.0, "cw", "ccw")])), "lifecycle", "expected 1"),
    ],
    ids=[
        "result-without-game",
        "spinning-without-launch",
        "pocket-left",
        "too-few-passes",
        "ended-twice",
        "never-ended",
        "id-skipped",
    ],
)
def test_judge_refuses(steps: list[wrp_fuzz.Step], oracle: str, words: str) -> None:
    failure = wrp_fuzz.judge(steps, 3)
    assert failure is not None and failure.oracle == oracle and words in failure.message
