"""The daemon on a pty against its own mosquitto, beside a bare pyserial -> paho forwarder.

Measures start to READY (the median of several first starts, each a table of
its own, and of as many restarts after the games), RSS, idle CPU at 4 frames/s,
game-event latency (launch frame written to the pty until `spinning` arrives at
a subscriber) against the same path through a forwarder that only reads lines and
publishes them, the `result` latency (the frame that settles the ball in its
pocket written until the `result` arrives) against the forwarder's p99 plus
one fsync of the state directory's disk (a probe in the same run), and the
daemon's CPU per game over whole games. Each figure is printed beside its
target and with the load average when it was taken: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from wheeld.testing.rig import Broker, NotifySocket, PtyWheel, Subscriber, write_config
from wheeld_simulators.scripted import DEFAULT_BALL_PERIODS, ScriptedWheel

#: The rules' ``settle_ms`` in the configuration the rig writes (the default).
SETTLE_MS = 1000
#: The idle window: heartbeats at 4 a second, after the hello has settled (beating).
IDLE_SETTLE_S = 3.0
IDLE_FRAMES = 120

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

#: ``wheeld`` under cProfile timed by the process's CPU time; argv: the profile's path, then
#: wheeld's arguments.
PROFILED = textwrap.dedent("""
    import cProfile, runpy, sys, time
    out = sys.argv[1]
    sys.argv = ["wheeld", *sys.argv[2:]]
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    try:
        runpy.run_module("wheeld", run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)
""")


def _cpu_seconds(pid: int) -> float:
    """The process's CPU time to the nanosecond: every thread's ``schedstat``.

    ``/proc/<pid>/stat`` counts clock ticks (10 ms): over the idle window a tick
    is 0.05 % of a core, a third of the idle target, so that figure moved in
    steps of its own size. A thread that has ended is not counted (the daemon's
    threads live as long as it does).
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


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


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def _start(
    config: Path, notify: NotifySocket, profile: Path | None = None
) -> tuple[subprocess.Popen[bytes], float]:
    """``wheeld run`` started, and the milliseconds until it said READY; under cProfile,
    its profile written to ``profile`` when it stops, with ``profile`` (by CPU time: the
    figures it explains are CPU figures, and on a loaded machine a wall-clock profile
    charges the other processes' time to whatever was waiting)."""
    command = ["-m", "wheeld"]
    if profile is not None:
        command = ["-c", PROFILED, str(profile)]
    started = time.monotonic()
    daemon = subprocess.Popen(
        [sys.executable, *command, "run", "--config", str(config)],
        env={**os.environ, "NOTIFY_SOCKET": str(notify.path)},
        stderr=subprocess.DEVNULL,
    )
    try:
        return daemon, (notify.ready_at(10) - started) * 1000
    except BaseException:  # no READY: not left running behind the benchmark
        _stop(daemon)
        raise


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.terminate()
    try:
        daemon.wait(10)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()


def _timed_start(config: Path, notify_path: Path) -> float:
    """One start to READY, the daemon stopped again: its milliseconds."""
    notify = NotifySocket(notify_path)
    try:
        daemon, ready_ms = _start(config, notify)
        _stop(daemon)
    finally:
        notify.close()
    return ready_ms


