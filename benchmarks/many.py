"""Many wheels on one machine: one `wheeld run` per wheel against one mosquitto.

For each N of ``--wheels`` (default 8, 32, 64) it starts N daemons at once, each
with its own table id (W01, W02, ...), state directory, configuration, signing
key and WRP/1 wheel on a pty, waits for every one to say READY=1 and to be
``online`` on MQTT, then plays games on all of them. Each wheel sends what a
real head sends (heartbeats at 4 frames/s, rotor datum passes), each on a clock
of its own (its phase spread over the second), and launches a ball once every
``--period`` seconds; the wheels' launches are spread evenly over that period,
so the machine sees N / period launches a second, never two at once. A burst
round then launches every wheel at the same instant.

Measured: ``spinning`` latency (launch frame written to the pty until the
``spinning`` message reaches a subscriber of the same broker) p50/p99/max over
all wheels, CPU (user+system from /proc/<pid>/stat over the measuring window)
and RSS (VmRSS; PSS summed over the daemons, which counts the shared pages once)
per wheel. Prints one markdown table; `benchmarks/results.md` records runs.

    python -m benchmarks.many [--wheels 8 32 64] [--period 4] [--games G] [--preforked]

``--preforked`` starts the daemons another way: forked, one per wheel, from one
parent that imported wheeld first (``benchmarks/preforked.py``: the design weighed
for 64 wheels in one gibibyte, not wheeld's own); the parent's PSS is counted with
the daemons'.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import heapq
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from wheeld.testing.rig import Broker, NotifySocket, PtyWheel, write_config
from wheeld_simulators.scripted import ScriptedWheel

#: The rotor turns once a second: after a no-spin the rules want 3 turns before
#: the next launch (respin_too_early), so a launch every 4 s is a valid one.
ROTOR_PERIOD_MS = 1000
#: Wheel time before the first launch: the hello, heartbeats and rotor passes.
WARM_UP_MS = 4000
#: The ball is picked up this long before it is launched.
PICK_UP_MS = 300
#: Spreads the wheels' clocks over a second, each phase as far from the others as it can.
GOLDEN = 0.6180339887498949
#: A launch with no `spinning` after this long is counted as missed.
MISSED_AFTER_S = 5.0
#: What stops the benchmark (and, through it, every daemon).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Linux's prctl option: a signal for the child when its parent dies.
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Run in the child before exec: should the benchmark be killed outright,
    # no daemon is left behind holding a pty and a port.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kib(pid: int, path: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def _percentile(samples: list[float], percent: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else math.nan
    return statistics.quantiles(samples, n=100, method="inclusive")[percent - 1]


class Forked:
    """A daemon forked by ``benchmarks.preforked`` (which reaps it), used as a Popen is here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        """None while it runs; -1 once it is gone (its status is its parent's to read)."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return -1
        return -1 if state in ("Z", "X") else None

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.05)
        return -1


class Preforker:
    """``benchmarks.preforked``: the parent that forks the daemons (``--preforked``)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.preforked"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (no thread runs yet)
        )

    def fork(self, config: Path, notify: NotifySocket, log: Path) -> Forked:
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"config": str(config), "notify": str(notify.path), "log": str(log)}
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        return Forked(int(self.process.stdout.readline()))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@dataclass
class Wheel:
    """One table: its daemon, its pty and its scripted head."""

    table: str
    directory: Path
    pty: PtyWheel
    notify: NotifySocket
    process: subprocess.Popen[bytes] | Forked
    #: Host time (monotonic) each launch frame was written, in order.
    launches: list[float] = field(default_factory=list)


