"""wheeld on two mosquittos joined by a bridge (MQTT 5) that loses the one wheeld is
connected to in the middle of a game."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.brokers import BridgedMosquittos, require
from tests.cluster.table import (
    ClusterTable,
    assert_every_result_once_in_order,
    assert_retained_right,
)
from tests.rig import MOSQUITTO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bridged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgedMosquittos]:
    require(MOSQUITTO, "mosquitto")
    pair = BridgedMosquittos(tmp_path_factory.mktemp("mosquitto"))
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()


def test_a_broker_lost_mid_game_loses_no_result(bridged: BridgedMosquittos, tmp_path: Path) -> None:
    # The consumer is on the second mosquitto, the daemon on the first, then the second.
    # The node is killed once the consumer has heard the game spinning: everything the
    # first one acknowledged has crossed the bridge (what a loss inside that window does:
    # docs/brokers.md).
    table = ClusterTable(tmp_path, bridged, protocol="5", consumer_node=1)
    try:
        outcome = table.play_through_node_loss()
        assert outcome.connections == [bridged.ports[0], bridged.ports[1]]
        assert_every_result_once_in_order(outcome.games)
        assert_retained_right(bridged.ports[1])
    finally:
        table.close()
