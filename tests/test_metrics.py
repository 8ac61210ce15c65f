"""The OpenMetrics endpoint and ``<base>/health``: in-process, then on a running daemon."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import siege
from tests.helpers import warmed_up
from wheeld.config import ConfigError, is_loopback, load
from wheeld.core.health import Condition, Heartbeat, Readings, health_payload
from wheeld.core.messages import SCHEMA_VERSION
from wheeld.drivers.wrp import WrpDecoder
from wheeld.shell.journal import OutboxEntry
from wheeld.shell.metrics import (
    LIMITS,
    MAX_TIMED_DECISIONS,
    SCRAPE_CACHE_S,
    MetricsEndpoint,
    TableMetrics,
)
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
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
from wheeld_simulators.scripted import ScriptedWheel

BASE = "wheeld/T9"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> Samples:
    """Every sample of a scrape: (name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# -- configuration ------------------------------------------------------------------


def _load(tmp_path: Path, metrics: str) -> Any:
    path = tmp_path / "c.toml"
    path.write_text(f"[signing]\nrequired = false\n[metrics]\n{metrics}\n")
    return load(path, {})


@pytest.mark.parametrize(
    "listen", ["127.0.0.1:9105", "localhost:9105", "[::1]:9105", "0.0.0.0:80", ""]
)
def test_metrics_listen_takes_host_port_or_nothing(tmp_path: Path, listen: str) -> None:
    assert _load(tmp_path, f"listen = {json.dumps(listen)}").metrics.listen == listen


@pytest.mark.parametrize(
    "listen", ["9105", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "bad host:1", ":9105"]
)
def test_a_bad_metrics_listen_is_one_line_naming_the_key(tmp_path: Path, listen: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, f"listen = {json.dumps(listen)}")
    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith("metrics.listen: "), refused.value.problems


def test_only_loopback_addresses_are_private() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.10", "wheel-pc"]))


def test_the_health_interval_is_at_least_five_seconds(tmp_path: Path) -> None:
    assert _load(tmp_path, "").metrics.health_interval_s == 30
    assert _load(tmp_path, "health_interval_s = 5").metrics.health_interval_s == 5
    with pytest.raises(ConfigError, match=r"metrics\.health_interval_s"):
        _load(tmp_path, "health_interval_s = 4")


# -- the health ------------------------------------------------------------------------


def test_the_health_state_is_judged_from_link_broker_and_faults() -> None:
    assert Condition("up", "connected", ()).state == "ok"
    assert Condition("up", "disconnected", ()).state == "degraded"
    assert Condition("up", "connected", ("cover_open",)).state == "degraded"
    assert Condition("silent", "connected", ()).state == "fault"
    assert Condition("down", "connected", ("wheel_link_lost",)).state == "fault"
    assert Condition("up", "connected", ("journal_unwritable",)).state == "fault"
    assert Condition("up", "connected", (), ("deviation",)).state == "degraded"


def test_the_heartbeat_is_due_on_a_change_and_every_interval() -> None:
    beat = Heartbeat(30)
    ok = Condition("up", "connected", ())
    assert beat.due(ok, 100.0)
    beat.said(ok, 100.0)
    assert not beat.due(ok, 129.0)
    assert beat.due(Condition("down", "connected", ()), 101.0)
    assert beat.due(ok, 130.0)
    beat.forget()  # the broker went away
    assert beat.due(ok, 101.0)


def test_the_health_payload() -> None:
    readings = Readings(Condition("down", "connected", ("wheel_link_lost",)), 3, 4096, 2.5)
    payload = json.loads(health_payload(readings, table="T9", now=0.0).to_json())
    assert payload == {
        "state": "fault",
        "link": "down",
        "broker": "connected",
        "outbox": 3,
        "journal_bytes": 4096,
        "last_frame_age_s": 2.5,
        "faults": ["wheel_link_lost"],
        "alerts": [],
        "table": "T9",
        "ts": "1970-01-01T00:00:00.000Z",
        "schema_version": SCHEMA_VERSION,
    }


# -- the metrics, in-process -------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _readings() -> Readings:
    return Readings(Condition("up", "connected", ()), 0, 8192, 0.25)


def _pipeline() -> TablePipeline:
    return TablePipeline(TableSettings(table="T9", base_topic=BASE, driver="wrp"), WrpDecoder())


def _play(pipeline: TablePipeline, wheel: ScriptedWheel) -> Effects:
    out = Effects()
    out.extend(pipeline.start(wheel.host_time()))
    out.extend(pipeline.on_link_up(wheel.host_time()))
    for at, frame in wheel.lines:
        out.extend(pipeline.on_bytes(frame + b"\r\n", at))
    return out


def test_results_no_spins_and_the_decision_to_puback_latency() -> None:
    pipeline, clock = _pipeline(), _Clock()
    metrics = TableMetrics(pipeline, _readings, info={"version": "1", "table": "T9"}, clock=clock)
    wheel = warmed_up()
    wheel.game("17")
    wheel.game("5")  # the rotor not reversed: direction_not_alternated
    wheel.reverse_rotor()
    wheel.game("0")
    wheel.noise(b"junk\r\n")
    effects = _play(pipeline, wheel)
    ids = list(range(1, len(effects.messages) + 1))
    metrics.decided(effects.games, effects.messages, ids)
    clock.now += 0.04
    for entry_id, message in zip(ids, effects.messages, strict=True):
        metrics.acknowledged(OutboxEntry(entry_id, message))
    metrics.acknowledged(OutboxEntry(10_000, effects.messages[0]))  # not a timed decision

    body, content_type = metrics.exposition("")
    assert content_type.startswith("text/plain")
    samples = _samples(body.decode())
    assert _value(samples, "wheeld_results_total") == 2
    assert _value(samples, "wheeld_no_spins_total", reason="direction_not_alternated") == 1
    assert _value(samples, "wheeld_no_spins_total", reason="ball_not_settled") == 0
    assert _value(samples, "wheeld_decision_ack_seconds_count") == 3
    assert _value(samples, "wheeld_decision_ack_seconds_bucket", le="0.05") == 3
    assert _value(samples, "wheeld_decision_ack_seconds_bucket", le="0.025") == 0
    frames = _value(samples, "wheeld_wheel_frames_total")
    assert frames == pipeline.decoder.counters.as_dict()["frames"] > 0
    assert (_value(samples, "wheeld_wheel_decoder_total", kind="malformed") or 0) + (
        _value(samples, "wheeld_wheel_decoder_total", kind="garbage_bytes") or 0
    ) > 0
    assert _value(samples, "wheeld_wheel_link", state="up") == 1
    assert _value(samples, "wheeld_wheel_link", state="down") == 0
    assert _value(samples, "wheeld_journal_bytes") == 8192
    assert _value(samples, "wheeld_info", version="1", table="T9") == 1
    assert _value(samples, "wheeld_health", state="ok") == 1
    assert not any(name.endswith("_created") for name, _ in samples)

    openmetrics, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert openmetrics.endswith(b"# EOF\n")


def test_the_decisions_awaiting_a_puback_are_bounded() -> None:
    pipeline = _pipeline()
    metrics = TableMetrics(pipeline, _readings, info={})
    wheel = warmed_up()
    wheel.game("17")
    effects = _play(pipeline, wheel)
    for round_ in range(MAX_TIMED_DECISIONS + 10):
        ids = [round_ * 100 + i for i in range(len(effects.messages))]
        metrics.decided(effects.games, effects.messages, ids)
    assert len(metrics._journaled_at) == MAX_TIMED_DECISIONS


async def _get(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    async with asyncio.timeout(5):
        answer = await reader.read()
    writer.close()
    return answer


async def test_the_endpoint_serves_metrics_and_refuses_a_port_in_use() -> None:
    pipeline, port = _pipeline(), free_port()
    metrics = TableMetrics(pipeline, _readings, info={})
    log = _Log()
    endpoint = MetricsEndpoint(f"127.0.0.1:{port}", metrics, log=log)
    await endpoint.start()
    try:
        answer = await _get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"wheeld_results_total 0.0" in body
        answer = await _get(
            port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"
        )
        assert b"Content-Type: application/openmetrics-text" in answer
        assert answer.endswith(b"# EOF\n")
        assert (await _get(port, b"GET / HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        assert (await _get(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await _get(port, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert await _get(port, b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 2000) == b""

        second = MetricsEndpoint(f"127.0.0.1:{port}", metrics, log=log)
        with pytest.raises(
            OSError, match=r"^metrics\.listen: 127\.0\.0\.1:\d+: the port is in use"
        ):
            await second.start()
    finally:
        await endpoint.close()
    assert not log.errors
    assert not log.warnings  # loopback: nothing to warn of


async def _timed_scrape(port: int) -> tuple[bytes, float]:
    started = time.monotonic()
    answer = await _get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return answer, time.monotonic() - started


async def test_scrapes_are_served_beside_slowloris_and_a_thousand_idle_connections() -> None:
    """Found: 8 slow connections held every slot, and 28 of 29 scrapes failed. The real
    limits, but for a head deadline of 1 s (5 s in service) to keep the test short."""
    limits = dataclasses.replace(LIMITS, head_timeout_s=1.0)
    port, log = free_port(), _Log()
    endpoint = MetricsEndpoint(
        f"127.0.0.1:{port}", TableMetrics(_pipeline(), _readings, info={}), log=log, limits=limits
    )
    idle: list[socket.socket] = []
    with siege.descriptors(limits.descriptors + 2048):
        await endpoint.start()
        try:
            idle = await siege.idle(port, 1000)
            drippers = siege.Drippers(port, 8, b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            assert endpoint.server.connections <= limits.max_connections
            for _ in range(20):
                answer, took = await _timed_scrape(port)
                assert answer.startswith(b"HTTP/1.1 200 OK") and b"wheeld_results_total" in answer
                # Under the 1 s head deadline: served beside them, not after one was cut
                # (0.5 s was too tight beside another suite on two busy cores).
                assert took < 0.9, f"a scrape took {took:.2f} s"
            # However slowly they drip, each is cut off at the head deadline.
            cut = await drippers.all_cut(timeout=5)
            assert len(cut) == 8 and all(0.9 < after < 4.0 for after in cut), cut
            for sock in idle:
                sock.close()
            async with asyncio.timeout(5):  # every slot back once its client has gone
                while endpoint.server.connections:
                    await asyncio.sleep(0.02)
        finally:
            for sock in idle:
                sock.close()
            await endpoint.close()
    # The idle ones made room as the newcomers came (the idlest first), and said so once.
    # On a busy machine some idle ones reach their head deadline first and are cut for
    # it ("head_late"): either way, every one beyond the slots left.
    dropped = endpoint.server.dropped
    assert dropped["made_room_idle"] + dropped["head_late"] >= 1000 - limits.max_connections
    assert endpoint.server.dropped["head_late"] >= 8
    assert len(log.warnings) == 1 and "every connection slot held" in log.warnings[0]
    assert not log.errors


async def test_a_flood_of_scrapes_renders_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: a scrape flood cost 48 % of a core on the game loop, rendering each one."""
    clock, port = _Clock(), free_port()
    metrics = TableMetrics(_pipeline(), _readings, info={})
    renders: list[str] = []
    exposition = metrics.exposition

    def counted(accept: str) -> tuple[bytes, str]:
        renders.append(accept)
        return exposition(accept)

    monkeypatch.setattr(metrics, "exposition", counted)
    endpoint = MetricsEndpoint(f"127.0.0.1:{port}", metrics, log=_Log(), clock=clock)
    await endpoint.start()
    try:
        scrape = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        answers = []
        for _ in range(10):
            answers += await asyncio.gather(*(_get(port, scrape) for _ in range(30)))
        assert len(set(answers)) == 1 and answers[0].startswith(b"HTTP/1.1 200 OK")
        assert len(renders) == 1
        metrics.results.inc()
        clock.now += SCRAPE_CACHE_S / 2
        assert await _get(port, scrape) == answers[0]  # still the one rendered
        clock.now += SCRAPE_CACHE_S
        assert b"wheeld_results_total 1.0" in await _get(port, scrape)
        assert len(renders) == 2
        # Each format is rendered for itself, and kept as long.
        openmetrics = b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"
        for _ in range(5):
            assert (await _get(port, openmetrics)).endswith(b"# EOF\n")
        assert len(renders) == 3
    finally:
        await endpoint.close()


class _Log:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def info(self, event: str, **fields: Any) -> None:
        pass

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append(event)

    def error(self, event: str, **fields: Any) -> None:
        self.errors.append(event)


# -- a running daemon ----------------------------------------------------------------------


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return _samples(answer.read().decode())


def _scrape_when(port: int, ok: Any, what: str, timeout: float = 15) -> Samples:
    def scraped() -> Samples | None:
        try:
            samples = _scrape(port)
        except (urllib.error.URLError, OSError):
            return None
        return samples if ok(samples) else None

    return wait_for(scraped, timeout, what)  # type: ignore[no-any-return]


def test_a_running_daemon_counts_its_games_and_says_its_health(
    tmp_path: Path, broker: Broker
) -> None:
    port = free_port()
    config = write_config(
        tmp_path / "wheeld.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
        metrics=f'[metrics]\nlisten = "127.0.0.1:{port}"\nhealth_interval_s = 5',
    )
    pty = PtyWheel(tmp_path / "wheel0")
    notify = NotifySocket(tmp_path / "notify.sock")
    sub = Subscriber(broker.port, f"{BASE}/#")
    daemon = DaemonProcess(config, tmp_path, env={"NOTIFY_SOCKET": str(notify.path)})
    wheel = ScriptedWheel(start=time.time())
    try:
        with running(daemon):
            wait_for(lambda: any("READY=1" in m for m in notify.messages()), 30, "READY=1")
            health = sub.wait(f"{BASE}/health", lambda p: p["state"] == "ok", 15)
            assert health["link"] == "up" and health["broker"] == "connected"
            assert health["schema_version"] == SCHEMA_VERSION and health["faults"] == []
            wheel.hello()
            wheel.advance(3000)
            wheel.game("17")
            wheel.game("5")  # the rotor not reversed: a no-spin
            wheel.reverse_rotor()
            wheel.game("0")
            for _, frame in wheel.lines:
                pty.write(frame + b"\r\n")
            sub.wait(f"{BASE}/game", lambda p: p["game_id"] == 3 and p["event"] == "result")

            samples = _scrape_when(
                port, lambda s: _value(s, "wheeld_results_total") == 2, "two results counted"
            )
            reason = "direction_not_alternated"
            assert _value(samples, "wheeld_no_spins_total", reason=reason) == 1
            assert (_value(samples, "wheeld_wheel_frames_total") or 0) > 20
            assert _value(samples, "wheeld_broker_connected") == 1
            assert _value(samples, "wheeld_wheel_link", state="up") == 1
            assert (_value(samples, "wheeld_journal_bytes") or 0) > 0
            assert _value(samples, "wheeld_outbox_pending") is not None
            assert _value(samples, "wheeld_info", table="T9", driver="wrp", version=_version())

            pty.close()
            lost = sub.wait(f"{BASE}/health", lambda p: p["link"] == "down", 15)
            assert lost["state"] == "fault" and "wheel_link_lost" in lost["faults"]
            _scrape_when(
                port, lambda s: _value(s, "wheeld_wheel_link", state="down") == 1, "link down"
            )
            # Unchanged, it is said again as the heartbeat.
            beats = len(sub.on(f"{BASE}/health"))
            wait_for(lambda: len(sub.on(f"{BASE}/health")) > beats, 15, "a heartbeat")
            assert daemon.terminate() == 0
        assert "Traceback" not in daemon.logs()
        # Outside the journal: a broker away must not fill the outbox with heartbeats.
        with sqlite3.connect(tmp_path / "state" / "journal.sqlite3") as db:
            kept = db.execute(
                "SELECT COUNT(*) FROM outbox WHERE topic LIKE '%/health'"
                " UNION ALL SELECT COUNT(*) FROM retained WHERE topic LIKE '%/health'"
            ).fetchall()
        assert kept == [(0,), (0,)]
    finally:
        daemon.ensure_stopped()
        sub.close()
        pty.close()
        notify.close()


class _Publisher:
    """Stands in for the publisher: keeps what the daemon handed it."""

    handed: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args: Any, on_acknowledged: Any = None, **kwargs: Any) -> None:
        _Publisher.handed = {"on_acknowledged": on_acknowledged, **kwargs}


def test_the_daemon_hands_the_publishers_pubacks_to_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wheeld.config import load as load_config
    from wheeld.shell import daemon

    config = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "nope",
        broker=free_port(),
        state=tmp_path / "state",
        metrics=f'[metrics]\nlisten = "127.0.0.1:{free_port()}"',
    )
    monkeypatch.setattr(daemon, "Publisher", _Publisher)
    table = daemon.Daemon(load_config(config, {}))
    try:
        assert table.metrics is not None
        assert _Publisher.handed["on_acknowledged"] == table.metrics.acknowledged
    finally:
        table.journal.close()


def test_the_daemon_reads_the_link_the_broker_and_the_journal(tmp_path: Path) -> None:
    from wheeld.shell.daemon import Daemon

    config = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "nope",
        broker=free_port(),
        state=tmp_path / "state",
        metrics=f'[metrics]\nlisten = "127.0.0.1:{free_port()}"',
    )
    table = Daemon(load(config, {}))
    try:
        readings = table.readings()
        assert readings.condition == Condition("down", "disconnected", ())
        assert readings.outbox == 0 and readings.journal_bytes > 0
        assert readings.last_frame_age_s is None
        link = table.link
        link.connected = True
        table.condition.heard_at = time.monotonic()  # the wheel said something just now
        assert table.readings().condition.link == "up"
        table.condition.heard_at -= 2.5  # longer than rules.link_timeout_ms (2 s) without a byte
        assert table.readings().condition.link == "silent"
        # A port reopened because the wheel went quiet is no sign of the wheel.
        link.last_data = time.monotonic()
        assert table.readings().condition.link == "silent"
        # A fault (the table's own health) and an alert (a judgement of its figures)
        # each in its own list; the metrics gauge shows both.
        table.pipeline.faults.set("cover_open", 1.0)
        table.pipeline.alerts.book.set("deviation", 1.0)
        condition = table.readings().condition
        assert (condition.faults, condition.alerts) == (("cover_open",), ("deviation",))
        payload = health_payload(table.readings(), table="T", now=0.0)
        assert (payload.faults, payload.alerts) == (["cover_open"], ["deviation"])
        assert table.metrics is not None
        samples = _samples(table.metrics.exposition("")[0].decode())
        assert _value(samples, "wheeld_fault_active", fault="deviation") == 1
        assert _value(samples, "wheeld_fault_active", fault="cover_open") == 1
        assert _value(samples, "wheeld_wheel_link", state="silent") == 1
        assert _value(samples, "wheeld_broker_connected") == 0
        assert _value(samples, "wheeld_health", state="fault") == 1
    finally:
        table.journal.close()


def test_a_running_daemon_times_each_decision_to_its_puback(tmp_path: Path, broker: Broker) -> None:
    port = free_port()
    config = write_config(
        tmp_path / "wheeld.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
        metrics=f'[metrics]\nlisten = "127.0.0.1:{port}"',
    )
    pty = PtyWheel(tmp_path / "wheel0")
    sub = Subscriber(broker.port, f"{BASE}/#")
    daemon = DaemonProcess(config, tmp_path)
    wheel = ScriptedWheel(start=time.time())
    try:
        with running(daemon):
            sub.wait(f"{BASE}/status", lambda b: b.get("state") == "online", 30)
            wheel.hello()
            wheel.advance(3000)
            wheel.game("17")
            wheel.reverse_rotor()
            wheel.game("0")
            for _, frame in wheel.lines:
                pty.write(frame + b"\r\n")
            samples = _scrape_when(
                port,
                lambda s: _value(s, "wheeld_decision_ack_seconds_count") == 2,
                "two decisions acknowledged",
            )
            assert (_value(samples, "wheeld_decision_ack_seconds_sum") or 0) < 10
    finally:
        daemon.ensure_stopped()
        sub.close()
        pty.close()


def _version() -> str:
    from wheeld.shell.identity import software_version

    return software_version()


def test_a_metrics_port_in_use_is_one_clear_line_at_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(
            tmp_path / "c.toml",
            port=f"socket://127.0.0.1:{port}",  # a wheel that takes the connection
            broker=free_port(),
            state=tmp_path / "state",
            metrics=f'[metrics]\nlisten = "127.0.0.1:{port}"',
        )
        done = subprocess.run(
            [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert f"metrics.listen: 127.0.0.1:{port}: the port is in use" in done.stderr


_IMPORTS = """
import sys
from pathlib import Path
from wheeld.config import load
from wheeld.shell.daemon import Daemon
daemon = Daemon(load(Path(sys.argv[1])))
daemon.journal.close()
print("prometheus_client" in sys.modules)
"""


@pytest.mark.parametrize(("listen", "imported"), [("", "False"), ("127.0.0.1:9105", "True")])
def test_prometheus_client_is_imported_only_when_metrics_are_on(
    tmp_path: Path, listen: str, imported: str
) -> None:
    config = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "nope",
        broker=free_port(),
        state=tmp_path / "state",
        metrics=f"[metrics]\nlisten = {json.dumps(listen)}",
    )
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == imported, done.stderr