def _fsync_probe(directory: Path, samples: int = 200) -> list[float]:
    """Milliseconds of one ``fsync`` after a small write, on the state directory's disk:
    what a durable journal commit waits for at least."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fsync-probe"
    took = []
    with path.open("wb") as handle:
        for index in range(samples):
            handle.write(b"%08d" % (index,) * 512)  # 4 KiB, a page
            handle.flush()
            started = time.perf_counter()
            os.fsync(handle.fileno())
            took.append((time.perf_counter() - started) * 1000)
    path.unlink()
    return took


def _result_game(wheel: ScriptedWheel, number: str) -> tuple[list[bytes], bytes, list[bytes]]:
    """A whole game: the frames up to the ball resting in ``number``'s pocket, the frame
    that settles it (the first a settle time later: the result is decided on it), and
    the frames after (the rotor reverses for the next game)."""
    wheel.lines.clear()
    wheel.pocket(None)
    wheel.advance(700)
    direction = wheel.launch()
    wheel.run_ball(direction, DEFAULT_BALL_PERIODS)
    wheel.drop(number)
    wheel.advance(SETTLE_MS - 50)  # under the settle time: the ball rests, no result yet
    wheel.silence(50)
    before = [frame for _, frame in wheel.lines]
    wheel.lines.clear()
    wheel.heartbeat()  # at the settle time: the result
    settling = wheel.lines[0][1]
    wheel.lines.clear()
    wheel.advance(500)
    wheel.reverse_rotor()
    return before, settling, [frame for _, frame in wheel.lines]


def _table(directory: Path) -> tuple[Broker, PtyWheel, Path]:
    """A table of its own in ``directory``: its broker (started), its wheel on a pty, and
    a configuration for them with an empty state directory, logging warnings only."""
    broker = Broker(directory)
    broker.start()
    pty = PtyWheel(directory / "wheel0")
    config = write_config(
        directory / "c.toml",
        port=directory / "wheel0",
        broker=broker.port,
        state=directory / "state",
    )
    config.write_text(config.read_text().replace('level = "debug"', 'level = "warning"'))
    return broker, pty, config


def _first_starts(work: Path, count: int) -> list[float]:
    """``count`` first starts, each a table of its own (its own broker, pty, key and
    empty state directory), stopped once READY: one start is one sample, and a
    VM's moment of noise is not the figure."""
    took = []
    for index in range(count):
        own = work / f"first-start-{index}"
        own.mkdir()
        broker, pty, config = _table(own)
        try:
            took.append(_timed_start(config, own / "notify.sock"))
        finally:
            pty.close()
            broker.stop()
    return took


def _heartbeats(wheel: ScriptedWheel, pty: PtyWheel, count: int) -> None:
    """``count`` heartbeats, 4 a second, as an idle wheel sends them."""
    for _ in range(count):
        wheel.lines.clear()
        wheel.heartbeat()
        pty.write(wheel.lines[0][1] + b"\r\n")
        time.sleep(0.25)


def _starts(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples):.0f} ms of {len(samples)} "
        f"({min(samples):.0f}-{max(samples):.0f})"
    )