class Listener:
    """Every `<base>/status` and `<base>/game` message, stamped when it arrives."""

    def __init__(self, port: int) -> None:
        self.online: set[str] = set()
        #: (arrival, table) of each `spinning`.
        self.spinning: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self.client = paho.Client(CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, u, f, rc, p=None: c.subscribe(
            [("wheeld/+/status", 1), ("wheeld/+/game", 1)]
        )
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def _on_message(self, client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        arrived = time.monotonic()
        table, kind = message.topic.split("/")[1:3]
        if kind == "game":
            if b'"event":"spinning"' in message.payload:
                with self._lock:
                    self.spinning.append((arrived, table))
            return
        with contextlib.suppress(ValueError):
            state = json.loads(message.payload).get("state")
            with self._lock:
                if state == "online":
                    self.online.add(table)
                else:
                    self.online.discard(table)

    def spinning_of(self, table: str) -> list[float]:
        with self._lock:
            return [at for at, name in self.spinning if name == table]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def _start_wheels(
    work: Path, broker: int, count: int, wheels: list[Wheel], preforker: Preforker | None = None
) -> None:
    """Start ``count`` daemons, each added to ``wheels`` as it starts (so all are stopped);
    forked by ``preforker`` when there is one."""
    for index in range(count):
        table = f"W{index + 1:02d}"
        directory = work / table
        directory.mkdir()
        pty = PtyWheel(directory / "wheel")
        config = write_config(
            directory / "wheeld.toml", port=directory / "wheel", broker=broker, state=directory
        )
        text = config.read_text().replace('id = "T9"', f'id = "{table}"')
        config.write_text(text.replace('level = "debug"', 'level = "warning"'))
        notify = NotifySocket(directory / "notify.sock")
        if preforker is not None:
            forked = preforker.fork(config, notify, directory / "wheeld.log")
            wheels.append(Wheel(table, directory, pty, notify, forked))
            continue
        with (directory / "wheeld.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
                env={**os.environ, "NOTIFY_SOCKET": str(notify.path)},
                stdout=subprocess.DEVNULL,
                stderr=log,
                # Ctrl-C reaches the benchmark, which stops every daemon itself.
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (no thread runs yet)
            )
        wheels.append(Wheel(table, directory, pty, notify, process))


def _stop_wheels(wheels: list[Wheel]) -> None:
    for wheel in wheels:
        if wheel.process.poll() is None:
            wheel.process.terminate()
    deadline = time.monotonic() + 20
    for wheel in wheels:
        try:
            wheel.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            wheel.process.kill()
            wheel.process.wait(10)
        wheel.pty.close()
        wheel.notify.close()


def _script(
    launch_times: list[float], tail_ms: int, phase_s: float = 0.0
) -> Iterator[tuple[float, bytes, bool]]:
    """A wheel's frames as (seconds after the schedule's start, frame, is it a launch).

    ``phase_s`` (under a second): where this wheel's own clock falls, its hello and so
    its heartbeats and rotor passes, while its launches stay at ``launch_times``.
    """
    head = ScriptedWheel(start=0.0, rotor_period_ms=ROTOR_PERIOD_MS)
    head.hello()
    origin = head.tick
    for at in launch_times:
        head.advance(round((at - phase_s) * 1000) - PICK_UP_MS - (head.tick - origin))
        head.pocket(None)
        head.advance(PICK_UP_MS)
        head.launch()
        # A foreign object at once: the game ends there (no_spin), and the next
        # launch needs no ball run, drop and settling first.
        head.incident("object")
    head.advance(tail_ms)
    for host_time, frame in head.lines:
        # Host time is the tick plus 2 ms of link; the ball's only passes are its launches.
        tick = round(host_time * 1000) - 2
        yield (tick - origin) / 1000 + phase_s, frame, frame.startswith(b"$WRBAL,")


@dataclass
class Round:
    """What one run of N wheels measured."""

    wheels: int
    launches: int
    latencies_ms: list[float]
    missed: int
    writer_late_ms: float
    cpu_percent: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    pss_mib: float = 0.0
    ready_s: float = 0.0
    burst_latencies_ms: list[float] = field(default_factory=list)
    burst_missed: int = 0
    #: The machine's 1-minute load average when the games ended.
    load_end: float = 0.0


def _play(
    wheels: list[Wheel], schedule: list[list[tuple[float, bytes, bool]]]
) -> tuple[float, float]:
    """Write every wheel's frames at their times; returns (start, worst lateness in ms)."""
    queue = [(frames[0][0], index, 0) for index, frames in enumerate(schedule) if frames]
    heapq.heapify(queue)
    start = time.monotonic() + 0.2
    worst = 0.0
    while queue:
        due, index, position = heapq.heappop(queue)
        delay = start + due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            worst = max(worst, -delay * 1000)
        _, frame, is_launch = schedule[index][position]
        if is_launch:
            wheels[index].launches.append(time.monotonic())
        wheels[index].pty.write(frame + b"\r\n")
        if position + 1 < len(schedule[index]):
            heapq.heappush(queue, (schedule[index][position + 1][0], index, position + 1))
    return start, worst


def _match(wheels: list[Wheel], listener: Listener, first: int) -> tuple[list[float], int]:
    """Latency of each launch from index ``first`` on, and how many got no `spinning`."""
    latencies, missed = [], 0
    for wheel in wheels:
        arrivals = sorted(listener.spinning_of(wheel.table))
        for number, sent in enumerate(wheel.launches):
            # The first `spinning` after the launch and before the next one is its own.
            until = wheel.launches[number + 1] if number + 1 < len(wheel.launches) else math.inf
            got = next((at for at in arrivals if sent <= at < until), None)
            if number < first:
                continue
            if got is None or got - sent > MISSED_AFTER_S:
                missed += 1
            else:
                latencies.append((got - sent) * 1000)
    return latencies, missed


def run_round(
    count: int,
    *,
    period: float,
    games: int,
    ready_timeout: float,
    keep: bool,
    preforked: bool = False,
) -> Round:
    work = Path(tempfile.mkdtemp(prefix=f"wheeld-many-{count}-"))
    broker = Broker(work)
    broker.start()
    wheels: list[Wheel] = []
    listener: Listener | None = None
    preforker = Preforker() if preforked else None
    try:
        started = time.monotonic()
        _start_wheels(work, broker.port, count, wheels, preforker)
        listener = Listener(broker.port)
        live = listener

        def all_up() -> bool:
            for wheel in wheels:
                code = wheel.process.poll()
                if code is not None:
                    log = (wheel.directory / "wheeld.log").read_text(errors="replace")
                    raise RuntimeError(f"{wheel.table}: wheeld exited {code}: {log[-400:]}")
            ready = all(any("READY=1" in m for m in w.notify.messages()) for w in wheels)
            return ready and len(live.online) == count

        _wait(all_up, ready_timeout, f"{count} daemons READY and online")
        ready_s = time.monotonic() - started

        # Paced: wheel i launches at warm-up + i * period / N, then every period.
        # Burst: every wheel once more, at the same instant, a period after the last.
        # Each wheel keeps its own clock (its heartbeats and rotor passes), as wheels
        # that share none do: at one phase, every wheel's heartbeat came in the same
        # instant, four times a second, 64 daemons woke at once, and every 16th wheel's
        # launch came with the rotor passes of all of them.
        warm_up = WARM_UP_MS / 1000
        burst_at = warm_up + games * period + period
        schedule = []
        for index in range(count):
            paced = [warm_up + index * period / count + game * period for game in range(games)]
            phase = (index * GOLDEN) % 1.0
            schedule.append(list(_script([*paced, burst_at], tail_ms=1000, phase_s=phase)))
        cpu_before = [_cpu_seconds(w.process.pid) for w in wheels]
        start, late = _play(wheels, schedule)
        window = time.monotonic() - start
        cpu = [
            (_cpu_seconds(w.process.pid) - before) / window * 100
            for w, before in zip(wheels, cpu_before, strict=True)
        ]
        expected = count * (games + 1)
        with contextlib.suppress(TimeoutError):
            _wait(lambda: len(live.spinning) >= expected, MISSED_AFTER_S, "the last `spinning`")
        paced_latencies, paced_missed = _match(
            [_without_last(w) for w in wheels], listener, first=0
        )
        burst_latencies, burst_missed = _match(wheels, listener, first=games)
        pids = [w.process.pid for w in wheels]
        if preforker is not None:
            pids.append(preforker.process.pid)
        measured = Round(
            wheels=count,
            launches=count * games,
            latencies_ms=paced_latencies,
            missed=paced_missed,
            writer_late_ms=late,
            cpu_percent=cpu,
            rss_mib=[_status_kib(w.process.pid, "status", "VmRSS:") / 1024 for w in wheels],
            pss_mib=sum(_status_kib(pid, "smaps_rollup", "Pss:") for pid in pids) / 1024,
            ready_s=ready_s,
            burst_latencies_ms=burst_latencies,
            burst_missed=burst_missed,
            load_end=os.getloadavg()[0],
        )
        return measured
    finally:
        with _uninterrupted():
            if listener is not None:
                listener.close()
            _stop_wheels(wheels)
            if preforker is not None:
                preforker.close()
            broker.stop()
            if keep:
                print(f"kept {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM off while cleaning up: a second one would leave
    daemons and the broker running."""
    held = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)


def _without_last(wheel: Wheel) -> Wheel:
    """The wheel with its paced launches only (the last one is the burst)."""
    copy = Wheel(wheel.table, wheel.directory, wheel.pty, wheel.notify, wheel.process)
    copy.launches = wheel.launches[:-1]
    return copy


def machine() -> str:
    """nproc, CPU model, RAM, kernel, Python, load and the state directory's file system."""
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    ram = _meminfo_kib("MemTotal:") / 1024 / 1024
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    fs = "?"
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        fs = subprocess.run(
            ["df", "--output=fstype", tempfile.gettempdir()],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[-1]
    return (
        f"{os.cpu_count()} CPUs ({model}), {ram:.1f} GiB RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}, state directories on {fs} "
        f"({tempfile.gettempdir()}), load average {load} at the start"
    )


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def table(rounds: list[Round], period: float) -> str:
    lines = [
        "| wheels | launches/s | launches | `spinning` p50 | p99 | max | missed "
        "| CPU per wheel (mean / max) | CPU, all wheels | RSS per wheel (mean / max) "
        "| PSS, all wheels | start to all online | load at the end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for measured in rounds:
        samples = measured.latencies_ms
        lines.append(
            f"| {measured.wheels} | {measured.wheels / period:.1f} | {measured.launches} "
            f"| {_percentile(samples, 50):.1f} ms | {_percentile(samples, 99):.1f} ms "
            f"| {max(samples, default=math.nan):.1f} ms | {measured.missed} "
            f"| {statistics.mean(measured.cpu_percent):.2f} / "
            f"{max(measured.cpu_percent):.2f} % "
            f"| {sum(measured.cpu_percent) / 100:.2f} cores "
            f"| {statistics.mean(measured.rss_mib):.1f} / {max(measured.rss_mib):.1f} MiB "
            f"| {measured.pss_mib:.0f} MiB | {measured.ready_s:.1f} s | {measured.load_end:.1f} |"
        )
    lines += [
        "",
        "| wheels | burst: launched at once | `spinning` p50 | p99 | max | missed |",
        "|---|---|---|---|---|---|",
    ]
    for measured in rounds:
        samples = measured.burst_latencies_ms
        lines.append(
            f"| {measured.wheels} | {measured.wheels} | {_percentile(samples, 50):.1f} ms "
            f"| {_percentile(samples, 99):.1f} ms | {max(samples, default=math.nan):.1f} ms "
            f"| {measured.burst_missed} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.many", description=__doc__)
    parser.add_argument("--wheels", type=int, nargs="+", default=[8, 32, 64], metavar="N")
    parser.add_argument(
        "--period",
        type=float,
        default=4.0,
        metavar="S",
        help="seconds between one wheel's launches (a real wheel: 40-60 s); default 4",
    )
    parser.add_argument(
        "--games",
        type=int,
        default=None,
        metavar="G",
        help="paced launches per wheel; default: enough for 320 samples (5 at least)",
    )
    parser.add_argument("--ready-timeout", type=float, default=300.0, metavar="S")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument(
        "--preforked",
        action="store_true",
        help="fork the daemons from one parent that imported wheeld (benchmarks/preforked.py)",
    )
    args = parser.parse_args(argv)
    if any(count < 1 for count in args.wheels) or args.period < 3.5:
        parser.error(
            "--wheels must be 1 or more, --period at least 3.5 s (3 rotor turns after a no-spin)"
        )

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    print(machine(), file=sys.stderr)
    rounds = []
    try:
        for count in args.wheels:
            games = args.games or max(5, math.ceil(320 / count))
            print(f"{count} wheels, {games} games each ...", file=sys.stderr)
            rounds.append(
                run_round(
                    count,
                    period=args.period,
                    games=games,
                    ready_timeout=args.ready_timeout,
                    keep=args.keep,
                    preforked=args.preforked,
                )
            )
    except KeyboardInterrupt:
        print("interrupted: every daemon stopped", file=sys.stderr)
        return 130
    except (TimeoutError, RuntimeError) as exc:
        print(f"many: {exc}", file=sys.stderr)
        return 1
    print(table(rounds, args.period))
    return 0


if __name__ == "__main__":
    sys.exit(main())
