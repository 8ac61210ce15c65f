"""wheeld on two mosquittos joined by a bridge (MQTT 5) that loses the one wheeld is
connected to in the middle of a game; and what a bridge cannot give: the messages the
lost broker acknowledged and had not yet forwarded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.brokers import BridgedMosquittos, require, start_cluster
from tests.cluster.table import (
    AFTER,
    DURING,
    PUBLIC_KEY,
    ClusterTable,
    assert_every_result_once_in_order,
    assert_retained_right,
    expected_results,
    recall_game,
)
from wheeld.core.signing import load_public_key, signature_problem
from wheeld.testing.rig import MOSQUITTO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture
def bridged(tmp_path: Path) -> Iterator[BridgedMosquittos]:
    """A pair of the test's own: each test kills one (they start in a second)."""
    require(MOSQUITTO, "mosquitto")
    pair = start_cluster(BridgedMosquittos, tmp_path / "brokers")
    try:
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[BridgedMosquittos]:
    """A pair whose bridge runs through a relay the test can hold and cut."""
    require(MOSQUITTO, "mosquitto")
    pair = start_cluster(lambda work: BridgedMosquittos(work, relayed=True), tmp_path / "brokers")
    try:
        yield pair
    finally:
        pair.stop()


def test_a_broker_lost_mid_game_loses_no_result(bridged: BridgedMosquittos, tmp_path: Path) -> None:
    # The consumer is on the second mosquitto, the daemon on the first, then the second.
    # The broker is killed once the consumer has heard the game spinning: everything the
    # first one acknowledged has crossed the bridge (a loss inside that window: below).
    table = ClusterTable(tmp_path, bridged, protocol="5", consumer_node=1)
    try:
        outcome = table.play_through_node_loss()
        assert outcome.connections == [bridged.ports[0], bridged.ports[1]]
        assert_every_result_once_in_order(outcome.games)
        assert_retained_right(bridged.ports[1])
    finally:
        table.close()


def test_what_the_lost_broker_had_not_forwarded_is_a_gap_recall_fills(
    relayed: BridgedMosquittos, tmp_path: Path
) -> None:
    assert relayed.relay is not None
    table = ClusterTable(tmp_path, relayed, protocol="5", consumer_node=1)
    try:
        before = table.play_before()
        # The bridge stalls; a whole game is played and acknowledged by the first broker
        # (wheeld's outbox is empty), then that broker dies with it unforwarded.
        relayed.relay.hold()
        table.play(DURING)
        lost = before + 1
        table.wait(lambda: table.acknowledged(lost), 30, f"game {lost} acknowledged")
        assert not table.consumer.has(lost, "spinning")
        relayed.kill(0)
        relayed.relay.cut()
        table.play(*AFTER)
        last = lost + len(AFTER)
        table.wait(lambda: table.consumer.has(last, "result"), 60, f"game {last}'s result")

        games = table.consumer.games()
        # wheeld never sends an acknowledged message again: the lost game is not there ...
        received = {p["game_id"] for p in games}
        assert received == set(range(1, last + 1)) - {lost}
        # ... and the chain shows exactly what is missing: the lost game's three messages.
        seqs = sorted({p["seq"] for p in games})
        missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
        assert len(missing) == 3, missing

        # The consumer asks the table for the game it lacks; the reply fills the gap.
        reply = recall_game(relayed.ports[1], lost)
        assert reply["ok"] is True, reply
        (game,) = reply["games"]
        events: list[dict[str, Any]] = game["events"]
        key = load_public_key(PUBLIC_KEY)
        assert all(signature_problem(event, key) is None for event in events)
        assert [event["seq"] for event in events] == missing
        assert [e["event"] for e in events] == ["spinning", "no_more_bets", "result"]
        assert events[-1]["number"] == DURING
        results = {p["game_id"]: p["number"] for p in [*games, *events] if p["event"] == "result"}
        assert sorted(results.items()) == expected_results()
        assert_retained_right(relayed.ports[1])
    finally:
        table.close()
