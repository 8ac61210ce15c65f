"""What others leave on the table's topics, and a daemon killed at a bad moment.

Found by trying the daemon as an adversary would (docs/testing.md, "Third round, attacked"):
garbage retained where the daemon reads, and a kill -9 between a decision's
publish and what is derived from it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.test_daemon import BASE, Table, _warm, table

__all__ = ["table"]  # the fixture: a daemon on a pty (its broker conftest's)
from wheeld.testing.rig import running

#: JSON nested past Python's recursion limit, well under the 64 KiB a payload may have:
#: ``json.loads`` raises RecursionError, which is no ValueError.
DEEP = b"[" * 50_000


def publish(port: int, topic: str, payload: bytes, *, retain: bool) -> None:
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"garbage-{uuid.uuid4().hex[:8]}")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    finally:
        client.loop_stop()
        client.disconnect()


def _alive(table: Table) -> bool:
    return table.daemon.process is not None and table.daemon.process.poll() is None


def test_a_deeply_nested_retained_status_is_no_crash(table: Table) -> None:
    """Found: the start-up check parsed the retained <base>/status with ``except
    ValueError`` only; 50 KB of ``[`` there made the start-up check give up (the
    retained sequence and result unread) and the publisher fail at every connect,
    once a second, for ever: nothing was ever published."""
    publish(table.broker.port, f"{BASE}/status", DEEP, retain=True)
    with running(table.daemon):
        table.ready()
        assert _alive(table), table.daemon.logs()[-2000:]
        # Said while it runs (a live status), the same.
        publish(table.broker.port, f"{BASE}/status", DEEP, retain=False)
        _warm(table)
        table.wheel.game("17")
        table.flush()
        table.wait_end(1)
        assert _alive(table), table.daemon.logs()[-2000:]
    logs = table.daemon.logs()
    assert "Traceback" not in logs
    # Nor is the start-up check given up (it read the retained sequence and result too).
    assert "start-up check failed" not in logs


def test_wheeld_status_reads_a_deeply_nested_status_as_no_status(table: Table) -> None:
    """Found: ``wheeld status`` ended in a RecursionError traceback on the same payload."""
    publish(table.broker.port, f"{BASE}/status", DEEP, retain=True)
    done = subprocess.run(
        [sys.executable, "-m", "wheeld", "status", "--config", str(table.config), "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "RecursionError" not in done.stdout + done.stderr
