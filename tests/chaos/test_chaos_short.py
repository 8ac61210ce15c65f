"""The chaos suite's short run (CI): every fault thrown once at a real daemon.

The long run is ``python -m tests.chaos.run --minutes N`` (docs/testing.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.faults import FAULTS, SHORT, Unavailable, inject
from tests.chaos.harness import ChaosBroker, chaos_rig, check, write_chaos_config
from wheeld.shell.presence import EX_CONFIG
from wheeld.testing.rig import DaemonProcess, wait_for

pytestmark = pytest.mark.chaos

#: Fixed so CI is reproducible; set WHEELD_CHAOS_SEED to explore elsewhere.
SEED = int(os.environ.get("WHEELD_CHAOS_SEED", "9"))


@pytest.mark.parametrize("names", SHORT, ids=["+".join(names) for names in SHORT])
def test_faults_lose_and_invent_nothing(names: tuple[str, ...], tmp_path: Path) -> None:
    with chaos_rig(tmp_path, seed=SEED) as rig:
        try:
            for name in names:
                inject(rig, name)
        except Unavailable as missing:
            pytest.skip(str(missing))
        verdict = rig.finish()
    assert verdict.ok, f"{' + '.join(names)}: {verdict.summary()}\nlogs in {tmp_path}"
    assert verdict.games >= 1 + 2 * len(names), verdict.summary()


def test_every_fault_is_in_ci() -> None:
    assert sorted(name for names in SHORT for name in names) == sorted(FAULTS)


def test_a_newcomer_is_refused_even_when_the_first_just_connected(
    tmp_path: Path,
) -> None:
    broker = ChaosBroker(tmp_path)
    broker.start()
    daemons: list[DaemonProcess] = []
    try:
        for number in (1, 2):
            home = tmp_path / f"daemon-{number}"
            home.mkdir()
            config = home / "wheeld.toml"
            write_chaos_config(
                config, link=home / "wheel", broker=broker.port, state=home / "state"
            )
            daemons.append(DaemonProcess(config, home))
        first, second = daemons
        # As after a broker restart: the first has only just (re)connected.
        first.start()
        wait_for(lambda: _said(first, "broker connected"), 15, "the first daemon connected")
        second.start()
        # The newcomer reads the first one's retained status, naming another
        # instance, before it connects with the table's client id: it stops there.
        newcomer = second.process
        assert newcomer is not None
        wait_for(lambda: newcomer.poll() is not None, 30, "the newcomer to give up")
        assert newcomer.returncode == EX_CONFIG, second.logs()
        assert "another wheeld" in second.logs()
        assert not _said(first, "another")
    finally:
        for daemon in daemons:
            daemon.ensure_stopped()
        broker.stop()


def _said(daemon: DaemonProcess, words: str) -> bool:
    return any(words in str(line.get("event")) for line in daemon.log_lines())


# -- the checker itself ----------------------------------------------------------


def _game(game_id: int, *events: str) -> list[tuple[int, str, str]]:
    return [
        (game_id, event, json.dumps({"event": event, "game_id": game_id, "table": "T"}))
        for event in events
    ]


def _payloads(rows: list[tuple[int, str, str]]) -> list[Any]:
    return [json.loads(payload) for _, _, payload in rows]


def test_check_accepts_duplicates() -> None:
    journal = _game(1, "spinning", "no_more_bets", "result") + _game(2, "spinning", "no_spin")
    received = _payloads(journal + journal[:2])
    verdict = check(journal, received)
    assert verdict.ok, verdict.summary()
    assert (verdict.games, verdict.duplicates) == (2, 2)


@pytest.mark.parametrize(
    ("journal", "received", "words"),
    [
        (_game(1, "spinning", "result"), _payloads(_game(1, "spinning")), "lost:"),
        (
            _game(1, "spinning", "result"),
            _payloads(_game(1, "spinning", "result", "no_spin")),
            "invented:",
        ),
        (_game(1, "spinning", "result", "no_spin"), [], "ended 2 times"),
        (_game(1, "spinning"), [], "ended 0 times"),
        (_game(2, "spinning", "result") + _game(1, "spinning", "result"), [], "opened after 2"),
        (_game(1, "result"), [], "before its spinning"),
        (_game(1, "spinning", "result", "no_more_bets"), [], "went on after its end"),
        (_game(1, "spinning", "result"), _payloads(_game(1, "result", "spinning")), "arrived as"),
    ],
    ids=[
        "lost",
        "invented",
        "ended-twice",
        "never-ended",
        "id-reused",
        "no-spinning",
        "after-end",
        "order",
    ],
)
def test_check_refuses(
    journal: list[tuple[int, str, str]], received: list[Any], words: str
) -> None:
    verdict = check(journal, received)
    assert any(words in problem for problem in verdict.problems), verdict.summary()
