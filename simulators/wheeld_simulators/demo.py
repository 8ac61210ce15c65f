"""``wheeld demo``: a simulated wheel, the daemon on it and a broker, live in the terminal.

A broker already listening on 127.0.0.1:1883 is used (or the one --broker
names); otherwise an embedded one (amqtt, which speaks MQTT 3.1.1 only, so the
daemon runs on 3.1.1 then) on a free port. Every run has its own directory,
table id (so its own topics) and ports: two demos on one machine share nothing.
Ctrl-C stops everything: the daemon, the marquee, the wheel and the embedded
broker, and removes the run's directory (--keep keeps it, with its logs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ipaddress
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from wheeld.config import Config
    from wheeld.core.events import Direction
    from wheeld_simulators.physics import WheelSimulator
    from wheeld_simulators.targets import PtySink

#: The SS2's factory operating mode (``wheeld simulate``'s default): games start by
#: themselves, the rotor reverses every game, status every 500 ms.
SS2_FACTORY_MODE = 1157
#: Faster than this, the wheel's frames outrun what a demo is for: watching games.
MAX_SPEED = 20.0
DEFAULT_BROKER = ("127.0.0.1", 1883)
DEFAULT_MARQUEE_PORT = 8080
#: How long the marquee may take to start listening (and say where) before the demo gives up.
MARQUEE_START_S = 30.0
#: What ``wheeld marquee`` prints once its socket listens.
MARQUEE_SERVING = re.compile(r"marquee on (http://\S+)")
#: Exit status for a --broker that names no host (argparse's, for a usage error).
EXIT_USAGE = 2
#: How long the wheel waits for the daemon's verdict on a game before the next one.
VERDICT_WAIT_S = 5.0
_COLOURS = {"red": "\033[41;97m", "black": "\033[40;97m", "green": "\033[42;97m"}
_RESET = "\033[0m"


class DemoError(Exception):
    """Something the user can fix, reported as one line."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


# -- arguments ----------------------------------------------------------------------


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _speed(text: str) -> float:
    value = _number(text)
    if not 0 < value <= MAX_SPEED:
        raise argparse.ArgumentTypeError(f"must be > 0 and at most {MAX_SPEED:g}, not {text}")
    return value


