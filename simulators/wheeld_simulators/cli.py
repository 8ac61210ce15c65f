"""``wheeld simulate``: a wheel in software on a pty, a TCP port or a capture file.

A ``wheeld.core.commands`` plug-in: wheeld adds the subcommand when this distribution
is installed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from wheeld_simulators.faults import FAULTS, WHEEL_FAULTS
from wheeld_simulators.wheels import reference_driver, simulated_wheels, unknown_driver

#: The SS2's factory operating mode: 1 reverse the rotor every game, 4 random
#: rotor-speed change, 128 status every 500 ms, 1024 games-per-hour delay. Without
#: bit 1 the rotor never reverses, and the rules void every game after the first.
SS2_FACTORY_MODE = 1157

if TYPE_CHECKING:
    from wheeld_simulators.physics import GamePlan

EPILOG = f"""
targets:
  pty   a pseudo-terminal; point wheel.port at the printed link (default)
  tcp   a TCP listener; point wheel.port at socket://HOST:PORT
  file  a capture file, for `wheeld replay`

faults (each game the wheel plays wrong, and the no-spin reason it must get):
{chr(10).join(f"  {name:<16}{reason}" for name, reason in WHEEL_FAULTS.items())}

examples:
  wheeld simulate                                  # a wheel on a pty, real time
  wheeld simulate --speed 4 --fault-rate 0.2       # faster, one game in five faulty
  wheeld simulate --target tcp --listen 127.0.0.1:7777
  wheeld simulate --target file --output games.cap --games 50 --seed 1
  wheeld simulate --fault foreign_object --fault ball_out --games 5
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "simulate",
        help="run a simulated wheel (pty, TCP or capture file), with faults on demand",
        description="Run a roulette wheel in software, driven by a small physical model: the "
        "rotor alternates direction, the ball slows and drops into the pocket under it. "
        "Faults for every no-spin cause can be injected on demand or at a rate, "
        "reproducibly from --seed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--driver",
        metavar="NAME",
        help="the installed driver the wheel speaks to (default: the reference WRP/1 "
        "driver); a Cammegh driver plays a Cammegh SS2 or Mercury 360",
    )
    parser.add_argument("--target", default="pty", choices=("pty", "tcp", "file"))
    parser.add_argument(
        "--link", type=_path, help="pty target: the stable symlink to create (default: a temp path)"
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:7777",
        metavar="HOST:PORT",
        help="tcp target: where to listen (default: 127.0.0.1:7777)",
    )
    parser.add_argument("--output", type=_path, help="file target: the capture file to write")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="run this many times faster than real time (default: 1)",
    )
    parser.add_argument(
        "--games", type=int, help="stop after this many games (default: forever; file: 20)"
    )
    parser.add_argument("--seed", type=int, help="random seed, for a reproducible session")
    parser.add_argument(
        "--pockets",
        type=int,
        choices=(37, 38, 39, 40),
        default=37,
        help="the wheel's pockets (39 and 40, firmware 2.52's extra zeros: the SS2 only)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        choices=("none", *FAULTS),
        default=[],
        help="play this fault in the next game (repeatable, in order; 'none': a plain game)",
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="probability that any later game is faulty (default: 0)",
    )
    parser.add_argument(
        "--noise-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="probability of line noise before each frame (default: 0)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print each game")
    mercury = parser.add_argument_group("a Cammegh Mercury 360 (a wheel that only talks)")
    mercury.add_argument(
        "--level",
        choices=("basic", "advanced", "extended"),
        default="advanced",
        help="the Break Out Box port's output level (default: advanced, the wheel's own); "
        "--fault-rate plays the Mercury's faults: same_direction, rotor_stops, short_spin "
        "(two revolutions), dealer_lock",
    )
    ss2 = parser.add_argument_group("a Cammegh SS2 (a wheel that answers commands)")
    ss2.add_argument(
        "--mode",
        type=int,
        default=SS2_FACTORY_MODE,
        help=f"operating mode at power-up, a sum of bits (default {SS2_FACTORY_MODE}, the "
        "factory's: games start by themselves, the rotor reverses every game, status every "
        "500 ms; 0: wait for the host's *o and *P 1; without bit 1 the rotor never reverses "
        "and the daemon voids the games; a controller sets its own mode with *o)",
    )
    ss2.add_argument(
        "--busy", type=int, default=0, metavar="N", help="answer the first N commands with BUSY"
    )
    ss2.add_argument("--mute", action="store_true", help="answer no command at all")
    ss2.add_argument(
        "--miss-spin",
        type=int,
        action="append",
        default=[],
        metavar="GAME",
        help="game GAME (1-based) miss-spins: flag 2 until *R (repeatable)",
    )
    ss2.add_argument(
        "--close-after",
        type=int,
        metavar="N",
        help="close (state 6) after N games, as a wheel left still does: its log can be "
        "read then; the host's *P 1 opens it again",
    )
    ss2.add_argument(
        "--logged",
        type=int,
        default=0,
        metavar="N",
        help="games already in the wheel's winning-number log at power-up (default: 0)",
    )
    ss2.add_argument(
        "--misslog",
        type=int,
        action="append",
        default=[],
        metavar="GAME",
        help="game GAME (1-based) is logged with another number than the one it announced "
        "(repeatable): wheel_log_mismatch for a controller that reads the log",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point for ``wheeld simulate``; returns the exit status."""
    name = args.driver or reference_driver()
    args.kind = simulated_wheels().get(name)
    if args.kind == "ss2" and args.target != "pty":
        print(f"wheeld simulate: --driver {name} plays on a pty only", file=sys.stderr)
        return 2
    # ``not`` so that NaN fails too; infinity is no pace either.
    if not 0 < args.speed < math.inf:
        print("wheeld simulate: --speed must be a number > 0", file=sys.stderr)
        return 2
    for name, rate in (("--fault-rate", args.fault_rate), ("--noise-rate", args.noise_rate)):
        if not 0 <= rate <= 1:
            print(f"wheeld simulate: {name} must be between 0 and 1", file=sys.stderr)
            return 2
    if args.games is not None and args.games < 1:
        print("wheeld simulate: --games must be 1 or more", file=sys.stderr)
        return 2
    if args.target == "tcp" and _listen_port(args.listen) is None:
        print(
            f"wheeld simulate: --listen {args.listen!r}: HOST:PORT, the port 0-65535",
            file=sys.stderr,
        )
        return 2
    if args.kind is None:
        print(f"wheeld simulate: {unknown_driver(name)}", file=sys.stderr)
        return 2
    if args.pockets > 38 and args.kind != "ss2":
        print("wheeld simulate: 39 and 40 pockets are an SS2's (firmware 2.52)", file=sys.stderr)
        return 2
    import asyncio
    import signal

    # SIGTERM (a service stopped, a test's terminate()) ends it as Ctrl-C does, through
    # the finally blocks that remove the --link: left behind, the link names a pty number
    # that is soon another program's, and a daemon pointed at it opens that one (found on
    # a shared machine: a daemon reopened its link onto another run's pty).
    previous = signal.signal(signal.SIGTERM, _stop)
    simulation = _simulate(args)
    try:
        return asyncio.run(simulation)
    except KeyboardInterrupt as exc:
        simulation.close()  # stopped before it began: no "never awaited" warning
        if not isinstance(exc, _Terminated):  # Ctrl-C: one line; SIGTERM is a stop asked for
            print("wheeld simulate: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"wheeld simulate: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def _path(text: str) -> Path:
    if not text:  # Path("") is ".", the current directory
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def _listen_port(listen: str) -> int | None:
    """The port of ``--listen HOST:PORT`` (0: any free one), or None when it is none."""
    _, colon, port = listen.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        return None
    return int(port)


class _Terminated(KeyboardInterrupt):
    """SIGTERM: the simulation stopped as Ctrl-C stops it, without saying "interrupted"."""


def _stop(signum: int, frame: object) -> None:
    raise _Terminated


async def _simulate_ss2(args: argparse.Namespace) -> int:
    from wheeld_simulators.ss2_live import LiveSS2, SS2Faults
    from wheeld_simulators.targets import PtySink

    pty = PtySink(args.link)
    try:  # from the link's making: stopped at any moment after, it is removed too
        print(f'SS2 wheel on {pty.slave_name}: set wheel.port = "{pty.link}"', flush=True)
        wheel = LiveSS2(
            pty,
            speed=args.speed,
            mode=args.mode,
            seed=args.seed,
            faults=SS2Faults(
                busy_replies=args.busy,
                mute=args.mute,
                miss_spin_games=tuple(args.miss_spin),
                misslogged_games=tuple(args.misslog),
            ),
            pockets=args.pockets,
            close_after=args.close_after,
            logged=args.logged,
        )
        await pty.wait_for_reader()
        await wheel.run(args.games)
    finally:
        pty.close()
    if not args.quiet:
        print("commands heard: " + ", ".join(wheel.commands), flush=True)
    return 0


async def _simulate_mercury(args: argparse.Namespace) -> int:

    from wheeld_simulators.mercury import MercurySession, ScriptedMercury, play_mercury

    wheel = ScriptedMercury(args.level, start=round(time.time(), 3))
    session = MercurySession(wheel, args.seed, args.fault_rate)
    faults = [None if name == "none" else name for name in args.fault]
    if any(fault is not None for fault in faults):
        print(
            "wheeld simulate: --fault is for the WRP/1 wheel; the Mercury plays --fault-rate",
            file=sys.stderr,
        )
        return 2
    if args.target == "file":
        if args.output is None:
            print("wheeld simulate: --target file needs --output FILE", file=sys.stderr)
            return 2
        for number in range(1, (args.games or 20) + 1):
            _show_mercury(args, number, *session.next_game())
        args.output.write_text(wheel.capture([f"source: wheeld simulate, level {args.level}"]))
        return 0
    from wheeld_simulators.targets import PtySink, Sink, TcpSink

    sink: Sink
    reader: PtySink | None = None
    if args.target == "pty":
        sink = reader = PtySink(args.link)
    else:
        host, _, port = args.listen.rpartition(":")
        tcp = TcpSink()
        await tcp.start(host or "127.0.0.1", int(port))
        sink = tcp
        print(f'Mercury listening: set wheel.port = "socket://{host}:{tcp.port}"', flush=True)
    try:  # from the link's making: stopped at any moment after, it is removed too
        if reader is not None:
            print(
                f'Mercury ({args.level}) on {reader.slave_name}: set wheel.port = "{reader.link}"',
                flush=True,
            )
            await reader.wait_for_reader()
        await play_mercury(session, sink, speed=args.speed, games=args.games, on_game=_shown(args))
    finally:
        sink.close()
    return 0


def _show_mercury(args: argparse.Namespace, number: int, result: str, fault: str | None) -> None:
    if not args.quiet:
        print(f"game {number}: {result}" + (f" (fault {fault})" if fault else ""), flush=True)


def _shown(args: argparse.Namespace) -> Callable[[int, str, str | None], None]:
    def show(number: int, result: str, fault: str | None) -> None:
        _show_mercury(args, number, result, fault)

    return show


async def _simulate(args: argparse.Namespace) -> int:
    if args.kind == "ss2":
        return await _simulate_ss2(args)
    if args.kind == "mercury":
        return await _simulate_mercury(args)
    from wheeld_simulators.physics import SimulatorSettings, WheelSimulator
    from wheeld_simulators.targets import CaptureSink, PtySink, Sink, TcpSink, play

    simulator = WheelSimulator(
        SimulatorSettings(
            pockets=args.pockets,
            seed=args.seed,
            fault_rate=args.fault_rate,
            noise_rate=args.noise_rate,
        )
    )
    sink: Sink
    reader: PtySink | None = None
    games = args.games
    paced = True
    if args.target == "pty":
        sink = reader = PtySink(args.link)
    elif args.target == "tcp":
        host, _, port = args.listen.rpartition(":")
        tcp = TcpSink()
        await tcp.start(host or "127.0.0.1", int(port))
        sink = tcp
        print(f'wheel listening: set wheel.port = "socket://{host}:{tcp.port}"', flush=True)
    else:
        if args.output is None:
            print("wheeld simulate: --target file needs --output FILE", file=sys.stderr)
            return 2
        sink = CaptureSink(args.output, time.time())
        games = games or 20
        paced = False

    def show(number: int, plan: GamePlan) -> None:
        if args.quiet:
            return
        if plan.fault:
            print(f"game {number}: fault {plan.fault} -> no_spin {plan.expected}", flush=True)
        else:
            print(f"game {number}: {plan.expected}", flush=True)

    try:  # from the link's making: stopped at any moment after, it is removed too
        if reader is not None:
            print(f'wheel on {reader.slave_name}: set wheel.port = "{reader.link}"', flush=True)
            print("waiting for the port to be opened...", flush=True)
            await reader.wait_for_reader()
        faults = [None if name == "none" else name for name in args.fault]
        await play(
            simulator,
            sink,
            speed=args.speed,
            games=games,
            faults=faults,
            paced=paced,
            on_game=show,
        )
    finally:
        sink.close()
    return 0
