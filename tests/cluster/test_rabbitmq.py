"""wheeld on a three-node RabbitMQ cluster (MQTT plugin, 3.1.1, sessions in quorum
queues) that loses the node wheeld is connected to in the middle of a game."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.brokers import RABBITMQ_BIN, RabbitCluster, require, start_cluster
from tests.cluster.table import (
    BASE,
    ClusterTable,
    assert_every_result_once_in_order,
    assert_retained_right,
    expected_results,
    read_retained,
)

# Three Erlang nodes take a while to boot and join on a shared machine.
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitCluster]:
    require(RABBITMQ_BIN / "rabbitmq-server", "rabbitmq-server")
    # A port taken meanwhile (eaddrinuse) starts the cluster again on others.
    cluster = start_cluster(RabbitCluster, tmp_path_factory.mktemp("rabbitmq"))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_node_lost_mid_game_loses_no_result(rabbitmq: RabbitCluster, tmp_path: Path) -> None:
    # RabbitMQ 3.10 speaks MQTT 3.1.1 only; the consumer is on the last node, the daemon
    # starts on the first and, once it is killed, moves to the second.
    table = ClusterTable(tmp_path, rabbitmq, protocol="3.1.1", consumer_node=2)
    try:
        outcome = table.play_through_node_loss()
        assert outcome.connections[0] == rabbitmq.ports[0]
        now = outcome.connections[-1]
        assert now in outcome.survivors
        assert_every_result_once_in_order(outcome.games)
        # Retained messages are each node's own: the node wheeld moved to has them
        # (wheeld republishes every retained topic on each connect) ...
        assert_retained_right(now)
        # ... a node it never published to has none (docs/brokers.md).
        for port in outcome.survivors:
            if port not in outcome.connections:
                assert read_retained(port) == {}, f"retained on port {port}"
        # The killed node, back, holds what its disk had kept: an old state, until
        # wheeld publishes there again (it stays where it is while that holds).
        rabbitmq.restart(0)
        stale = read_retained(rabbitmq.ports[0]).get(f"{BASE}/result") or {}
        assert stale.get("game_id") != expected_results()[-1][0], stale
        assert table.connections() == outcome.connections
    finally:
        table.close()
