"""The marquee and the daemon against a broker that takes only TLS and a password.

Both reach the broker through ``wheeld.shell.mqtt_client.make_client``, configured
the way an operator would (``config/wheeld-tls.toml.example``): a TOML file
read by ``wheeld.config.load``, the CA and the password in files beside it.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_marquee import RecordingLog, board_state, serving
from tests.tls import PASSWORD, USERNAME, TlsBroker, make_authority, missing_tools
from wheeld.config import load
from wheeld.followers.marquee.app import Marquee
from wheeld.testing.rig import DaemonProcess, PtyWheel, make_signing_key, running, wait_for

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

BASE = "wheeld/T9"
RESULT = {"event": "result", "game_id": 7, "table": "T9", "number": "17"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TlsBroker]:
    workdir = tmp_path / "broker"
    workdir.mkdir()
    broker = TlsBroker(workdir)
    broker.start()
    yield broker
    broker.stop()


def write_tls_config(
    directory: Path,
    broker: TlsBroker,
    *,
    password: str = PASSWORD,
    ca_file: str = "broker/ca.crt",
    wheel: str = "unused",
) -> Path:
    """A configuration with the CA and the password file beside it, as relative paths."""
    (directory / "mqtt-password").write_text(password + "\n")
    config = directory / "wheeld.toml"
    config.write_text(
        f'[table]\nid = "T9"\n'
        f'[wheel]\ndriver = "wrp"\nport = "{wheel}"\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {broker.port}\nkeepalive_s = 5\n'
        f'username = "{USERNAME}"\npassword_file = "mqtt-password"\n'
        f'[mqtt.tls]\nca_file = "{ca_file}"\n'
        f'[state]\ndir = "{directory / "state"}"\n'
        f'[log]\nformat = "json"\nlevel = "debug"\n'
        f'[signing]\nkey_file = "{make_signing_key(directory)}"\n'
    )
    return config


def attempts(broker: TlsBroker) -> int:
    """Connections that got through the broker's side of TLS (a bare TCP probe does not)."""
    return (broker.workdir / "mosquitto.log").read_text().count("New connection from")


def test_the_marquee_shows_a_result_published_over_tls(tmp_path: Path, broker: TlsBroker) -> None:
    table = broker.client()
    try:
        table.publish(f"{BASE}/result", json.dumps(RESULT), qos=1, retain=True).wait_for_publish(5)
        config = load(write_tls_config(tmp_path, broker))
        with serving(Marquee(config, "127.0.0.1", 0, RecordingLog())) as marquee:
            port = marquee.server.port
            wait_for(lambda: board_state(port)["last"] is not None, 10, "the retained result")
            assert board_state(port)["last"] == {"number": "17", "color": "black"}
            assert marquee.follower.connected
    finally:
        table.loop_stop()
        table.disconnect()


@pytest.mark.parametrize(
    ("password", "stranger_ca", "says"),
    [
        # mosquitto answers a wrong password with 0x87, as it does a missing ACL.
        pytest.param("not the password", False, "not authorized", id="wrong-password"),
        pytest.param(PASSWORD, True, "certificate verify failed", id="unknown-ca"),
    ],
)
def test_the_marquee_stays_offline_when_the_broker_refuses_it(
    tmp_path: Path,
    broker: TlsBroker,
    capfd: pytest.CaptureFixture[str],
    password: str,
    stranger_ca: bool,
    says: str,
) -> None:
    ca_file = "broker/ca.crt"
    if stranger_ca:
        ca_file = make_authority(tmp_path, "stranger").cert.name
    config = load(write_tls_config(tmp_path, broker, password=password, ca_file=ca_file))
    log = RecordingLog()
    with serving(Marquee(config, "127.0.0.1", 0, log)) as marquee:
        refused = wait_for(
            lambda: log.events("broker unavailable, retrying"), 10, "the refusal logged"
        )
        assert says in refused[0]["error"].lower()
        assert "\n" not in refused[0]["error"]
        # It keeps trying, without a line per attempt.
        wait_for(lambda: attempts(broker) >= 2, 10, "the marquee to try again")
        assert len(log.events("broker unavailable, retrying")) == 1
        # Still serving, and saying it is offline rather than showing stale numbers.
        assert board_state(marquee.server.port)["online"] is False
        assert not marquee.follower.connected
    assert "Traceback" not in capfd.readouterr().err


def test_the_daemon_says_online_over_tls(tmp_path: Path, broker: TlsBroker) -> None:
    wheel = PtyWheel(tmp_path / "wheel0")
    config = write_tls_config(tmp_path, broker, wheel=str(wheel.link))
    statuses: queue.Queue[bytes] = queue.Queue()
    watcher = broker.client()
    watcher.on_message = lambda client, userdata, message: statuses.put(bytes(message.payload))
    watcher.subscribe(f"{BASE}/status", qos=1)
    daemon = DaemonProcess(config, tmp_path)
    try:
        with running(daemon):
            seen: list[bytes] = []

            def online() -> bool:
                while not statuses.empty():
                    seen.append(statuses.get_nowait())
                return any(p and json.loads(p).get("state") == "online" for p in seen)

            wait_for(online, 60, "the daemon's online status over TLS")
    finally:
        watcher.loop_stop()
        watcher.disconnect()
        wheel.close()
    assert "Traceback" not in daemon.logs()