def main(
    games: int = 150, results: int = 100, profile: Path | None = None, starts: int = 5
) -> None:
    work = Path(tempfile.mkdtemp(prefix="wheeld-bench-"))
    # The other first starts before the games' own, each with a table of its own (all
    # of them when the games' own is profiled: that one is not counted).
    first_starts = _first_starts(work, max(1, starts) - (1 if profile is None else 0))
    broker, pty, config = _table(work)
    notify = NotifySocket(work / "notify.sock")
    daemon, ready_ms = _start(config, notify, profile)
    if profile is None:  # a profiled start is not the daemon's figure
        first_starts.append(ready_ms)
    sub = Subscriber(broker.port, "wheeld/T9/game")
    stats = Subscriber(broker.port, "wheeld/T9/stats")
    wheel = ScriptedWheel(start=time.time())
    wheel.hello()
    wheel.advance(3000)
    for _, frame in wheel.lines:
        pty.write(frame + b"\r\n")

    # Idle: heartbeats at 4 frames/s for 30 s, once what follows the wheel's hello
    # (its link's first publishes, the collector's first run) is over. The wheel
    # keeps beating meanwhile: silent for the link's timeout (2 s, as this settle
    # was until 2026-12-07), it was lost and found again, sometimes inside the window.
    _heartbeats(wheel, pty, round(IDLE_SETTLE_S * 4))
    cpu_before = _cpu_seconds(daemon.pid)
    idle_start = time.monotonic()
    _heartbeats(wheel, pty, IDLE_FRAMES)
    idle_cpu = (_cpu_seconds(daemon.pid) - cpu_before) / (time.monotonic() - idle_start) * 100

    idle_load = _load()

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
        # The game ends (its no_spin, fsync'd, and the statistics that follow it) before
        # the next launch: as at a real table, where games are half a minute apart, a
        # launch never queues behind them. (Without the statistics, about half the
        # launches waited for their PUBACK: a game's messages go out in order.)
        _arrival(sub, "wheeld/T9/game", b'"event":"no_spin","game_id":%d,' % (game + 1))
        _arrival(stats, "wheeld/T9/stats", b"")
    rss = _rss_mib(daemon.pid)
    spinning_load = _load()

    # Whole games: the frame that settles the ball in, `result` out; the daemon's CPU
    # over them (every frame of each game, its fsync'd decisions, statistics, history).
    settled = []
    cpu_before = _cpu_seconds(daemon.pid)
    games_start = time.monotonic()
    for index in range(results):
        game_id = games + 1 + index
        leading, settling, trailing = _result_game(wheel, str(index % 37))
        pty.write(b"".join(frame + b"\r\n" for frame in leading))
        # Every frame before it is read and betting closed: the settling frame then
        # meets an idle daemon, as at a table.
        _arrival(sub, "wheeld/T9/game", b'"event":"no_more_bets","game_id":%d,' % game_id)
        time.sleep(0.05)
        sent = time.monotonic()
        pty.write(settling + b"\r\n")
        arrived = _arrival(sub, "wheeld/T9/game", b'"event":"result","game_id":%d,' % game_id)
        settled.append((arrived - sent) * 1000)
        pty.write(b"".join(frame + b"\r\n" for frame in trailing))
    games_s = time.monotonic() - games_start
    games_cpu = _cpu_seconds(daemon.pid) - cpu_before
    # What the daemon would have spent idle meanwhile, taken off: the games' own work.
    cpu_per_game = games_cpu / results * 1000
    net_per_game = (games_cpu - idle_cpu / 100 * games_s) / results * 1000
    results_load = _load()
    fsync = _fsync_probe(work / "state")
    _stop(daemon)
    notify.close()
    # Again, as a table that has played restarts: the broker holds its status, sequence
    # and result, and the start-up check has every answer it waits for at once.
    restarts = [
        _timed_start(config, work / f"notify-again-{index}.sock") for index in range(max(1, starts))
    ]
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
    stats.close()
    broker.stop()

    print(
        f"start to READY: a first start {_starts(first_starts)} (target <= 300); "
        f"restarting after the games {_starts(restarts)}"
    )
    print(f"RSS after {games} games: {rss:.1f} MiB (target <= 40)")
    print(f"idle CPU at 4 frames/s: {idle_cpu:.3f} % of a core (target <= 0.15; {idle_load})")
    p99, base = _p99(latencies), _p99(baseline)
    median, base_median = statistics.median(latencies), statistics.median(baseline)
    print(
        f"`spinning` median: wheeld {median:.2f} ms, forwarder {base_median:.2f} ms, "
        f"ratio {median / base_median:.2f} (target <= 1.5; {spinning_load})"
    )
    print(
        f"`spinning` p99: wheeld {p99:.2f} ms, forwarder {base:.2f} ms, ratio {p99 / base:.2f} "
        f"(target <= 2)"
    )
    one_fsync = _p99(fsync)
    print(
        f"`result` p99: {_p99(settled):.2f} ms (median {statistics.median(settled):.2f}) over "
        f"{results} games (target <= forwarder p99 + one fsync = {base:.2f} + {one_fsync:.2f} "
        f"= {base + one_fsync:.2f} ms; fsync probe median {statistics.median(fsync):.2f} ms, "
        f"p99 {one_fsync:.2f} ms; {results_load})"
    )
    print(
        f"CPU per game: {cpu_per_game:.2f} ms, {net_per_game:.2f} ms net of idle (target <= 2; "
        f"{results} whole games, launch to result and the rotor's reversal, in {games_s:.1f} s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=150, help="launches timed (default 150)")
    parser.add_argument(
        "--results", type=int, default=100, help="whole games timed to `result` (default 100)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the daemon (until its restart) under cProfile by CPU time, its profile "
        "written here: every figure but start to READY is then the profiled daemon's (the "
        "profiled start is left out of READY's median)",
    )
    parser.add_argument(
        "--starts",
        type=int,
        default=5,
        help="starts timed to READY, first starts and restarts each (default 5; their median)",
    )
    options = parser.parse_args()
    main(options.games, options.results, options.profile, options.starts)
