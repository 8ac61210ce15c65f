"""One table id, one daemon: ``<base>/status`` names who is online, a second
wheeld is refused at start (exit 78), and one that appears later is noticed."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.test_publisher import Log, no_command, until
from tests.test_publisher import running as publishing
from wheeld.config import Config
from wheeld.shell.journal import Journal
from wheeld.shell.presence import EX_CONFIG, status_json
from wheeld.shell.publisher import Publisher
from wheeld.table.effects import Outgoing
from wheeld.testing.rig import (
    Broker,
    DaemonProcess,
    NotifySocket,
    PtyWheel,
    Subscriber,
    running,
    wait_for,
    write_config,
)
from wheeld_simulators.scripted import ScriptedWheel

BASE = "wheeld/T9"
STATUS = f"{BASE}/status"


def instance_of(state: Path) -> str:
    """What a daemon with this state directory calls itself on <base>/status."""
    return f"{socket.gethostname()}:{state.resolve()}"


def test_status_payloads_put_state_first_then_who_then_the_schema_version() -> None:
    assert status_json('{"state": "online"}', "h:/s") == (
        '{"state": "online", "instance": "h:/s", "schema_version": 1}'
    )
    fault = '{"fault": "journal_unwritable", "state": "fault", "schema_version": 1}'
    assert list(json.loads(status_json(fault, "h:/s"))) == [
        "state",
        "fault",
        "instance",
        "schema_version",
    ]
    assert status_json('{"state": "offline"}', "") == '{"state": "offline", "schema_version": 1}'


def test_a_second_daemon_for_the_table_exits_78_and_the_first_plays_on(
    tmp_path: Path, broker: Broker
) -> None:
    homes = [tmp_path / "first", tmp_path / "second"]
    configs = []
    for home in homes:
        home.mkdir()
        configs.append(
            write_config(
                home / "wheeld.toml",
                port=home / "wheel0",
                broker=broker.port,
                state=home / "state",
            )
        )
    pty = PtyWheel(homes[0] / "wheel0")
    PtyWheel(homes[1] / "wheel0")  # a wheel of its own: it never gets as far as reading it
    notify = NotifySocket(tmp_path / "notify.sock")
    first = DaemonProcess(configs[0], homes[0], env={"NOTIFY_SOCKET": str(notify.path)})
    watcher = Subscriber(broker.port, f"{BASE}/#")
    wheel = ScriptedWheel(start=time.time())
    first_instance = instance_of(homes[0] / "state")
    try:
        with running(first):
            online = watcher.wait(STATUS, lambda p: p and p.get("state") == "online", 30)
            assert online == {"state": "online", "instance": first_instance, "schema_version": 1}
            wait_for(lambda: any("READY=1" in m for m in notify.messages()), 30, "READY")

            started = time.monotonic()
            second = subprocess.run(
                [sys.executable, "-m", "wheeld", "run", "--config", str(configs[1])],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            took_s = time.monotonic() - started

            wheel.hello()
            wheel.advance(3000)
            wheel.game("17")
            for _, frame in wheel.lines:
                pty.write(frame + b"\r\n")
            result = watcher.wait(f"{BASE}/result", lambda p: p["game_id"] == 1, 15)
            assert result["number"] == "17"
            assert first.terminate() == 0
        offline = watcher.wait(STATUS, lambda p: p and p.get("state") == "offline")
    finally:
        watcher.close()
        pty.close()
        notify.close()

    assert second.returncode == EX_CONFIG, second.stderr
    # The wheel is opened while the broker is asked: the
    # log says so; the last line, the only one not a JSON log record, says why it stopped.
    *logged, line = second.stderr.strip().splitlines()
    assert all(record.startswith("{") for record in logged), second.stderr
    assert "Traceback" not in second.stderr
    # Never ready: READY and "wheeld ready" come only after the check for a rival.
    assert "wheeld ready" not in second.stderr
    assert f"another wheeld ({first_instance}) is online for table T9" in line
    assert (
        "give this one its own table.id" in line
        and "last will clears this within about 10 s" in line
    )
    assert took_s < 15
    # The first was never disturbed: its session not taken, never a reconnect.
    said = [record.get("event") for record in first.log_lines()]
    assert said.count("broker connected") == 1
    assert not [e for e in said if "another" in str(e) or "broker unavailable" in str(e)]
    assert offline == {"state": "offline", "instance": first_instance, "schema_version": 1}


def test_a_stale_status_of_our_own_or_an_offline_one_lets_the_daemon_start(
    tmp_path: Path, broker: Broker
) -> None:
    state = tmp_path / "state"
    config = write_config(
        tmp_path / "wheeld.toml", port=tmp_path / "wheel0", broker=broker.port, state=state
    )
    pty = PtyWheel(tmp_path / "wheel0")
    notify = NotifySocket(tmp_path / "notify.sock")
    daemon = DaemonProcess(config, tmp_path, env={"NOTIFY_SOCKET": str(notify.path)})
    retained = Subscriber(broker.port, f"{BASE}/none")
    watcher = Subscriber(broker.port, STATUS)
    try:
        for left in (
            {"state": "online", "instance": instance_of(state)},  # ours, from before a crash
            {"state": "offline", "instance": "elsewhere:/var/lib/wheeld"},
        ):
            retained.client.publish(STATUS, json.dumps(left), qos=1, retain=True).wait_for_publish(
                5
            )
            notify.received.clear()
            with running(daemon):
                wait_for(lambda: any("READY=1" in m for m in notify.messages()), 30, "READY")
                watcher.wait(STATUS, lambda p: p.get("state") == "online", 15)
                assert daemon.terminate() == 0
            watcher.seen.clear()
    finally:
        retained.close()
        watcher.close()
        pty.close()
        notify.close()
    assert "Traceback" not in daemon.logs()


def test_a_status_no_will_clears_is_refused_with_how_to_clear_it(
    tmp_path: Path, broker: Broker
) -> None:
    """Found on the first day: a retained `online` of another instance that no last will
    will ever clear (published by hand; a broker that died with the other connected) is
    refused at every start, and the line only promised that the will would clear it."""
    from tests.test_daemon import _run_once
    from tests.test_publisher import publish_raw

    gone = {"state": "online", "instance": "gone:/var/lib/wheeld", "schema_version": 1}
    publish_raw(broker.port, json.dumps(gone).encode(), STATUS, retain=True)
    config = write_config(
        tmp_path / "wheeld.toml", port=tmp_path / "wheel0", broker=broker.port, state=tmp_path
    )
    pty = PtyWheel(tmp_path / "wheel0")
    try:
        refused = _run_once(config)
    finally:
        pty.close()
    assert refused.returncode == EX_CONFIG, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert "another wheeld (gone:/var/lib/wheeld) is online for table T9" in line
    assert line.endswith(
        f"if it stays, once sure that wheeld is gone, clear it: "
        f"mosquitto_pub -h 127.0.0.1 -p {broker.port} -t {STATUS} -r -n"
    )


async def test_a_rival_that_appears_later_is_noticed_from_the_payload_on_311(
    tmp_path: Path, broker: Broker
) -> None:
    config = Config.model_validate(
        {"table": {"id": "T9"}, "mqtt": {"port": broker.port, "protocol": "3.1.1"}}
    )
    journal = Journal(tmp_path / "journal.sqlite")
    log = Log()
    publisher = Publisher(config, journal, on_command=no_command, log=log, instance="here:/a")
    rival = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv311)
    rival.connect("127.0.0.1", broker.port)
    rival.loop_start()
    try:
        async with publishing(publisher):
            # Online already (a rival found while connecting is stood down for, below).
            await until(lambda: publisher.listening, "the publisher online")
            body = {"state": "online", "instance": "there:/b", "schema_version": 1}
            rival.publish(STATUS, json.dumps(body), qos=1, retain=True).wait_for_publish(5)
            await until(lambda: publisher.rival == "there:/b", "the rival noticed")
            assert publisher.session_taken_over
            gone = {"state": "offline", "instance": "there:/b", "schema_version": 1}
            rival.publish(STATUS, json.dumps(gone), qos=1, retain=True).wait_for_publish(5)
            await until(lambda: publisher.rival is None, "the rival gone")
    finally:
        rival.loop_stop()
        journal.close()
    (error,) = log.at("error", "another wheeld publishes for this table")
    assert (error["other_instance"], error["this_instance"]) == ("there:/b", "here:/a")


def test_a_lost_state_directory_never_reuses_a_launched_game_id(
    tmp_path: Path, broker: Broker
) -> None:
    """Game 2 is only launched when the state directory is lost whole: the broker's
    retained <base>/sequence keeps the next daemon from announcing another game 2."""
    config = write_config(
        tmp_path / "wheeld.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "st",
    )
    pty = PtyWheel(tmp_path / "wheel0")
    watcher = Subscriber(broker.port, f"{BASE}/game")
    wheel = ScriptedWheel(start=time.time())
    sent = 0

    def play() -> None:
        nonlocal sent
        for _, frame in wheel.lines[sent:]:
            pty.write(frame + b"\r\n")
        sent = len(wheel.lines)

    try:
        first = DaemonProcess(config, tmp_path)
        with running(first):
            _wait_online(broker)
            wheel.hello()
            wheel.advance(3000)
            wheel.game("17")
            wheel.reverse_rotor()
            wheel.pocket(None)
            wheel.advance(700)
            wheel.launch()  # game 2: spinning, then the machine's disk is lost
            play()
            watcher.wait(
                f"{BASE}/game", lambda p: (p["game_id"], p["event"]) == (2, "spinning"), 30
            )
            assert first.terminate() == 0
        shutil.rmtree(tmp_path / "st")
        with running(DaemonProcess(config, tmp_path)):
            _wait_online(broker)  # after the offline the first left behind
            wheel.advance(20_000)  # the old game is long gone; the wheel plays on
            wheel.reverse_rotor()
            wheel.game("5")
            play()
            watcher.wait(f"{BASE}/game", lambda p: p.get("number") == "5", 30)
    finally:
        watcher.close()
        pty.close()
    said = watcher.on(f"{BASE}/game")
    ids = [(p["game_id"], p["event"]) for p in said]
    # A message said again word for word is a repeat consumers drop (the next daemon
    # says again what the marker names): no game id is announced for two launches.
    launches = {
        json.dumps(p, sort_keys=True): p["game_id"] for p in said if p["event"] == "spinning"
    }
    launched = sorted(launches.values())
    assert len(launched) == len(set(launched)), list(launches)  # no game id announced twice
    assert launched[0:2] == [1, 2] and all(game_id > 2 for game_id in launched[2:]), ids
    ended = [p["game_id"] for p in said if p["event"] in ("result", "no_spin")]
    assert sorted(set(ended)) == sorted(ended), ids  # and none ended twice


def _wait_online(broker: Broker) -> None:
    """Until <base>/status says online (a new subscriber: the retained one comes first)."""
    status = Subscriber(broker.port, STATUS)
    try:
        status.wait(STATUS, lambda p: isinstance(p, dict) and p.get("state") == "online", 30)
    finally:
        status.close()


async def test_a_rival_online_when_reconnecting_is_stood_down_for(
    tmp_path: Path, broker: Broker
) -> None:
    """A daemon that comes back (a network partition, a paused VM) to find another wheeld
    online for its table says nothing and stops: that one took the table meanwhile."""
    config = Config.model_validate({"table": {"id": "T9"}, "mqtt": {"port": broker.port}})
    journal = Journal(tmp_path / "journal.sqlite")
    journal.enqueue([Outgoing("wheeld/T9/game", json.dumps({"game_id": 3}))])
    stood_down: list[str] = []
    rival = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    rival.connect("127.0.0.1", broker.port)
    rival.loop_start()
    watcher = Subscriber(broker.port, "wheeld/T9/#")
    body = {"state": "online", "instance": "there:/b", "schema_version": 1}
    rival.publish(STATUS, json.dumps(body), qos=1, retain=True).wait_for_publish(5)
    publisher = Publisher(
        config,
        journal,
        on_command=no_command,
        log=Log(),
        instance="here:/a",
        on_rival=stood_down.append,
    )
    try:
        async with publishing(publisher):
            await until(lambda: stood_down, "standing down")
            await until(lambda: not publisher.connected, "the publisher gone")
    finally:
        rival.loop_stop()
        journal.close()
    assert stood_down == ["there:/b"]
    assert watcher.on("wheeld/T9/game") == []  # its outbox stayed where it was
    watcher.close()
