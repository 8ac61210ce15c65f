"""Several brokers (``mqtt.servers``): the configuration, the order they are
tried in, and real mosquittos going away under a running daemon and followers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_publisher import Log, no_command, until
from tests.test_publisher import running as publishing
from wheeld.config import Config, ConfigError, load, split_server
from wheeld.followers.consumer import Follower, Message, StatusMessage
from wheeld.shell.journal import Journal, OutboxEntry
from wheeld.shell.mqtt_client import Failover, make_client
from wheeld.shell.publisher import Publisher
from wheeld.table.effects import Outgoing
from wheeld.testing.rig import (
    Broker,
    DaemonProcess,
    NotifySocket,
    PtyWheel,
    Subscriber,
    free_port,
    running,
    wait_for,
    write_config,
)
from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel

BASE = "wheeld/T9"

# -- the configuration -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("servers", "brokers"),
    [
        (["a.example:1883"], ["a.example:1883"]),
        (["10.0.0.1:1883", "10.0.0.2:1884"], ["10.0.0.1:1883", "10.0.0.2:1884"]),
        (["[::1]:1883", "broker_2.lan:8883"], ["[::1]:1883", "broker_2.lan:8883"]),
    ],
)
def test_servers_are_tried_in_the_order_given(
    tmp_path: Path, servers: list[str], brokers: list[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[mqtt]\nservers = {json.dumps(servers)}\n")
    assert load(path, {}).mqtt.brokers == brokers


def test_without_servers_host_and_port_are_the_one_broker(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nhost = "::1"\nport = 1884\n')
    assert load(path, {}).mqtt.brokers == ["[::1]:1884"]
    assert Config().mqtt.brokers == ["127.0.0.1:1883"]


@pytest.mark.parametrize(
    ("mqtt", "words"),
    [
        ("servers = []", "mqtt.servers: must name at least one broker"),
        ('servers = ["a:1883", "b"]', "mqtt.servers: entry 2: 'b': must be HOST:PORT"),
        ('servers = ["a:0"]', "entry 1: 'a:0': the port must be 1-65535"),
        ('servers = ["a:65536"]', "the port must be 1-65535"),
        ('servers = ["a:x"]', "the port must be 1-65535"),
        ('servers = ["::1:1883"]', "[ADDRESS]:PORT for IPv6"),
        ('servers = ["[::1]"]', "an IPv6 address is written [ADDRESS]:PORT"),
        ('servers = ["[10.0.0.1]:1883"]', "only an IPv6 address goes in brackets"),
        ('servers = ["mqtt://a:1883"]', "no scheme, just HOST:PORT"),
        ('servers = ["a b:1883"]', "is not a host name or an IP address"),
        ('servers = ["1.2.3:1883"]', "is not a host name or an IP address"),
        ("servers = [1883]", "mqtt.servers.0: must be a string in quotes, not 1883 (an integer)"),
        ('servers = "a:1883"', 'mqtt.servers: must be a list in brackets ([...]), not "a:1883"'),
        ('servers = ["a:1883"]\nhost = "b"', "give mqtt.servers or mqtt.host/mqtt.port, not both"),
        ('servers = ["a:1883"]\nport = 1884', "(mqtt.port is set too)"),
        ('servers = ["a:1883", "b:1883", "A:1883"]', "entry 3: 'A:1883' is entry 1 again"),
        ('servers = ["[::1]:1883", "[::1]:1883"]', "entry 2: '[::1]:1883' is entry 1 again"),
    ],
)
def test_a_wrong_servers_list_is_one_line_naming_the_key(
    tmp_path: Path, mqtt: str, words: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[mqtt]\n{mqtt}\n")
    with pytest.raises(ConfigError) as error:
        load(path, {})
    assert len(error.value.problems) == 1, error.value.problems
    assert words in str(error.value)


def test_servers_from_the_environment_are_blamed_on_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nhost = "a"\n')
    env = {"WHEELD_MQTT__SERVERS": '["b:1883"]'}
    with pytest.raises(ConfigError, match=r"WHEELD_MQTT__SERVERS: mqtt\.servers: give"):
        load(path, env)
    path.write_text("")
    assert load(path, env).mqtt.brokers == ["b:1883"]


def test_split_server_reads_what_brokers_write() -> None:
    assert split_server("[fe80::1]:8883") == ("fe80::1", 8883)
    assert split_server("broker.casino.lan:1883") == ("broker.casino.lan", 1883)


async def test_make_client_connects_to_the_server_it_is_given() -> None:
    config = Config.model_validate({"mqtt": {"servers": ["a.lan:1884", "[::1]:1885"]}})
    first = make_client(config, client_id="")
    second = make_client(config, client_id="", server="[::1]:1885")
    assert (first._hostname, first._port) == ("a.lan", 1884)
    assert (second._hostname, second._port) == ("::1", 1885)


# -- the order they are tried in ----------------------------------------------------------


def test_failover_moves_on_at_once_and_pauses_only_after_a_whole_round() -> None:
    failover = Failover(["a:1", "b:2", "c:3"], backoff_first_s=0.5, backoff_max_s=2.0)
    tried = []
    for _ in range(9):
        tried.append((failover.server, failover.failed()))
    assert tried == [
        ("a:1", 0.0),
        ("b:2", 0.0),
        ("c:3", 0.5),
        ("a:1", 0.0),
        ("b:2", 0.0),
        ("c:3", 1.0),
        ("a:1", 0.0),
        ("b:2", 0.0),
        ("c:3", 2.0),
    ]


def test_failover_comes_back_to_the_primary_after_a_connection_that_held() -> None:
    failover = Failover(["a:1", "b:2", "c:3"])
    failover.failed()  # the primary is down: on to b
    assert failover.server == "b:2"
    assert failover.lost(held_s=600) == 0.0  # b held, then went: the primary first, at once
    assert failover.server == "a:1"
    failover.failed()
    failover.failed()
    assert failover.server == "c:3"
    # A broker that accepts and hangs up at once is a failure: no tight loop.
    assert failover.lost(held_s=0.1) > 0
    assert failover.server == "a:1"


def test_failover_with_one_broker_backs_off() -> None:
    failover = Failover(["a:1"], backoff_first_s=0.5, backoff_max_s=5.0)
    assert [failover.failed() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert failover.lost(held_s=60) == 0.0
    assert failover.failed() == 0.5


# -- the publisher and a follower, in process ---------------------------------------------


@contextlib.contextmanager
def brokers(tmp_path: Path, count: int) -> Iterator[list[Broker]]:
    started = []
    try:
        for number in range(count):
            home = tmp_path / f"broker-{number}"
            home.mkdir()
            broker = Broker(home)
            broker.start()
            started.append(broker)
        yield started
    finally:
        for broker in started:
            broker.stop()


async def test_the_publisher_takes_the_next_broker_and_says_which(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there: the primary is down
    with brokers(tmp_path, 1) as (second,):
        config = Config.model_validate(
            {
                "table": {"id": "T9"},
                "mqtt": {
                    "servers": [f"127.0.0.1:{dead}", f"127.0.0.1:{second.port}"],
                    "keepalive_s": 5,
                },
            }
        )
        journal = Journal(tmp_path / "journal.sqlite")
        journal.enqueue([Outgoing(f"{BASE}/game", json.dumps({"game_id": n})) for n in (1, 2, 3)])
        acknowledged: list[OutboxEntry] = []
        log = Log()
        publisher = Publisher(
            config, journal, on_command=no_command, log=log, on_acknowledged=acknowledged.append
        )
        assert publisher.server is None
        try:
            async with publishing(publisher):
                await until(lambda: len(acknowledged) == 3, "the outbox drained")
                server = publisher.server
        finally:
            journal.close()
    assert server == f"127.0.0.1:{second.port}"
    assert [json.loads(e.message.payload)["game_id"] for e in acknowledged] == [1, 2, 3]
    (connected,) = log.at("info", "broker connected")
    assert (connected["host"], connected["port"]) == ("127.0.0.1", second.port)
    assert connected["attempts"] == 1  # after the dead primary's one failed try
    (moved,) = log.at("info", "moving to another broker")
    assert moved == {"server": f"127.0.0.1:{dead}", "to": f"127.0.0.1:{second.port}"}


async def test_a_follower_moves_to_the_next_broker(tmp_path: Path) -> None:
    with brokers(tmp_path, 2) as (first, second):
        for broker in (first, second):
            table = Subscriber(broker.port, f"{BASE}/none")
            info = table.client.publish(
                f"{BASE}/status",
                json.dumps({"state": "online", "instance": f"h:{broker.port}"}),
                qos=1,
                retain=True,
            )
            info.wait_for_publish(5)
            table.close()
        config = Config.model_validate(
            {
                "table": {"id": "T9"},
                "mqtt": {"servers": [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]},
            }
        )
        heard: list[Message] = []
        feed: list[bool] = []
        follower = Follower(config, ["status"], heard.append, Log(), on_feed=feed.append)
        task = asyncio.create_task(follower.run())
        try:
            await until(lambda: heard, "the primary's status")
            first.stop()
            await until(lambda: len(heard) == 2, "the status again, from the second broker")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert all(isinstance(m, StatusMessage) for m in heard)
    assert feed[:3] == [True, False, True]


# -- the daemon, two mosquittos, the first killed mid-game ----------------------------------


class TwoBrokerTable:
    """A daemon with ``servers = [first, second]``, a pty wheel, a subscriber on each."""

    def __init__(self, tmp: Path, first: Broker, second: Broker) -> None:
        self.first, self.second = first, second
        self.pty = PtyWheel(tmp / "wheel0")
        self.wheel = ScriptedWheel(start=time.time())
        self.sent = 0
        self.notify = NotifySocket(tmp / "notify.sock")
        config = write_config(
            tmp / "wheeld.toml", port=tmp / "wheel0", broker=first.port, state=tmp / "state"
        )
        text = config.read_text()
        one = f'host = "127.0.0.1"\nport = {first.port}\n'
        both = f'servers = ["127.0.0.1:{first.port}", "127.0.0.1:{second.port}"]\n'
        assert one in text
        config.write_text(text.replace(one, both))
        self.daemon = DaemonProcess(config, tmp, env={"NOTIFY_SOCKET": str(self.notify.path)})
        self.subs = [Subscriber(first.port, f"{BASE}/#"), Subscriber(second.port, f"{BASE}/#")]

    def flush(self) -> None:
        for _, frame in self.wheel.lines[self.sent :]:
            self.pty.write(frame + b"\r\n")
        self.sent = len(self.wheel.lines)

    def games(self) -> list[dict[str, Any]]:
        """Every <base>/game payload heard: the first broker's, then the second's."""
        return [p for sub in self.subs for p in sub.on(f"{BASE}/game")]

    def ended(self, game_id: int) -> bool:
        return any(
            p["game_id"] == game_id and p["event"] in ("result", "no_spin") for p in self.games()
        )

    def connected_to(self, broker: Broker) -> list[dict[str, Any]]:
        return [
            r
            for r in self.daemon.log_lines()
            if r.get("event") == "broker connected" and r.get("port") == broker.port
        ]

    def close(self) -> None:
        self.daemon.ensure_stopped()
        for sub in self.subs:
            sub.close()
        self.pty.close()
        self.notify.close()


def test_games_flow_on_through_the_second_broker_once_each_and_in_order(tmp_path: Path) -> None:
    with brokers(tmp_path, 2) as (first, second):
        table = TwoBrokerTable(tmp_path, first, second)
        wheel = table.wheel
        try:
            with running(table.daemon):
                wait_for(lambda: table.connected_to(first), 30, "the daemon on the primary")
                wheel.hello()
                wheel.advance(3000)
                wheel.game("17")
                wheel.reverse_rotor()
                table.flush()
                wait_for(lambda: table.ended(1), 15, "game 1 via the primary")
                # Game 2 starts; its spinning is out; the primary dies mid-game.
                wheel.pocket(None)
                wheel.advance(700)
                direction = wheel.launch()
                table.flush()
                wait_for(
                    lambda: any(p["game_id"] == 2 for p in table.subs[0].on(f"{BASE}/game")),
                    10,
                    "game 2 spinning via the primary",
                )
                assert first.process is not None
                first.process.kill()
                first.process.wait(10)
                first.process = None
                wheel.run_ball(direction, DEFAULT_BALL_PERIODS)
                wheel.drop("26")
                wheel.advance(1500)
                wheel.reverse_rotor()
                wheel.game("5")
                wheel.reverse_rotor()
                wheel.game("32")
                table.flush()
                wait_for(lambda: table.ended(4), 30, "games 2 to 4 via the second broker")
                assert table.connected_to(second)

                # The primary is back; the second goes: the daemon returns to the primary.
                first.start()
                wait_for(table.subs[0].client.is_connected, 10, "the watcher back on the primary")
                assert second.process is not None
                second.stop()
                wait_for(lambda: len(table.connected_to(first)) >= 2, 30, "back on the primary")
                wheel.reverse_rotor()
                wheel.game("0")
                table.flush()
                wait_for(lambda: table.ended(5), 15, "game 5 via the primary again")
                assert table.daemon.terminate() == 0
        finally:
            table.close()

    # Each broker's subscriber heard the games in order (a message whose PUBACK
    # was lost is sent again, on the next broker: the same message, which
    # consumers drop); together they heard every message, each game ended once.
    for sub in table.subs:
        seqs = [p["seq"] for p in sub.on(f"{BASE}/game")]
        assert seqs == sorted(seqs), seqs
    heard = dict(sorted({p["seq"]: p for p in table.games()}.items()))
    first_seq = min(heard)
    assert list(heard) == list(range(first_seq, first_seq + len(heard)))
    assert [(p["game_id"], p["number"]) for p in heard.values() if p["event"] == "result"] == [
        (1, "17"),
        (2, "26"),
        (3, "5"),
        (4, "32"),
        (5, "0"),
    ]
    assert not [p for p in heard.values() if p["event"] == "no_spin"]
    moves = [r for r in table.daemon.log_lines() if r.get("event") == "moving to another broker"]
    assert moves[0]["server"] == f"127.0.0.1:{first.port}"
    assert moves[0]["to"] == f"127.0.0.1:{second.port}"