def _probability(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _seconds(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port (0-65535): {text!r}")
    return int(text)


def _broker_host(text: str) -> str:
    """HOST as ``[mqtt] host`` takes it; an IPv6 address comes in brackets, as in URLs."""
    from wheeld.config import check_host

    if text.startswith("[") and text.endswith("]"):
        return str(ipaddress.IPv6Address(text[1:-1]))
    if ":" in text:  # a bare IPv6 address: which colon starts the port?
        raise ValueError(text)
    return check_host(text)


def _broker(text: str) -> str | BrokerAddress:
    if text in ("auto", "embedded"):
        return text
    host, sep, port = text.rpartition(":")
    try:
        if not sep or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(text)
        return BrokerAddress(_broker_host(host), int(port))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not auto, embedded or HOST:PORT (IPv6: [::1]:1883): {text!r}"
        ) from None


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wheeld demo`` (a ``wheeld.core.commands`` plug-in)."""
    parser = commands.add_parser(
        "demo",
        help="a simulated wheel, the daemon and a broker, with the games shown live",
        description=__doc__,
    )
    parser.add_argument(
        "--broker",
        type=_broker,
        default="auto",
        metavar="auto|embedded|HOST:PORT",
        help="auto: use 127.0.0.1:1883 if something listens there, else start an "
        "embedded broker; embedded: always start one; HOST:PORT: use that broker",
    )
    parser.add_argument(
        "--speed",
        type=_speed,
        default=2.0,
        help=f"how much faster than real time the wheel plays, up to {MAX_SPEED:g} (default: 2)",
    )
    parser.add_argument(
        "--fault-rate",
        type=_probability,
        default=0.15,
        metavar="P",
        help="share of games with an injected fault, 0 to 1 (default: 0.15)",
    )
    parser.add_argument("--seed", type=int, help="random seed for the wheel")
    parser.add_argument(
        "--driver",
        metavar="NAME",
        help="the installed driver the wheel speaks to, and the daemon reads it with "
        "(default: the reference WRP/1 driver; a Cammegh driver plays an SS2 or a Mercury 360)",
    )
    parser.add_argument(
        "--level",
        choices=("basic", "advanced", "extended"),
        default="extended",
        help="a Mercury 360's output level (default: extended, where wheeld judges the ball)",
    )
    parser.add_argument("--seconds", type=_seconds, help="stop by itself after this long")
    parser.add_argument(
        "--marquee-port",
        type=_port,
        metavar="PORT",
        help=f"where the marquee listens on 127.0.0.1 (default: {DEFAULT_MARQUEE_PORT} if "
        "free; 0: any free port)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the run's directory (configuration, journal, logs) when it stops",
    )
    parser.set_defaults(func=run)


# -- what the demo shows and what its dealer knows --------------------------------


def _listening(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port`` (a name, IPv4 or IPv6)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except socket.gaierror as exc:
        raise DemoError(f"--broker: no such host: {host} ({exc.strerror})", EXIT_USAGE) from None
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LiveView:
    """Prints each game event as one line, coloured on a terminal."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.tty = sys.stdout.isatty()
        #: What was last shown of the daemon's status and the wheel's link: the
        #: retained <base>/wheel comes again every minute (its counters), and a
        #: status again at every reconnect; only a change is news.
        self._shown: dict[str, object] = {}

    def _changed(self, what: str, value: object) -> bool:
        if self._shown.get(what, object()) == value:
            return False
        self._shown[what] = value
        return True

    def _paint(self, text: str, colour: str) -> str:
        return f"{_COLOURS[colour]} {text:>2} {_RESET}" if self.tty else text

    def show(self, topic: str, payload: dict[str, Any]) -> None:
        clock = time.strftime("%H:%M:%S")
        if topic == f"{self.base}/status":
            if self._changed("status", payload.get("state")):
                print(f"{clock}  wheeld {payload.get('state')}", flush=True)
            return
        if topic == f"{self.base}/wheel":
            if self._changed("link", payload.get("link")):
                print(f"{clock}  wheel link {payload.get('link')}", flush=True)
            return
        if topic != f"{self.base}/game":
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


class Dealer:
    """The croupier's memory, kept from what the daemon publishes, not from the wheel's plan.

    The rules judge alternation against the last result the daemon announced;
    a game the daemon voided for a cause the wheel did not play (a line fault,
    a late verdict) would otherwise leave the simulator alternating from a
    result that never was, and every later game would be voided for
    ``direction_not_alternated``.
    """

    def __init__(self, base: str, simulator: WheelSimulator) -> None:
        self.base = base
        self.simulator = simulator
        self.last_result_rotor: Direction | None = None
        self.voided = False
        #: Set while no game is open at the daemon: the wheel may start the next one.
        self.decided = asyncio.Event()
        self.decided.set()

    def hear(self, topic: str, payload: dict[str, Any]) -> None:
        event = payload.get("event")
        if topic == f"{self.base}/result" or (topic == f"{self.base}/game" and event == "result"):
            rotor = payload.get("rotor_direction")
            if rotor in ("cw", "ccw"):
                self.last_result_rotor = rotor
            self.voided = False
        elif topic == f"{self.base}/game" and event == "no_spin":
            self.voided = True
        elif topic == f"{self.base}/game" and event == "spinning":
            self.decided.clear()
            return
        else:
            return
        if topic == f"{self.base}/game":
            self.decided.set()
        self.simulator.follow_table(self.last_result_rotor, voided=self.voided)

    async def verdict(self) -> None:
        """Before the next game: wait (a while) for the daemon to decide the last one."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.decided.wait(), VERDICT_WAIT_S)


# -- the pieces -------------------------------------------------------------------


async def _embedded_broker(port: int, *, asked: bool) -> Any:
    try:
        from amqtt.broker import Broker
    except ImportError:
        if asked:
            raise DemoError(
                "--broker embedded needs amqtt: pip install amqtt "
                "(or pass --broker auto or --broker HOST:PORT)"
            ) from None
        raise DemoError(
            f"no MQTT broker listens on {BrokerAddress(*DEFAULT_BROKER)} and the embedded one "
            "needs amqtt: pip install amqtt (or start mosquitto, or pass --broker HOST:PORT)"
        ) from None
    logging.getLogger("amqtt").setLevel(logging.CRITICAL)
    broker = Broker({"listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}}})
    try:
        await broker.start()
    except Exception as exc:  # amqtt wraps socket errors in its own exceptions
        raise DemoError(f"the embedded MQTT broker did not start on port {port}: {exc}") from None
    return broker


async def _open_broker(choice: str | BrokerAddress) -> tuple[BrokerAddress, str, Any]:
    """The broker's address, the MQTT version to speak, and the embedded broker if started."""
    if isinstance(choice, BrokerAddress):
        if not _listening(choice.host, choice.port):
            raise DemoError(f"--broker: nothing listens on {choice}")
        return choice, "5", None
    if choice == "auto" and _listening(*DEFAULT_BROKER):
        return BrokerAddress(*DEFAULT_BROKER), "5", None
    address = BrokerAddress("127.0.0.1", _free_port())
    return address, "3.1.1", await _embedded_broker(address.port, asked=choice == "embedded")


def _die_with_parent() -> None:
    # The daemon must not outlive the demo, even if the demo is killed outright.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


async def _spawn(
    log: Path, *args: str, stdout: int = asyncio.subprocess.DEVNULL
) -> asyncio.subprocess.Process:
    """``wheeld <args>`` as a child that dies with the demo."""
    with log.open("ab") as stream:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "wheeld",
            *args,
            stdout=stdout,
            stderr=stream,
            preexec_fn=_die_with_parent,
        )


