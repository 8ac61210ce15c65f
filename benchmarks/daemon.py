"""The daemon on a pty against its own mosquitto, beside a bare pyserial -> paho forwarder.

Measures start to READY, RSS, idle CPU at 4 frames/s, and game-event latency
(launch frame written to the pty until `spinning` arrives at a subscriber)
against the same path through a forwarder that only reads lines and
publishes them.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from wheeld.testing.rig import Broker, NotifySocket, PtyWheel, Subscriber, wait_for, write_config
from wheeld_simulators.scripted import ScriptedWheel

FORWARDER = textwrap.dedent("""
    import sys, serial, paho.mqtt.client as mqtt
    port, broker = sys.argv[1], int(sys.argv[2])
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", broker)
    client.loop_start()
    line = serial.Serial(port, 115200, timeout=None)
    while True:
        data = line.readline()
        client.publish("forwarder/raw", data, qos=1)
""")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _arrival(subscriber: Subscriber, topic: str, wanted: bytes, timeout: float = 5) -> float:
    """Block on the subscriber's queue until a message on ``topic`` containing ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        got_topic, payload, _ = subscriber.messages.get(
            timeout=max(0.0, deadline - time.monotonic())
        )
        if got_topic == topic and wanted in payload:
            return time.monotonic()


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def main(games: int = 150) -> None:
    work = Path(tempfile.mkdtemp(prefix="wheeld-bench-"))
    broker = Broker(work)
    broker.start()
    pty = PtyWheel(work / "wheel0")
    notify = NotifySocket(work / "notify.sock")
    config = write_config(
        work / "c.toml", port=work / "wheel0", broker=broker.port, state=work / "state"
    )
    config.write_text(config.read_text().replace('level = "debug"', 'level = "warning"'))
    started = time.monotonic()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
        env={**os.environ, "NOTIFY_SOCKET": str(notify.path)},
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: any("READY=1" in m for m in notify.messages()), 10, "READY")
    ready_ms = (time.monotonic() - started) * 1000
    sub = Subscriber(broker.port, "wheeld/T9/game")
    wheel = ScriptedWheel(start=time.time())
    wheel.hello()
    wheel.advance(3000)
    for _, frame in wheel.lines:
        pty.write(frame + b"\r\n")

    # Idle: heartbeats at 4 frames/s for 20 s.
    cpu_before = _cpu_seconds(daemon.pid)
    idle_start = time.monotonic()
    for _ in range(80):
        wheel.lines.clear()
        wheel.heartbeat()
        pty.write(wheel.lines[0][1] + b"\r\n")
        time.sleep(0.25)
    idle_cpu = (_cpu_seconds(daemon.pid) - cpu_before) / (time.monotonic() - idle_start) * 100

    # Latency: a launch frame in, `spinning` out.
    latencies = []
    for game in range(games):
        wheel.lines.clear()
        wheel.pocket(None)
        wheel.advance(300)
        before = len(wheel.lines)
        wheel.launch()
        wheel.incident("object")  # void at once: the next launch can follow
        wheel.advance(wheel.rotor_period_ms * 3 + 100)
        for _, frame in wheel.lines[:before]:
            pty.write(frame + b"\r\n")
        sent = time.monotonic()
        pty.write(wheel.lines[before][1] + b"\r\n")
        arrived = _arrival(sub, "wheeld/T9/game", b'"event":"spinning","game_id":%d,' % (game + 1))
        latencies.append((arrived - sent) * 1000)
        for _, frame in wheel.lines[before + 1 :]:
            pty.write(frame + b"\r\n")
        # The game ends (its no_spin, fsync'd) before the next launch: as at a real
        # table, where games are half a minute apart, a launch never queues behind it.
        _arrival(sub, "wheeld/T9/game", b'"event":"no_spin","game_id":%d,' % (game + 1))
    rss = _rss_mib(daemon.pid)
    daemon.terminate()
    daemon.wait(10)
    pty.close()

    # The same path through a bare forwarder.
    pty = PtyWheel(work / "wheel1")
    forwarder = subprocess.Popen(
        [sys.executable, "-c", FORWARDER, str(work / "wheel1"), str(broker.port)]
    )
    raw = Subscriber(broker.port, "forwarder/raw")
    time.sleep(1.0)  # let it connect and open the port (the forwarder has no READY)
    baseline = []
    for game in range(games):
        sent = time.monotonic()
        pty.write(b"$WRBAL,%d,%d,CCW,0*00\r\n" % (game, game))
        arrived = _arrival(raw, "forwarder/raw", b"$WRBAL,%d," % game)
        baseline.append((arrived - sent) * 1000)
    forwarder.terminate()
    raw.close()
    sub.close()
    broker.stop()

    print(f"start to READY: {ready_ms:.0f} ms (target <= 400)")
    print(f"RSS after {games} games: {rss:.1f} MiB (target <= 40)")
    print(f"idle CPU at 4 frames/s: {idle_cpu:.3f} % of a core (target <= 0.25)")
    p99, base = _p99(latencies), _p99(baseline)
    print(
        f"latency p99: wheeld {p99:.2f} ms, forwarder {base:.2f} ms, ratio {p99 / base:.2f} "
        f"(target <= 1.2); medians {statistics.median(latencies):.2f} / "
        f"{statistics.median(baseline):.2f} ms"
    )


if __name__ == "__main__":
    main()
