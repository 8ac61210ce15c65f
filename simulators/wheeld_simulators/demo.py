"""``wheeld demo``: a simulated wheel, the daemon on it and a broker, live in the terminal.

A broker already listening on 127.0.0.1:1883 is used; otherwise an embedded
one (amqtt, which speaks MQTT 3.1.1 only, so the daemon runs on 3.1.1 then).
Ctrl-C stops everything: the daemon, the wheel and the embedded broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TABLE = "DEMO"
BASE = f"wheeld/{TABLE}"
_COLOURS = {"red": "\033[41;97m", "black": "\033[40;97m", "green": "\033[42;97m"}
_RESET = "\033[0m"


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "demo",
        help="a simulated wheel, the daemon and a broker, with the games shown live",
        description=__doc__,
    )
    parser.add_argument(
        "--broker",
        choices=("auto", "embedded"),
        default="auto",
        help="auto: use 127.0.0.1:1883 if something listens there, else "
        "start an embedded broker; embedded: always start one",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=2.0,
        help="how much faster than real time the wheel plays (default: 2)",
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.15,
        help="share of games with an injected fault (default: 0.15)",
    )
    parser.add_argument("--seed", type=int, help="random seed for the wheel")
    parser.add_argument("--seconds", type=float, help="stop by itself after this long")


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LiveView:
    """Prints each game event as one line, coloured on a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()

    def _paint(self, text: str, colour: str) -> str:
        return f"{_COLOURS[colour]} {text:>2} {_RESET}" if self.tty else text

    def show(self, topic: str, payload: dict[str, Any]) -> None:
        clock = time.strftime("%H:%M:%S")
        if topic == f"{BASE}/status":
            print(f"{clock}  wheeld {payload.get('state')}", flush=True)
            return
        if topic == f"{BASE}/wheel":
            print(f"{clock}  wheel link {payload.get('link')}", flush=True)
            return
        if topic != f"{BASE}/game":
            return
        game = f"game {payload['game_id']:>3}"
        event = payload["event"]
        if event == "spinning":
            line = (
                f"spinning      rotor {payload['rotor_direction']}, "
                f"ball {payload['ball_direction']}"
            )
        elif event == "no_more_bets":
            line = "no more bets"
        elif event == "result":
            number = self._paint(payload["number"], payload["color"])
            line = f"RESULT  {number}  {payload['color']}  ({payload['revolutions']} revolutions)"
        else:
            line = f"NO SPIN  {payload['reason']}"
        print(f"{clock}  {game}  {line}", flush=True)


async def _embedded_broker(port: int) -> Any:
    from amqtt.broker import Broker

    logging.getLogger("amqtt").setLevel(logging.CRITICAL)
    broker = Broker({"listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}}})
    await broker.start()
    return broker


def _die_with_parent() -> None:
    # The daemon must not outlive the demo, even if the demo is killed outright.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _spawn(log: Path, *args: str) -> asyncio.subprocess.Process:
    """``wheeld <args>`` as a child that dies with the demo."""
    with log.open("ab") as stream:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "wheeld",
            *args,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stream,
            preexec_fn=_die_with_parent,
        )


async def _demo(args: argparse.Namespace) -> int:
    import aiomqtt

    from wheeld.simulators.physics import SimulatorSettings, WheelSimulator
    from wheeld.simulators.targets import PtySink, play

    # One place per user, kept between runs: game ids go on where the broker's
    # retained history left them.
    work = Path(tempfile.gettempdir()) / f"wheeld-demo-{os.getuid()}"
    work.mkdir(mode=0o700, exist_ok=True)
    broker = None
    if args.broker == "auto" and _listening(1883):
        port, protocol = 1883, "5"
        print("using the MQTT broker already on 127.0.0.1:1883", flush=True)
    else:
        port = 1883 if not _listening(1883) else _free_port()
        broker = await _embedded_broker(port)
        protocol = "3.1.1"
        print(f"started an embedded MQTT broker (amqtt) on 127.0.0.1:{port}", flush=True)

    link = work / "wheel"
    sink = PtySink(link)
    config = work / "wheeld.toml"
    config.write_text(
        f'[table]\nid = "{TABLE}"\n[wheel]\nport = "{link}"\n'
        f'[mqtt]\nport = {port}\nprotocol = "{protocol}"\nclient_id = "wheeld-demo-{os.getpid()}"\n'
        f'[state]\ndir = "{work / "state"}"\n[log]\nformat = "json"\nlevel = "warning"\n'
    )
    print(f"simulated wheel on {sink.slave_name}; daemon log in {work / 'wheeld.log'}")
    print(f"watch it elsewhere: mosquitto_sub -h 127.0.0.1 -p {port} -t '{BASE}/#' -v")
    print("Ctrl-C stops everything.", flush=True)
    daemon = await _spawn(work / "wheeld.log", "run", "--config", str(config))
    board_port = 8080 if not _listening(8080) else _free_port()
    marquee = await _spawn(
        work / "marquee.log",
        "marquee",
        "--config",
        str(config),
        "--listen",
        f"127.0.0.1:{board_port}",
    )
    print(f"the marquee (winning-number board): http://127.0.0.1:{board_port}/\n", flush=True)
    simulator = WheelSimulator(
        SimulatorSettings(seed=args.seed, fault_rate=args.fault_rate, noise_rate=0.01)
    )
    view = LiveView()

    async def watch() -> None:
        while True:
            try:
                async with aiomqtt.Client("127.0.0.1", port, identifier="") as client:
                    await client.subscribe(f"{BASE}/#", qos=1)
                    async for message in client.messages:
                        with contextlib.suppress(ValueError, TypeError, KeyError):
                            view.show(message.topic.value, json.loads(message.payload))
            except aiomqtt.MqttError:
                await asyncio.sleep(0.5)

    async def wheel() -> None:
        await sink.wait_for_reader()
        await play(simulator, sink, speed=args.speed)

    tasks = [
        asyncio.create_task(watch()),
        asyncio.create_task(wheel()),
        asyncio.create_task(daemon.wait()),
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if args.seconds:
        loop.call_later(args.seconds, stop.set)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, tasks[2]], return_when=asyncio.FIRST_COMPLETED)
    print("\nstopping...", flush=True)
    for process in (marquee, daemon):
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
    for task in [*tasks, stopper]:
        task.cancel()
    await asyncio.gather(*tasks, stopper, return_exceptions=True)
    sink.close()
    if broker is not None:
        await broker.shutdown()
    print("stopped: daemon, marquee, wheel and broker", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point for ``wheeld demo``."""
    try:
        return asyncio.run(_demo(args))
    except KeyboardInterrupt:
        return 130