def _signal(process: asyncio.subprocess.Process, signum: signal.Signals) -> None:
    # Not process.terminate(): it polls, so reaps, a child that just ended (on
    # Ctrl-C they all do) behind asyncio's child watcher, which then logs
    # "Unknown child process" and reports the status as 255.
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signum)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        _signal(process, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            _signal(process, signal.SIGKILL)
            await process.wait()


async def _start_marquee(
    work: Path, config: Path, port: int
) -> tuple[asyncio.subprocess.Process, str | None]:
    """The marquee on 127.0.0.1:``port`` (0: a free one), and the URL it serves.

    The URL is the one the marquee prints once its socket listens, so it is
    ours: None if the marquee ended (the port is taken) or never said.
    """
    marquee = await _spawn(
        work / "marquee.log",
        *("marquee", "--config", str(config), "--listen", f"127.0.0.1:{port}"),
        stdout=asyncio.subprocess.PIPE,
    )
    assert marquee.stdout is not None  # asked for above
    try:
        async with asyncio.timeout(MARQUEE_START_S):
            async for line in marquee.stdout:
                serving = MARQUEE_SERVING.search(line.decode("utf-8", "replace"))
                if serving:
                    return marquee, serving.group(1)
            await marquee.wait()  # it ended without listening: the port is taken
    except TimeoutError:
        await _stop(marquee)
    return marquee, None


def _last_line(log: Path) -> str:
    with contextlib.suppress(OSError):
        lines = log.read_text("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "no error logged"
    return "no log"


def _write_signing_key(work: Path) -> Path:
    """The run's own signing key (mode 0600), and ``signing.pub`` beside it for consumers."""
    from wheeld.core.signing import Signer

    signer = Signer.generate()
    key = work / "signing.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(signer.private_pem())
    (work / "signing.pub").write_bytes(signer.public_pem())
    return key


def _write_config(
    work: Path, table: str, link: Path, broker: BrokerAddress, protocol: str, driver: str
) -> Path:
    # json.dumps quotes a string as TOML reads it, whatever the temporary path holds.
    config = work / "wheeld.toml"
    key = _write_signing_key(work)
    config.write_text(
        # The marquee shows the name; the id, for staff, small in a corner.
        f'[table]\nid = {json.dumps(table)}\nname = "Ruleta demo"\n'
        f"[wheel]\ndriver = {json.dumps(driver)}\nport = {json.dumps(str(link))}\n"
        f"[mqtt]\nhost = {json.dumps(broker.host)}\nport = {broker.port}\n"
        f'protocol = "{protocol}"\nclient_id = "wheeld-{table.lower()}"\n'
        # The daemon's broker session outlives it by a minute, not the default day.
        "session_expiry_s = 60\n"
        f"[state]\ndir = {json.dumps(str(work / 'state'))}\n"
        '[log]\nformat = "json"\nlevel = "warning"\n'
        f"[signing]\nkey_file = {json.dumps(str(key))}\n"
    )
    return config


async def _watch(config: Config, base: str, view: LiveView, dealer: Dealer | None) -> None:
    import aiomqtt

    from wheeld.shell.mqtt_client import make_client

    while True:
        try:
            async with make_client(config, client_id="") as client:
                await client.subscribe(f"{base}/#", qos=1)
                async for message in client.messages:
                    # A payload the demo cannot read is skipped: it only shows the games.
                    with contextlib.suppress(ValueError, TypeError, KeyError):
                        payload = json.loads(message.payload)
                        if isinstance(payload, dict):
                            if dealer is not None:
                                dealer.hear(message.topic.value, payload)
                            view.show(message.topic.value, payload)
        except aiomqtt.MqttError:
            await asyncio.sleep(0.5)


async def _clear_retained(config: Config, base: str) -> None:
    """Leave a shared broker as the demo found it: no retained messages of this table.

    Whatever the daemon retains, not a list of it: a broker sends what it
    retains on a subscription before anything published after it, so once the
    demo's own marker comes back, every retained topic of the table was seen.
    """
    import aiomqtt

    from wheeld.shell.mqtt_client import make_client

    marker = f"{base}/demo-stopped"
    with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
        async with asyncio.timeout(5), make_client(config, client_id="", timeout=3) as client:
            await client.subscribe(f"{base}/#", qos=1)
            await client.publish(marker, b"", qos=1)
            async for message in client.messages:
                if message.topic.matches(marker):
                    return
                if message.retain and message.payload:
                    await client.publish(message.topic.value, b"", qos=1, retain=True)


async def _marquee(
    work: Path, config: Path, asked: int | None
) -> tuple[asyncio.subprocess.Process, str]:
    """The marquee and its URL: on --marquee-port, else on the default port if ours, else any."""
    if asked is None and not _listening("127.0.0.1", DEFAULT_MARQUEE_PORT):
        # Another demo may take the port between this probe and our bind: then
        # our marquee ends without a URL, and one on a free port takes its place.
        marquee, url = await _start_marquee(work, config, DEFAULT_MARQUEE_PORT)
        if url is not None:
            return marquee, url
    marquee, url = await _start_marquee(work, config, asked or 0)
    if url is None:
        raise DemoError(f"the marquee did not start: {_last_line(work / 'marquee.log')}")
    return marquee, url


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _the_wheel(
    args: argparse.Namespace, sink: PtySink
) -> tuple[Callable[[], Coroutine[Any, Any, None]], Dealer | None, str]:
    """What plays the wheel for ``--driver``, the dealer that follows the table (the
    physical model's), and the wheel's name for the terminal."""
    from wheeld_simulators.targets import play
    from wheeld_simulators.wheels import simulated_wheels

    kind = simulated_wheels()[args.driver]
    if kind == "ss2":
        from wheeld_simulators.ss2_live import LiveSS2

        # The factory's mode: games start by themselves, the rotor reverses every game.
        ss2 = LiveSS2(sink, speed=args.speed, mode=SS2_FACTORY_MODE, seed=args.seed)

        async def play_ss2() -> None:
            await sink.wait_for_reader()
            await ss2.run()

        return play_ss2, None, "a Cammegh SS2"
    if kind == "mercury":
        from wheeld_simulators.mercury import MercurySession, ScriptedMercury, play_mercury

        mercury = ScriptedMercury(args.level, start=round(time.time(), 3))
        session = MercurySession(mercury, args.seed, args.fault_rate)

        async def play_360() -> None:
            await sink.wait_for_reader()
            await play_mercury(session, sink, speed=args.speed)

        return play_360, None, f"a Cammegh Mercury 360 ({args.level} output)"
    from wheeld_simulators.physics import SimulatorSettings, WheelSimulator

    simulator = WheelSimulator(
        SimulatorSettings(seed=args.seed, fault_rate=args.fault_rate, noise_rate=0.01)
    )
    dealer = Dealer(f"wheeld/{args.table}", simulator)

    async def play_model() -> None:
        await sink.wait_for_reader()
        await play(simulator, sink, speed=args.speed, before_game=dealer.verdict)

    return play_model, dealer, "simulated wheel"


def _one_line_loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An error no task of the demo's awaited (the embedded broker's own, a client's
    future left behind by a disconnection) is one line, never asyncio's traceback."""
    error = context.get("exception")
    said = f"{type(error).__name__}: {error}" if error is not None else ""
    what = context.get("message") or "an error in the background"
    print(f"wheeld demo: {what}{': ' if said else ''}{said}", file=sys.stderr, flush=True)


#: The run's stop, once ``_demo`` has made it: asked for (Ctrl-C, SIGTERM) when set.
_STOP: list[asyncio.Event | None] = [None]


async def _demo(args: argparse.Namespace) -> int:
    from wheeld.config import ConfigError, load
    from wheeld_simulators.targets import PtySink
    from wheeld_simulators.wheels import reference_driver, simulated_wheels, unknown_driver

    args.driver = args.driver or reference_driver()
    if args.driver not in simulated_wheels():
        raise DemoError(unknown_driver(args.driver), EXIT_USAGE)

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_one_line_loop_errors)
    # Ctrl-C from the first moment sets ``stop``: what is being started is started, then
    # stopped in order. Left to asyncio.run's own handler (a cancel) until everything was
    # up, a Ctrl-C while starting could be lost in an await of the start (found by CI:
    # the demo ran on a minute after it, its loop idle).
    stop = _STOP[0] = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # pid for this machine, random bits for other machines on a shared broker.
    table = f"DEMO-{os.getpid()}-{secrets.token_hex(2)}"
    base = f"wheeld/{table}"
    args.table = table
    stopped = ["the daemon", "the marquee", "the wheel"]
    keep = args.keep
    # Callbacks run last-registered first: whatever started is stopped, on any
    # way out, and the run's directory goes last, once nothing writes to it.
    async with contextlib.AsyncExitStack() as cleanup:
        broker, protocol, embedded = await _open_broker(args.broker)
        if embedded is not None:
            cleanup.push_async_callback(embedded.shutdown)
            stopped.append("the embedded broker")
        kind = "an embedded MQTT broker (amqtt)" if embedded else "the MQTT broker"
        print(f"using {kind} on {broker}", flush=True)
        work = Path(tempfile.mkdtemp(prefix="wheeld-demo-"))

        def remove_unless_kept() -> None:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)

        cleanup.callback(remove_unless_kept)
        link = work / "wheel"
        config_path = _write_config(work, table, link, broker, protocol, args.driver)
        try:
            config = load(config_path)
        except ConfigError as exc:
            raise DemoError(str(exc)) from None
        if embedded is None:
            cleanup.push_async_callback(_clear_retained, config, base)
        sink = PtySink(link)
        cleanup.callback(sink.close)
        wheel, dealer, named = _the_wheel(args, sink)
        print(f"{named} on {sink.slave_name}; daemon log in {work / 'wheeld.log'}")
        print(
            f"watch it elsewhere: mosquitto_sub -h {broker.host} -p {broker.port} -t '{base}/#' -v"
        )
        daemon = await _spawn(work / "wheeld.log", "run", "--config", str(config_path))
        cleanup.push_async_callback(_stop, daemon)
        marquee, url = await _marquee(work, config_path, args.marquee_port)
        cleanup.push_async_callback(_stop, marquee)
        print(f"the marquee (winning-number board): {url}")
        print("Ctrl-C stops everything.\n", flush=True)

        if args.seconds:
            loop.call_later(args.seconds, stop.set)
        stopper = asyncio.create_task(stop.wait())
        ended = asyncio.create_task(daemon.wait())
        tasks = [
            asyncio.create_task(_watch(config, base, LiveView(base), dealer)),
            asyncio.create_task(wheel()),
            stopper,
            ended,
        ]
        cleanup.push_async_callback(_cancel, tasks)
        await asyncio.wait([stopper, ended], return_when=asyncio.FIRST_COMPLETED)
        # A daemon that ended by itself left its reason in the directory: keep it.
        keep = keep or not stop.is_set()
        print("\nstopping...", flush=True)
    print(f"stopped {', '.join(stopped[:-1])} and {stopped[-1]}", flush=True)
    if stop.is_set():
        if keep:
            print(f"the run's directory is kept: {work}", flush=True)
        return 0
    print(f"wheeld demo: the daemon ended by itself: see {work / 'wheeld.log'}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    """Entry point for ``wheeld demo``."""
    try:
        return asyncio.run(_demo(args))
    except KeyboardInterrupt:
        # Ctrl-C before the demo took it over (while it starts): what it started is
        # stopped on the way out; one line says why it ended.
        print("wheeld demo: interrupted", file=sys.stderr)
        return 130
    except DemoError as exc:
        if _STOP[0] is not None and _STOP[0].is_set():
            # Ctrl-C reached what was starting too (a terminal's goes to the whole group):
            # a child that ended of it is the interrupt, not a failure of its own.
            print("wheeld demo: interrupted", file=sys.stderr)
            return 130
        print(f"wheeld demo: {exc}", file=sys.stderr)
        return exc.status
