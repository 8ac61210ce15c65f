"""A flood of operator commands costs nothing later and never hides a deliberate one.

20,000 ``ack`` commands, as fast as a client can send them, through a mosquitto
configured as the shipped example is (its per-client queue raised), with a
pit boss's ``close`` sent in the middle of them: the close is carried out
and answered, the flood is refused past its sender's rate without a journal
row (or a reply) a command, and what was refused is journaled as a count.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from wheeld.shell.journal import JOURNAL_FILE
from wheeld.testing.rig import (
    Broker,
    DaemonProcess,
    PtyWheel,
    Subscriber,
    running,
    wait_for,
    write_config,
)

EXAMPLE = Path(__file__).parent.parent / "config" / "mosquitto-tls.conf.example"
BASE = "wheeld/T9"
FLOOD = 20_000


def _queue_setting() -> str:
    """The shipped example's per-client queue, as the test's broker takes it."""
    lines = [line for line in EXAMPLE.read_text().splitlines() if line.startswith("max_queued")]
    assert lines, "the shipped mosquitto example raises the per-client queue"
    return lines[0]


def _as(operator: str) -> Properties:
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.UserProperty = [("operator", operator)]
    properties.ResponseTopic = f"wheeld-replies/{operator}"
    return properties


@pytest.mark.timeout(600)  # 20,000 commands: minutes on two cores shared with other suites
def test_a_close_sent_during_a_flood_of_20000_acks_is_carried_out(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.conf.write_text(broker.conf.read_text() + _queue_setting() + "\n")
    broker.start()
    pty = PtyWheel(tmp_path / "wheel")
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "wheel", broker=broker.port, state=tmp_path / "state"
    )
    config.write_text(config.read_text().replace('level = "debug"', 'level = "info"'))
    watcher = Subscriber(broker.port, "#")
    flooder = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    try:
        with running(DaemonProcess(config, tmp_path)) as daemon:
            watcher.wait(f"{BASE}/status", lambda s: s.get("state") == "online", 30)
            flooder.connect("127.0.0.1", broker.port)
            flooder.loop_start()
            topic = f"{BASE}/command/ack"
            ack = json.dumps({"alert": "deviation", "operator": "script"})
            for n in range(FLOOD):
                flooder.publish(topic, ack, qos=1, properties=_as("script"))
                if n == FLOOD // 2:
                    close = json.dumps({"operator": "boss"})
                    flooder.publish(f"{BASE}/command/close", close, qos=1, properties=_as("boss"))
            table = watcher.wait(f"{BASE}/table", lambda t: t.get("state") == "closed", 180)
            assert table["table"] == "T9"
            answer = watcher.wait("wheeld-replies/boss", lambda r: "ok" in r, 30)
            assert answer["ok"] is True and answer["state"] == "closed"
            wait_for(lambda: flooder.want_write() is False, 30, "the flood sent")
            assert daemon.terminate() == 0
        with sqlite3.connect(tmp_path / "state" / JOURNAL_FILE) as db:
            rows = db.execute("SELECT name, sender, accepted, payload FROM commands").fetchall()
        db.close()
        closes = [row for row in rows if row[0] == "close"]
        assert [(name, sender, accepted) for name, sender, accepted, _ in closes] == [
            ("close", "boss", 1)
        ]
        acks = [row for row in rows if row[0] == "ack"]
        # The burst a sender may send is kept row by row; the rest only as counts.
        assert len(acks) < FLOOD / 50  # a burst, then what the rate refills: not 20,000
        counted = [
            int(payload.split()[0]) for _, _, _, payload in acks if "refused over" in payload
        ]
        # In order: every ack sent before the close was refused (counted) before it.
        assert counted and sum(counted) + len(acks) - len(counted) >= FLOOD // 2
        replies = watcher.on("wheeld-replies/script")
        assert len(replies) < FLOOD / 50  # a flood is not answered command by command
    finally:
        flooder.loop_stop()
        flooder.disconnect()
        watcher.close()
        pty.close()
        broker.stop()


def test_recalls_over_the_tables_rate_are_counted_not_dropped_unsaid(tmp_path: Path) -> None:
    """Within their sender's rate (20 at once) but over the table's recalls (5 at once):
    each recall sent is either answered or counted in the journal and the log."""
    broker = Broker(tmp_path)
    broker.start()
    pty = PtyWheel(tmp_path / "wheel")
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "wheel", broker=broker.port, state=tmp_path / "state"
    )
    watcher = Subscriber(broker.port, "#")
    clerk = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    sent = 15
    try:
        with running(DaemonProcess(config, tmp_path)) as daemon:
            watcher.wait(f"{BASE}/status", lambda s: s.get("state") == "online", 30)
            clerk.connect("127.0.0.1", broker.port)
            clerk.loop_start()
            for _ in range(sent):
                clerk.publish(f"{BASE}/command/recall", "{}", qos=1, properties=_as("clerk"))
            # The table's burst of recalls (5) is answered; the rest are refused unread.
            wait_for(lambda: len(watcher.on("wheeld-replies/clerk")) >= 5, 30, "recalls answered")
            wait_for(lambda: clerk.want_write() is False, 30, "the recalls sent")
            assert daemon.terminate() == 0  # what was refused is journaled at the stop
            logged = [
                r for r in daemon.log_lines() if r["event"] == "commands refused over the rate"
            ]
        with sqlite3.connect(tmp_path / "state" / JOURNAL_FILE) as db:
            rows = db.execute(
                "SELECT sender, payload, outcome FROM commands WHERE name = 'recall'"
            ).fetchall()
        db.close()
        counted = [(int(p.split()[0]), s, o) for s, p, o in rows if "refused over" in p]
        answered = len(rows) - len(counted)
        assert 0 < answered < sent
        assert sum(n for n, _, _ in counted) + answered == sent
        assert {(s, o) for _, s, o in counted} == {
            ("clerk", "rate limited: more than 2 a second from every sender together")
        }
        assert [r["sender"] for r in logged] == ["clerk"]
    finally:
        clerk.loop_stop()
        clerk.disconnect()
        watcher.close()
        pty.close()
        broker.stop()
