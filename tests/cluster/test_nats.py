"""wheeld on a three-node NATS cluster (JetStream, MQTT 3.1.1, R3) that loses the
node wheeld is connected to in the middle of a game."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.brokers import NATS_SERVER, NatsCluster, require, start_cluster
from tests.cluster.table import (
    ClusterTable,
    assert_every_result_once_in_order,
    assert_retained_right,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    require(NATS_SERVER, "nats-server")
    cluster = start_cluster(NatsCluster, tmp_path_factory.mktemp("nats"))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_node_lost_mid_game_loses_no_result(nats: NatsCluster, tmp_path: Path) -> None:
    # NATS speaks MQTT 3.1.1 only; the consumer is on the last node, the daemon starts
    # on the first and, once it is killed, moves to the second.
    table = ClusterTable(tmp_path, nats, protocol="3.1.1", consumer_node=2)
    try:
        outcome = table.play_through_node_loss()
        assert outcome.connections[0] == nats.ports[0]
        assert outcome.connections[-1] in outcome.survivors
        assert_every_result_once_in_order(outcome.games)
        # Retained messages live in a replicated stream: every surviving node has them.
        for port in outcome.survivors:
            assert_retained_right(port)
        # The killed node, back, catches up from the others.
        nats.restart(0)
        assert_retained_right(nats.ports[0])
    finally:
        table.close()
