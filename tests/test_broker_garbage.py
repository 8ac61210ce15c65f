"""What others leave on the table's topics, and a daemon killed at a bad moment.

Found by trying the daemon as an adversary would (docs/testing.md, "Third round, attacked"):
garbage retained where the daemon reads, and a kill -9 between a decision's
publish and what is derived from it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.test_daemon import BASE, Table, _warm, table

__all__ = ["table"]  # the fixture: a daemon on a pty (its broker conftest's)
from wheeld.shell.applier import _behind
from wheeld.shell.journal import JOURNAL_FILE
from wheeld.testing.rig import Subscriber, running, wait_for

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


def test_history_and_stats_a_kill_left_underived_are_said_at_the_next_start(
    table: Table,
) -> None:
    """Found: the history and statistics are derived on the loop's turn after a result
    is journaled (and published); a kill -9 in between left ``<base>/history`` and
    ``<base>/stats`` without that result until the next outcome, though the journal,
    ``<base>/result`` and ``<base>/game`` had it."""
    with running(table.daemon):
        table.ready()
        _warm(table)
        table.wheel.game("17")
        table.flush()
        table.wait_end(1)
        before = table.sub.wait(f"{BASE}/stats", lambda p: isinstance(p, dict))
        table.sub.wait(f"{BASE}/history", lambda p: p["numbers"] == ["17"])
        table.wheel.reverse_rotor()
        table.wheel.game("0")
        table.flush()
        table.wait_end(2)
        table.sub.wait(f"{BASE}/history", lambda p: p["numbers"] == ["0", "17"])
        table.daemon.kill()
    # Killed after the derivation: a start has nothing to say again.
    with running(table.daemon):
        table.ready()
        assert "said again at start" not in table.daemon.logs()
        table.daemon.kill()
    # As a kill between game 2's commit and its derivation leaves them: the journal
    # and the broker hold game 1's history and statistics.
    stale = {"numbers": ["17"], "schema_version": 1}
    db = sqlite3.connect(table.tmp / "state" / JOURNAL_FILE)
    with db:
        db.execute("DELETE FROM outbox WHERE topic IN (?, ?)", (f"{BASE}/history", f"{BASE}/stats"))
        for name, body in (("history", stale), ("stats", before)):
            db.execute(
                "UPDATE retained SET payload = ? WHERE topic = ?",
                (json.dumps(body), f"{BASE}/{name}"),
            )
    db.close()
    for name, body in (("history", stale), ("stats", before)):
        publish(table.broker.port, f"{BASE}/{name}", json.dumps(body).encode(), retain=True)
    table.sub.close()
    table.sub = Subscriber(table.broker.port, f"{BASE}/#")
    with running(table.daemon):
        table.ready()
        table.sub.wait(f"{BASE}/history", lambda p: p["numbers"] == ["0", "17"], timeout=10)
        stats = table.sub.wait(f"{BASE}/stats", lambda p: p != before, timeout=10)
        assert stats["games"] == 2, stats


def test_what_a_start_says_again_of_the_history_and_the_statistics() -> None:
    history = json.dumps({"numbers": ["0", "17"], "schema_version": 1})
    stats = json.dumps({"pockets": 37, "games": 2, "schema_version": 1})
    # Held as the games make them (the wheel's own figures beside them are not judged).
    assert not _behind(history, history, unsaid=True)
    assert not _behind(json.dumps({"games": 2, "wheel": {"x": 1}}), stats, unsaid=True)
    # Behind: a result short, or garbage.
    assert _behind(json.dumps({"numbers": ["17"]}), history, unsaid=True)
    assert _behind(b'{"games": 1}', stats, unsaid=True)
    assert _behind("[[", stats, unsaid=True)
    # None held: said when never said (the first outcome's derivation killed), not when
    # let go because another controller went on past this journal, nor before any game.
    assert _behind(None, history, unsaid=True)
    assert not _behind(None, history, unsaid=False)
    assert not _behind(None, json.dumps({"numbers": []}), unsaid=True)
    assert not _behind(None, json.dumps({"games": 0}), unsaid=True)


def test_a_takeover_at_start_shows_the_tables_history_and_a_restart_keeps_it(
    table: Table,
) -> None:
    """Found: a standby that took the table over went on with its own journal's old
    numbers on ``<base>/history``, and rebuilt them so at every start."""
    from wheeld.core.signing import Signer, digest
    from wheeld.shell.journal import Journal

    with running(table.daemon):
        table.ready()
        _warm(table)
        table.wheel.game("17")  # its own stint
        table.flush()
        table.wait_end(1)
        own = table.sub.wait(f"{BASE}/sequence", lambda p: p["event"] == "result")
    # Another journal went on with the table (its key): its game 4 ended on 5.
    signer = Signer.from_file(table.tmp / "signing.key")
    said = {k: v for k, v in own["message"].items() if k not in ("kid", "sig")}
    said.update(epoch="journal-other", game_id=4, seq=own["seq"] + 9, number="5")
    message = signer.sign(said)
    marker = {**own, "epoch": "journal-other", "game_id": 4, "seq": message["seq"]}
    marker.update(digest=digest(message), message=message)
    publish(table.broker.port, f"{BASE}/history", b'{"numbers": ["5", "32"]}', retain=True)
    publish(table.broker.port, f"{BASE}/sequence", json.dumps(marker).encode(), retain=True)
    table.notify.received.clear()
    with running(table.daemon):
        wait_for(lambda: any("READY=1" in m for m in table.notify.messages()), 30, "READY")
        table.sub.wait(f"{BASE}/history", lambda p: p["numbers"] == ["5", "32"], timeout=10)
        table.wheel.set_rotor("ccw")  # against the table's last result's (17's, cw)
        table.wheel.advance(10_000)
        table.wheel.game("0")
        table.flush()
        table.wait_end(5)
        table.sub.wait(f"{BASE}/history", lambda p: p["numbers"] == ["0", "5", "32"])
    journal = Journal(table.tmp / "state" / JOURNAL_FILE)
    try:
        assert journal.history(100) == ["0", "5", "32"]  # what the next start shows
    finally:
        journal.close()
    assert "Traceback" not in table.daemon.logs()
