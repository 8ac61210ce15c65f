"""Clustered MQTT brokers of a test's own: every node on free loopback ports, with its
state in the test's directory, started and stopped by the test, never the machine's
own services. Each cluster names its nodes' MQTT ports in ``ports`` and can SIGKILL one.

- ``NatsCluster``: three ``nats-server`` with JetStream and the MQTT listener, its
  streams and consumers replicated on all three (R3);
- ``RabbitCluster``: three RabbitMQ nodes with the MQTT plugin, joined with
  ``rabbitmqctl``, sessions in quorum queues;
- ``BridgedMosquittos``: two mosquittos joined by a bridge (mosquitto has no cluster).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from wheeld.testing.rig import MOSQUITTO, free_port, wait_for

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
#: Debian's wrapper (/usr/sbin/rabbitmq-server) switches to the rabbitmq user and the
#: machine's own directories; the scripts behind it take everything from the environment.
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
EPMD = shutil.which("epmd") or "/usr/bin/epmd"


def require(binary: str | Path, package: str) -> None:
    """Skip the test when a broker is not installed at all (tools/setup.sh installs it)."""
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} is not installed (Debian package {package}: bash tools/setup.sh)")


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def mqtt_answers(port: int) -> bool:
    """True once the node accepts an MQTT connection and acknowledges a QoS 1 message:
    a node's port opens before its cluster can keep anything."""
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    try:
        client.connect("127.0.0.1", port, keepalive=5)
    except OSError:
        return False
    client.loop_start()
    try:
        sent = client.publish("cluster-probe", b"", qos=1)
        sent.wait_for_publish(timeout=3)
        return sent.is_published()
    except (RuntimeError, ValueError):
        return False
    finally:
        client.disconnect()
        client.loop_stop()


class Cluster(Protocol):
    """What a test needs from a cluster of any engine."""

    name: str
    #: Each node's MQTT port, in order: the daemon lists them in this order.
    ports: list[int]

    def kill(self, node: int) -> None: ...


def _wait_gone(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class _Startable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


#: What a node says when a port it was given is taken after all (Erlang, NATS, mosquitto).
IN_USE = ("eaddrinuse", "address already in use")


def _says_in_use(directory: Path) -> bool:
    """Whether any node's output or log in ``directory`` says a port was in use."""
    for path in directory.rglob("*"):
        if path.is_file() and path.suffix in (".log", ".out"):
            text = path.read_text(errors="replace").lower()
            if any(words in text for words in IN_USE):
                return True
    return False


C = TypeVar("C", bound=_Startable)


def start_cluster(make: Callable[[Path], C], workdir: Path, tries: int = 3) -> C:
    """``make(directory)`` and start it; a node that found one of its ports in use
    (``eaddrinuse``) is no failure of the engine: the whole cluster is made again, in a
    directory of its own, on other ports. Anything else fails at once."""
    for attempt in range(1, tries + 1):
        directory = workdir / f"attempt-{attempt}"
        directory.mkdir(parents=True)
        cluster = make(directory)
        try:
            cluster.start()
            return cluster
        except AssertionError:
            in_use = _says_in_use(directory)
            cluster.stop()
            if not in_use or attempt == tries:
                raise
    raise AssertionError("unreachable")


class _Nodes:
    """A cluster's server processes, one a node: killed one at a time, stopped together."""

    processes: list[subprocess.Popen[bytes] | None]

    def kill(self, node: int) -> None:
        process = self.processes[node]
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        self.processes[node] = None

    def _stop_nodes(self, timeout: float = 20) -> None:
        """SIGTERM to every node still up (each stops cleanly on it), then wait for them."""
        for process in self.processes:
            if process is not None:
                process.terminate()
        for node, process in enumerate(self.processes):
            if process is not None:
                _wait_gone(process, timeout)
                self.processes[node] = None


class NatsCluster(_Nodes):
    """Three nats-server nodes, JetStream on each (its own store), MQTT on each, every
    MQTT stream and consumer replicated three times so a session outlives one node."""

    name = "nats"

    def __init__(self, workdir: Path, nodes: int = 3) -> None:
        self.workdir = workdir
        self.ports = [free_port() for _ in range(nodes)]
        self.client_ports = [free_port() for _ in range(nodes)]
        self.route_ports = [free_port() for _ in range(nodes)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * nodes

    def _config(self, node: int) -> Path:
        store = self.workdir / f"n{node}"
        store.mkdir(parents=True, exist_ok=True)
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in self.route_ports)
        config = self.workdir / f"n{node}.conf"
        config.write_text(
            f'server_name: "wheeld-n{node}"\n'
            f"listen: 127.0.0.1:{self.client_ports[node]}\n"
            f'jetstream {{ store_dir: "{store}", max_memory_store: 64MB, '
            f"max_file_store: 256MB }}\n"
            f"cluster {{ name: wheeld-test, listen: 127.0.0.1:{self.route_ports[node]}, "
            f"routes: [{routes}] }}\n"
            # R3: the retained messages, sessions and each subscription's consumer are
            # kept on all three nodes, so the loss of one loses none of them.
            f"mqtt {{ listen: 127.0.0.1:{self.ports[node]}, "
            f"stream_replicas: 3, consumer_replicas: 3 }}\n"
        )
        return config

    def _launch(self, node: int) -> None:
        self.processes[node] = subprocess.Popen(
            [NATS_SERVER, "-c", str(self._config(node))],
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / f"n{node}.log").open("ab"),
        )

    def start(self) -> None:
        for node in range(len(self.ports)):
            self._launch(node)
        for port in self.ports:
            # The meta leader is elected and the MQTT streams made once all three talk.
            wait_for(partial(mqtt_answers, port), 60, f"NATS MQTT on port {port}")

    def restart(self, node: int) -> None:
        """Start a killed node again, with what its store kept."""
        self._launch(node)
        wait_for(partial(mqtt_answers, self.ports[node]), 60, f"NATS node {node} back")

    def stop(self) -> None:
        self._stop_nodes()


