"""The followers validate with the contract's models, read leniently (wheeld.contract.lenient).

No third definition of a payload: what the consumer, the marquee and the display
accept is the contract's, so a state or a member the daemon says is one they
understand (a consumer that knew only ``online`` and ``offline`` showed a table
in ``fault`` as online).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest

from tests.captures.regenerate import golden_pairs
from tests.captures.signed import TEST_KEY
from tests.test_contract import _replay_topics
from tests.test_display import WrittenLink
from wheeld.contract import topics
from wheeld.contract.lenient import lenient
from wheeld.followers.consumer import (
    Dropped,
    NoSpinMessage,
    StatusMessage,
    WheelMessage,
    parse,
)
from wheeld.followers.display import BLANK_LINE, Display
from wheeld.followers.marquee.board import Board

BASE = "wheeld/T9"
#: The topics a follower reads (the marquee follows them all).
FOLLOWED = {"status", "history", "table", "wheel", "result", "game"}


def _parse(kind: str, body: dict[str, Any], pockets: int | None = None) -> Any:
    return parse(BASE, "T9", f"{BASE}/{kind}", json.dumps(body).encode(), pockets)


@pytest.mark.parametrize("state", get_args(topics.Status.model_fields["state"].annotation))
def test_every_status_the_contract_allows_is_understood(state: str) -> None:
    message = _parse("status", {"state": state, "schema_version": 1})
    assert isinstance(message, topics.Status) and message.state == state
    board = Board(base=BASE, language="en")
    board.apply(message)
    assert board.snapshot()["online"] is (state == "online")


def test_a_display_blanks_while_its_daemon_is_in_fault() -> None:
    link = WrittenLink()
    display = Display(link)
    display.on_feed(True)
    display.on_message(_parse("result", {"event": "result", "game_id": 1, "number": "7"}))
    display.on_message(_parse("status", {"state": "fault", "fault": "journal_unwritable"}))
    assert link.lines[-1] == BLANK_LINE and not display.live
    display.on_message(_parse("status", {"state": "online"}))
    assert link.lines[-1] == b" 7\r\n"


@pytest.mark.parametrize(
    "capture", [capture for capture, _ in golden_pairs()], ids=lambda capture: capture.stem
)
def test_a_follower_accepts_everything_a_daemon_says(capture: Path) -> None:
    """Every message of every golden capture, signed or not, on a topic a follower reads."""
    pockets: int | None = None
    for options in ((), ("--key", str(TEST_KEY))):
        for said in _replay_topics(capture, *options):
            base, kind = said["topic"].rsplit("/", 1)
            if kind not in FOLLOWED:
                continue
            payload = json.dumps(said["payload"]).encode()
            table = base.rsplit("/", 1)[1]  # replay's base topic is wheeld/<table>
            message = parse(base, table, said["topic"], payload, pockets)
            if isinstance(message, topics.Wheel):
                pockets = message.pockets


def test_a_view_ignores_what_it_does_not_read_and_checks_what_it_does() -> None:
    wheel = {"pockets": 38, "link": 5, "counters": "many", "colour": "blue"}
    assert _parse("wheel", wheel).pockets == 38
    with pytest.raises(Dropped, match="pockets"):
        _parse("wheel", {"pockets": 36})
    with pytest.raises(Dropped, match="pockets"):
        _parse("wheel", {"pockets": "38"})  # strict, as the contract: no coercion


def test_reason_codes_are_open_to_a_follower() -> None:
    """A code added to a later wheeld still voids the game on an older board."""
    body = {"event": "no_spin", "game_id": 3, "reason": "ball_on_fire", "reasons": ["x"]}
    message = _parse("game", body)
    assert isinstance(message, NoSpinMessage) and isinstance(message, topics.NoSpin)
    assert message.model_dump()["reason"] == "ball_on_fire"  # no ReasonCode of the contract
    with pytest.raises(Dropped, match="reason"):
        _parse("game", {**body, "reason": ""})


def test_the_views_are_the_contracts_models() -> None:
    for view, model in [
        (StatusMessage, topics.Status),
        (WheelMessage, topics.Wheel),
        (NoSpinMessage, topics.NoSpin),
    ]:
        assert issubclass(view, model)
        assert view.model_config["extra"] == "ignore" and view.model_config["strict"]
    assert set(get_args(StatusMessage.model_fields["state"].annotation)) == {
        "online",
        "offline",
        "fault",
    }


def test_a_view_cannot_read_a_member_the_contract_does_not_have() -> None:
    with pytest.raises(TypeError, match="Status has no member colour"):
        lenient(topics.Status, {"state", "colour"})
    with pytest.raises(TypeError, match="has no member since"):
        lenient(topics.Table, {"state"}, defaults={"since": None})


def test_a_pocket_is_the_contracts_pocket() -> None:
    for number in ("0", "00", "000", "0000", "36"):
        assert _parse("history", {"numbers": [number]}).numbers == [number]
    for number in ("37", "01", "abc", ""):
        with pytest.raises(Dropped, match="not a pocket"):
            _parse("history", {"numbers": [number]})
    with pytest.raises(Dropped, match="37-pocket wheel"):
        _parse("history", {"numbers": ["00"]}, pockets=37)