class RabbitCluster(_Nodes):
    """Three RabbitMQ nodes with the MQTT plugin (AMQP and management off), an epmd
    and an Erlang cookie of their own, clustered with ``rabbitmqctl join_cluster``.

    MQTT sessions are quorum queues (``mqtt.durable_queue_type = quorum``), replicated
    on every node; retained messages are each node's own (RabbitMQ does not replicate
    them). The plugin tracks client ids in a Raft cluster: three nodes, so that two
    still make a majority when one is lost.
    """

    name = "rabbitmq"

    def __init__(self, workdir: Path, nodes: int = 3) -> None:
        self.workdir = workdir
        self.ports = [free_port() for _ in range(nodes)]
        self.dist_ports = [free_port() for _ in range(nodes)]
        self.nodes = [f"wheeld-r{node}@localhost" for node in range(nodes)]
        self.epmd_port = free_port()
        # rabbitmqctl is an Erlang node too, by default on 35672-35682: one port of its own.
        self.cli_port = free_port()
        self.home = workdir / "home"
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * nodes
        self.epmd: subprocess.Popen[bytes] | None = None

    def _env(self, node: int) -> dict[str, str]:
        base = self.workdir / f"r{node}"
        return {
            **os.environ,
            # The cookie the nodes and rabbitmqctl share is $HOME/.erlang.cookie.
            "HOME": str(self.home),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.nodes[node],
            "RABBITMQ_DIST_PORT": str(self.dist_ports[node]),
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self.cli_port),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self.cli_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(base / "pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            # Not the machine's /etc/rabbitmq/rabbitmq-env.conf nor advanced.config.
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "no-rabbitmq-env.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.workdir / "no-advanced.config"),
            # Erlang in place of the script, so the process is the node (SIGKILL kills it).
            "RUNNING_UNDER_SYSTEMD": "true",
        }

    def _prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text("WHEELDCLUSTERTESTCOOKIE")
        cookie.chmod(0o400)  # Erlang refuses a cookie others can read
        (self.workdir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        for node, port in enumerate(self.ports):
            base = self.workdir / f"r{node}"
            base.mkdir(parents=True, exist_ok=True)
            (base / "rabbitmq.conf").write_text(
                "listeners.tcp = none\n"
                f"mqtt.listeners.tcp.default = 127.0.0.1:{port}\n"
                "mqtt.allow_anonymous = true\n"
                "mqtt.durable_queue_type = quorum\n"
                "loopback_users = none\n"
            )

    def _launch(self, node: int) -> None:
        self.processes[node] = subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=self._env(node),
            cwd=self.workdir,
            stdout=(self.workdir / f"r{node}.out").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def _wait_booted(self, node: int, condition: Callable[[], bool], timeout: float) -> None:
        """Wait for ``condition``; a node that died or never came says why, from its output."""

        def up_or_dead() -> bool:
            process = self.processes[node]
            return condition() or (process is not None and process.poll() is not None)

        wait_for(up_or_dead, timeout, f"RabbitMQ node {self.nodes[node]} to boot")
        if not condition():
            output = (self.workdir / f"r{node}.out").read_text(errors="replace")
            last = [line for line in output.splitlines() if line.strip()][-3:]
            raise AssertionError(f"RabbitMQ node {self.nodes[node]} stopped: {' | '.join(last)}")

    def restart(self, node: int) -> None:
        """Start a killed node again: it rejoins its cluster with what its disk kept."""
        self._launch(node)
        self._wait_booted(node, partial(mqtt_answers, self.ports[node]), 120)

    def ctl(self, node: int, *args: str) -> str:
        done = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-q", "-n", self.nodes[node], *args],
            env=self._env(node),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[0]
        assert done.returncode == 0, f"rabbitmqctl -n {self.nodes[node]} {' '.join(args)}: {said}"
        return done.stdout

    def start(self) -> None:
        self._prepare()
        self.epmd = subprocess.Popen(
            [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "epmd.log").open("ab"),
        )
        wait_for(lambda: listening(self.epmd_port), 10, f"epmd on port {self.epmd_port}")
        for node in range(len(self.nodes)):
            self._launch(node)
        for node, port in enumerate(self.ports):
            # The MQTT listener opens last, once the node has booted.
            self._wait_booted(node, partial(mqtt_answers, port), 90)
        for node in range(1, len(self.nodes)):
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", self.nodes[0])
            self.ctl(node, "start_app")
        for port in self.ports:
            wait_for(partial(mqtt_answers, port), 60, f"RabbitMQ MQTT on port {port}")

    def stop(self) -> None:
        self._stop_nodes(30)
        if self.epmd is not None:
            self.epmd.terminate()
            _wait_gone(self.epmd)
            self.epmd = None


class Relay:
    """A TCP relay the test controls, between a bridge and the broker it forwards to.

    ``hold`` stops carrying what the bridge sends (it waits in the relay; the way back
    still flows); ``cut`` closes every connection and drops what was held: the bridge's
    messages that never reached the far broker.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.cut_off = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
                far = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return  # cut, or the far broker is not there: the bridge tries again
            self.sockets += [near, far]
            threading.Thread(target=self._carry, args=(near, far, True), daemon=True).start()
            threading.Thread(target=self._carry, args=(far, near, False), daemon=True).start()

    def _carry(self, source: socket.socket, sink: socket.socket, holdable: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if holdable:
                    self.flowing.wait()  # held here, in the relay: not yet delivered
                if self.cut_off:
                    return
                sink.sendall(data)

    def hold(self) -> None:
        self.flowing.clear()

    def cut(self) -> None:
        self.cut_off = True
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.flowing.set()


class BridgedMosquittos(_Nodes):
    """Two mosquittos joined by a bridge carrying ``wheeld/#`` both ways at QoS 1 with a
    persistent bridge session: not a cluster (nothing is replicated; see docs/brokers.md)."""

    name = "mosquitto"

    def __init__(self, workdir: Path, *, relayed: bool = False) -> None:
        self.workdir = workdir
        self.ports = [free_port(), free_port()]
        self.processes: list[subprocess.Popen[bytes] | None] = [None, None]
        #: With ``relayed``, the bridge reaches the second broker through a ``Relay``.
        self.relay = Relay(self.ports[1]) if relayed else None

    def _config(self, node: int) -> Path:
        lines = [
            f"listener {self.ports[node]} 127.0.0.1",
            "allow_anonymous true",
            "persistence false",
        ]
        if node == 0:
            # One bridge, from the first to the second, carries both directions.
            lines += [
                "connection wheeld-bridge",
                f"address 127.0.0.1:{self.relay.port if self.relay else self.ports[1]}",
                "topic wheeld/# both 1",
                "cleansession false",
                "remote_clientid wheeld-bridge-m0",
                "bridge_protocol_version mqttv50",
                "restart_timeout 1",
            ]
        config = self.workdir / f"m{node}.conf"
        config.write_text("\n".join(lines) + "\n")
        return config

    def start(self) -> None:
        # The far end first, so the bridge connects at once.
        for node in (1, 0):
            self.processes[node] = subprocess.Popen(
                [MOSQUITTO, "-c", str(self._config(node))],
                stdout=subprocess.DEVNULL,
                stderr=(self.workdir / f"m{node}.log").open("ab"),
            )
            wait_for(partial(mqtt_answers, self.ports[node]), 20, f"mosquitto m{node}")
        wait_for(self._bridged, 20, "the bridge m0 → m1 up")

    def _bridged(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            return "Connecting bridge" in (self.workdir / "m0.log").read_text() and any(
                "wheeld-bridge-m0" in line
                for line in (self.workdir / "m1.log").read_text().splitlines()
            )
        return False

    def stop(self) -> None:
        self._stop_nodes()
        if self.relay is not None:
            self.relay.cut()
