"""The ``wheeld`` command line.

Each subcommand imports only what it uses, so start-up stays light. Errors a
user can cause end with one clear line on stderr and a non-zero status.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from datetime import date, datetime

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from wheeld.audit.verify import Failure, Report
    from wheeld.config import Config, ConfigError
    from wheeld.core.capture import Capture
    from wheeld.core.signing import Signer
    from wheeld.core.stats import Statistics
    from wheeld.shell.journal import JournalView
    from wheeld.table.pipeline import TablePipeline

EXIT_USAGE = 2
EXIT_FAILURE = 1
#: ``wheeld run``: the journal or its game-ids mark is damaged or another table's (EX_DATAERR):
#: an operator must move it aside, restarting cannot help (RestartPreventExitStatus=).
EX_DATAERR = 65


class CommandError(Exception):
    """An error to report as one line, then exit with ``status``."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class _VersionAction(argparse.Action):
    """``--version``: ``wheeld.shell.identity``'s, imported only when the option is given
    (it reads the installed package's metadata: no other command pays for it)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,  # argparse passes it by this name
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from wheeld.shell.identity import version_text

        sys.stdout.write(version_text())  # stdout, as argparse's own --version
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse's, but a mistake on the command line is one line, as every other error of
    wheeld's is (argparse prints its usage before it: two to five lines); the usage is a
    ``--help`` away. Its sub-commands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The command line; ``plugins`` False: without the plug-in commands (a built-in
    command is asked for: looking for them imports every plug-in's distribution)."""
    parser: argparse.ArgumentParser = _Parser(
        prog="wheeld",
        description="Controller daemon for electronic roulette wheels.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version, the SHA-256 of the installed package and the installed "
        "drivers, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        help="decide the games of a capture file and print the <base>/game payloads",
        description="Feed a capture through the driver and the game rules, with no serial "
        "port and no broker; print one JSON payload per line, as `run` would publish on "
        "<base>/game. Game ids start at 1.",
    )
    replay.add_argument("--config", type=_path, help="configuration file (rules, table, wheel)")
    replay.add_argument(
        "--driver",
        help="an installed driver's name, e.g. wrp (default: the "
        "capture's '# driver:' line, then the configuration, then wrp)",
    )
    replay.add_argument(
        "--pockets",
        type=int,
        choices=(37, 38, 39, 40),
        help="37 single zero, 38 double zero (default: configuration, else the wheel's hello)",
    )
    replay.add_argument(
        "--topics",
        action="store_true",
        help="print every message `run` would publish, alarms included, as "
        '{"topic": ..., "payload": ..., "retain": ...}',
    )
    replay.add_argument(
        "--key",
        type=_path,
        metavar="FILE",
        help="sign and chain the payloads with this private key (default: signing.key_file "
        "of the configuration; unsigned without either)",
    )
    replay.add_argument("capture", type=_path, help="capture file (wheeld capture format 1)")

    run = commands.add_parser(
        "run",
        help="run the daemon for one wheel",
        description="Read the wheel, decide its games, journal and publish them over MQTT.",
    )
    run.add_argument("--config", type=_path, required=True, help="configuration file (TOML)")
    run.add_argument("--capture", type=_path, help="record the serial traffic to this capture file")

    keygen = commands.add_parser(
        "keygen",
        help="make the table's signing key pair and print its key id",
        description="Write DIR/signing.key (PKCS#8 PEM, mode 0600; never overwritten) and "
        "DIR/signing.pub (SubjectPublicKeyInfo PEM, for consumers); print the key id that "
        "signed messages carry as `kid`.",
    )
    keygen.add_argument("--out", type=_path, required=True, metavar="DIR")

    marquee = commands.add_parser(
        "marquee",
        help="serve the winning-number display board (a web page) for a table",
        description="Subscribe to the table's topics and serve a full-screen, live board.",
    )
    marquee.add_argument("--config", type=_path, required=True)
    marquee.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to serve (default: marquee.listen, 127.0.0.1:8080)",
    )

    display = commands.add_parser(
        "display",
        help="write each winning number to a passive display on a serial port",
        description="Write each new winning number as the two-character line passive "
        "winning-number displays read (' 7\\r\\n', '17\\r\\n').",
    )
    display.add_argument("--config", type=_path, required=True)
    display.add_argument("--port", required=True, help="the display's serial port or URL")
    display.add_argument("--baudrate", type=int, default=9600)

    status = commands.add_parser(
        "status",
        help="say whether the broker, the wheel and the journal are reachable right now",
        description="One line each for the broker, the wheel and the journal, asked now; "
        "exit status 1 when one of them is not reachable. Beside a running daemon, the "
        "wheel is judged from the daemon's own retained <base>/health (it holds the port).",
    )
    status.add_argument("--config", type=_path, required=True, metavar="FILE")
    status.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        metavar="S",
        help="how long each broker may take to answer, and the wheel to speak (default: 3)",
    )
    check = commands.add_parser("check-config", help="validate a configuration file, key by key")
    check.add_argument("file", type=_path)
    _add_audit_commands(commands)
    _add_archive_command(commands)
    _add_stats_command(commands)
    if plugins:
        _add_plugin_commands(commands)
        _add_missing_plugin_commands(commands)
    return parser


def _built_in(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for a built-in command: its first word that is no option
    names one (the only option before the command, ``--version``, takes no value)."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first in _COMMANDS


def _add_audit_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """verify, recall and export: they read the journal, never write it."""
    verify = commands.add_parser(
        "verify",
        help="check signed, chained game messages: the journal, a recording or an export",
        description="Exit 0 when every signature, link and game ending holds; exit 1 with one "
        "line naming the first entry that fails and why.",
    )
    verify.add_argument(
        "--key",
        type=_path,
        required=True,
        action="append",
        help="the table's public key (PEM); repeat it for every key a table has signed with",
    )
    source = verify.add_mutually_exclusive_group(required=True)
    source.add_argument("--state-dir", type=_path, help="the daemon's state directory")
    source.add_argument(
        "file",
        type=_path,
        nargs="?",
        help="<base>/game payloads, one JSON object a line ('-': stdin)",
    )

    recall = commands.add_parser(
        "recall",
        help="show the last games with their events and serial lines",
        description="The last N games in play order, each with its events and every serial "
        "line that crossed the link during it. Reads the journal without its lock: works "
        "while the daemon runs and when it is stopped.",
    )
    recall.add_argument("--state-dir", type=_path, required=True)
    recall.add_argument("--last", type=_positive, default=10, metavar="N", help="default 10")
    recall.add_argument("--game", type=_positive, metavar="ID", help="end with this game")
    recall.add_argument("--json", action="store_true", help="one JSON object per game")

    export = commands.add_parser(
        "export",
        help="write a self-contained, verifiable file of games for an auditor",
        description="The games' payloads, their serial lines and the chain's anchor, one JSON "
        "object a line; `wheeld verify --key PUB FILE` checks it.",
    )
    export.add_argument("--state-dir", type=_path, required=True)
    export.add_argument("--out", type=_path, required=True)
    export.add_argument("--key", type=_path, help="public key to include (PEM)")
    export.add_argument("--from-game", type=_positive, metavar="A")
    export.add_argument("--to-game", type=_positive, metavar="B")
    export.add_argument("--since", type=_instant, metavar="DATE", help="ISO 8601, UTC if no zone")
    export.add_argument("--until", type=_instant, metavar="DATE", help="ISO 8601, exclusive")


def _add_archive_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``archive``: the casino's archive of every table (docs/archive.md), and its answers."""
    archive = commands.add_parser(
        "archive",
        help="keep every table's signed messages in PostgreSQL, verified and gap-free",
        description="Without an action: run the archive (subscribe to every table's game, "
        "alarm, info and stats topics, verify, fill gaps with recall, commit). The actions "
        "answer from the database.",
    )
    archive.add_argument("--config", type=_path, help="the archive's configuration (TOML)")
    actions = archive.add_subparsers(dest="archive_action", metavar="ACTION")
    helps = {
        "verify": "check every chain in the database again, streaming",
        "gaps": "list the seqs missing, and whether they are still asked of the table",
        "report": "a table's games, results, no-spins by reason and alarms, per day",
        "game": "every message of a game with its verdict, one JSON object a line",
    }
    for name, text in helps.items():
        action = actions.add_parser(name, help=text, description=text)
        # Its own dest: a subparser's default would overwrite the one given before it.
        action.add_argument("--config", type=_path, dest="action_config", metavar="CONFIG")
        if name in ("report", "game"):
            action.add_argument("--table", required=True, help="the table id")
        if name == "report":
            action.add_argument("--from", dest="first", type=_day, required=True, metavar="DAY")
            action.add_argument("--to", dest="last", type=_day, required=True, metavar="DAY")
            action.add_argument("--format", choices=("json", "csv"), default="json")
        if name == "game":
            action.add_argument("--game", type=_positive, required=True, metavar="N")


def _day(text: str) -> date:
    from datetime import date

    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day (YYYY-MM-DD)") from None


def _add_stats_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stats = commands.add_parser(
        "stats",
        help="the table's statistics over its result series: the journal's or a capture's",
        description="Counts per number and the chi-squared test against an even wheel (over "
        "the whole series and the last N results), even chances, dozens, columns, sectors by "
        "rotor direction, repeats, the distance from the previous result, sliding arcs of k "
        "pockets, serial correlation, no-spins per reason, games per hour, phase durations, "
        "ball revolutions and rotor speed. Reads the journal without its lock, or replays a "
        "capture.",
    )
    stats.add_argument("--config", type=_path, help="configuration file (table, wheel)")
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.add_argument(
        "--pockets",
        type=int,
        choices=(37, 38, 39, 40),
        help="37 or 38 (default: configuration, else the wheel's hello for a capture, else "
        "38 when a 00 was drawn)",
    )
    stats.add_argument(
        "--window",
        type=_window,
        action="append",
        metavar="N",
        help="a rolling window of the last N results; repeat it (default 500 and 1000)",
    )
    stats.add_argument(
        "--arc",
        type=_positive,
        action="append",
        metavar="K",
        help="sliding arcs of K neighbouring pockets; repeat it (default alerts.sector_arcs: "
        "3, 5 and 9)",
    )
    stats.add_argument(
        "--driver", help="an installed driver's name, for a capture (default as for replay)"
    )
    source = stats.add_mutually_exclusive_group(required=True)
    source.add_argument("--state-dir", type=_path, help="the daemon's state directory")
    source.add_argument(
        "capture", type=_path, nargs="?", help="capture file (wheeld capture format 1)"
    )


def _path(text: str) -> Path:
    # Path("") is ".": an empty argument (an unset shell variable) would read, or write a
    # key pair into, the current directory (found by an attack: keygen --out "" did).
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def _whole(text: str) -> int | None:
    """``text`` as a whole number, or None; one past int()'s 4,300 digits is none either
    (found by review: "invalid _positive value: '999...'", the whole number echoed)."""
    if not (text.isascii() and text.isdigit()):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _positive(text: str) -> int:
    number = _whole(text)
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from 1")
    return number


#: The longest rolling window: some fifteen years of games (at 90 an hour, 20 hours a day).
MAX_WINDOW = 10_000_000


def _window(text: str) -> int:
    number = _whole(text)
    if number is None or not 1 <= number <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a whole number from 1 to {MAX_WINDOW:,}"
        )
    return number


def _instant(text: str) -> datetime:
    from datetime import UTC, datetime

    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _journal_view(state_dir: Path) -> JournalView:
    from wheeld.shell.journal import JOURNAL_FILE, JournalError, JournalView

    try:
        return JournalView(state_dir / JOURNAL_FILE)
    except JournalError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def _verify(args: argparse.Namespace) -> int:
    from wheeld.audit import journal_check, verify
    from wheeld.core.signing import SigningError, load_public_key
    from wheeld.shell.journal import JournalError

    try:
        key = [load_public_key(path) for path in args.key]
    except SigningError as exc:
        raise CommandError(f"--key: {exc}", EXIT_USAGE) from None
    report = verify.Report()
    if args.state_dir is not None:
        view = _journal_view(args.state_dir)
        try:
            failure = journal_check.verify_journal(view, key, report)
        except JournalError as exc:
            raise CommandError(str(exc), EXIT_USAGE) from None
        finally:
            view.close()
        source = str(args.state_dir)
    else:
        failure = _verify_file(args.file, key, report)
        source = str(args.file)
    if failure is not None:
        print(f"{source}: {failure}")
        return EXIT_FAILURE
    # Where one epoch gives way to another is said, never counted as a gap.
    for line in report.lines() if report.said() else ():
        print(f"{source}: {line}")
    print(f"{source}: intact")
    return 0


def _verify_file(path: Path, key: list[Ed25519PublicKey], report: Report) -> Failure | None:

    from wheeld.audit.verify import cut_lines

    try:
        if str(path) == "-":
            return _verify_lines(cut_lines(sys.stdin), key, report)
        with path.open(encoding="utf-8") as lines:
            return _verify_lines(cut_lines(lines), key, report)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise CommandError(f"{path}: cannot read: {reason}", EXIT_USAGE) from None


def _verify_lines(
    lines: Iterable[str], key: list[Ed25519PublicKey], report: Report
) -> Failure | None:
    """A file of messages verified as it is read: memory does not grow with it."""
    from wheeld.audit import verify

    reader = verify.RecordingReader(lines)
    start = end = None
    floors: dict[int, str] = {}
    if reader.header is not None:
        bounds = verify.export_bounds(reader.header)
        if isinstance(bounds, verify.Failure):
            return bounds
        start, end = bounds
        found = verify.export_floors(reader.header)
        if isinstance(found, verify.Failure):
            return found
        floors = found
    # The header's floors are not signed: taken, they would let a file hide messages cut
    # from it (found by review: a floor copied from the next message's prev said intact).
    # A jump stays a failure; the floors only say where to look.
    failure = verify.verify_messages(reader, key, start=start, end=end, report=report)
    if failure is not None and floors and "gap:" in failure.why:
        seqs = ", ".join(str(seq) for seq in sorted(floors)[:5])
        failure = verify.Failure(
            failure.where,
            f"{failure.why} (the export's header, unsigned, says its chain went on past"
            f" another controller's message at seq {seqs}: that controller's journal holds"
            " the messages, if so)",
        )
    if reader.failure is not None:
        return reader.failure
    if not reader.count:
        return verify.Failure("the file", "holds no message: nothing is vouched for")
    return failure


def _recall(args: argparse.Namespace) -> int:
    import json

    from wheeld.shell.journal import JournalError
    from wheeld.shell.journal.recall import recall

    view = _journal_view(args.state_dir)
    try:
        games = recall(view, args.last, args.game)
    except JournalError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    finally:
        view.close()
    for game in games:
        if args.json:
            print(json.dumps(game.to_json()))
        else:
            print("\n".join(game.describe()))
    if not games:
        print(f"{args.state_dir}: no game in the journal", file=sys.stderr)
    return 0


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM as an exception: what is under way cleans up, and the command ends in one
    line with the shell's status for it."""
    raise CommandError("terminated", 128 + signum)


def _export(args: argparse.Namespace) -> int:
    import errno
    import os
    import secrets
    import signal

    from wheeld.core.signing import SigningError, load_public_key
    from wheeld.shell.journal import JournalError
    from wheeld.shell.journal.errors import file_size_limit
    from wheeld.shell.journal.recall import ExportError, ExportSummary, export_text

    if (args.from_game or args.to_game) and (args.since or args.until):
        raise CommandError("give a game range or a date range, not both", EXIT_USAGE)
    pem = None
    if args.key is not None:
        try:
            load_public_key(args.key)  # the file must hold a key before it is copied
            pem = args.key.read_text(encoding="ascii")
        except (SigningError, OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--key: {exc}", EXIT_USAGE) from None
    target = _export_target(args.out)
    view = _journal_view(args.state_dir)
    summary = ExportSummary()
    # Written beside the file, then renamed over it: a failed export leaves no half file.
    # A name of its own: two exports to one --out once shared one partial file, and the
    # second truncated and renamed away what the first was writing.
    partial = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    # SIGTERM (systemd, kill) stops it as Ctrl-C does: through the clean-up below, not past it.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        with open(fd, "w", encoding="utf-8") as out:
            for text in export_text(
                view,
                from_game=args.from_game,
                to_game=args.to_game,
                since=args.since,
                until=args.until,
                public_key_pem=pem,
                summary=summary,
            ):
                out.write(text)
        partial.replace(target)
    except (JournalError, ExportError) as exc:
        partial.unlink(missing_ok=True)
        raise CommandError(str(exc)) from None
    except OSError as exc:
        partial.unlink(missing_ok=True)
        why = exc.strerror or str(exc)
        limit = file_size_limit() if exc.errno == errno.EFBIG else None
        if limit is not None:  # the file is no larger than the limit: say which
            why = f"{why}: {limit}"
        raise CommandError(f"--out: {args.out}: {why}", EXIT_USAGE) from None
    except BaseException:  # Ctrl-C or SIGTERM: no half file left beside --out either
        partial.unlink(missing_ok=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        view.close()
    print(f"{args.out}: {summary.describe()}")
    return 0


def _export_target(out: Path) -> Path:
    """The file an export is renamed over: ``out``, or the file its symlink names. Not a
    device, pipe or directory: renamed over, it would be replaced by a file (found: an
    export to /dev/full, run as root, left /dev/full a regular file)."""
    import os
    import stat

    target = out.resolve()
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise CommandError(f"--out: {out}: {exc.strerror or exc}", EXIT_USAGE) from None
    if not stat.S_ISREG(mode):
        raise CommandError(
            f"--out: {out}: not a regular file (an export is a file written beside it,"
            " then renamed over it)",
            EXIT_USAGE,
        )
    return target


def _stats(args: argparse.Namespace) -> int:
    import json

    from wheeld.core.messages import SCHEMA_VERSION
    from wheeld.core.stats import DEFAULT_WINDOWS, describe

    config = _load_config(args.config)
    asked: int | None = args.pockets or config.wheel.pockets
    windows = args.window or DEFAULT_WINDOWS
    arcs = args.arc or config.alerts.sector_arcs
    if args.state_dir is not None:
        order = None if args.pockets else config.wheel.order
        statistics = _journal_statistics(args, asked, windows, arcs, order)
    else:
        statistics = _capture_statistics(args, config, asked, windows, arcs)
    if args.json:
        print(json.dumps({**statistics.to_json(), "schema_version": SCHEMA_VERSION}))
    else:
        print("\n".join(describe(statistics)))
    if not statistics.results:
        print(f"wheeld stats: no result in {args.state_dir or args.capture}", file=sys.stderr)
    return 0


def _stats_pockets(
    args: argparse.Namespace, asked: int | None, shown: int | None, source: str
) -> int | None:
    """The pockets a series is counted against: the wheel that played it, where the
    source shows it (saying so when another was asked for), else the one asked for."""
    if shown is None:
        return asked
    if asked is not None and asked != shown:
        # The series is of the wheel that played it: figures against another are wrong.
        named = "--pockets" if args.pockets else "wheel.pockets"
        print(
            f"wheeld stats: {named} = {asked} but {source} shows a {shown}-pocket wheel:"
            f" using {shown}",
            file=sys.stderr,
        )
    return shown


def _check_arcs(arcs: Sequence[int]) -> None:
    if any(k > 36 for k in arcs):
        raise CommandError(f"--arc: an arc is 1 to 36 pockets, not {max(arcs)}", EXIT_USAGE)


def _journal_statistics(
    args: argparse.Namespace,
    asked: int | None,
    windows: Sequence[int],
    arcs: Sequence[int],
    order: tuple[str, ...] | None = None,
) -> Statistics:
    """The statistics of the journal's ``<base>/game`` payloads, in the order decided (one
    that does not read as an object is skipped: recall shows it), against the wheel that
    played them: 38 pockets when a 00 was drawn, else what its retained ``<base>/wheel``
    says, else the one asked for. The journal is read twice, a batch at a time (for a
    00, then to count), never held whole in memory."""
    from wheeld.core.stats import Statistics
    from wheeld.shell.journal import JournalError

    view = _journal_view(args.state_dir)
    try:
        # The daemon's running aggregates, when they are what was asked for: the
        # whole series (retention included) at the cost of the last few games.
        snapshot, after = view.statistics()
        if snapshot is not None and not (asked and _pockets_of(snapshot) not in (None, asked)):
            try:
                statistics = Statistics.restore(
                    snapshot, pockets=asked, windows=windows, arcs=arcs, order=order
                )
            except ValueError:
                pass
            else:
                _check_arcs(arcs)
                for event in _journal_events(view, after):
                    statistics.add(event)
                return statistics
        double_zero = _has_double_zero(view.decision_payloads())
        retained = view.wheel_pockets()
        shown = 38 if double_zero else retained
        pockets = _stats_pockets(args, asked, shown, "the journal")
        _check_arcs(arcs)
        # None shown and none asked: no 00 was drawn, a single-zero wheel.
        if order is not None and (pockets or 37) == len(order):
            return Statistics.from_events(_journal_events(view), len(order), windows, arcs, order)
        return Statistics.from_events(_journal_events(view), pockets or 37, windows, arcs)
    except JournalError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    finally:
        view.close()


def _pockets_of(snapshot: dict[str, Any]) -> Any:
    return snapshot.get("pockets")


def _journal_events(view: JournalView, after: int = 0) -> Iterator[dict[str, Any]]:
    """The journal's payloads (after decision row ``after``) that read as objects, one at a time."""
    import json

    for payload in view.decisions_after(after):
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def _has_double_zero(payloads: Iterable[Any]) -> bool:
    """True when a payload is an object whose ``number`` is ``"00"``."""
    import json

    for payload in payloads:
        # JSON writes "00" as such or with \u escapes: only such payloads are parsed.
        if isinstance(payload, str) and '"00"' not in payload and "\\u" not in payload:
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("number") == "00":
            return True
    return False


def _capture_statistics(
    args: argparse.Namespace,
    config: Config,
    asked: int | None,
    windows: Sequence[int],
    arcs: Sequence[int],
) -> Statistics:
    """The statistics of the ``<base>/game`` payloads a replay of the capture publishes,
    counted as they come, against the wheel the capture shows (its hello, else 38 for a
    00 the wheel sent), else the one asked for, else the one replayed.

    A capture showing another wheel than the one replayed is replayed again as the
    wheel it is (the other voided or refused pockets); one counted against another
    wheel than that (the wheel changed after its first game) is replayed again to
    count it against the right one.
    """
    from wheeld.core.stats import Statistics

    capture, name, pipeline = _capture_pipeline(args, config)
    statistics = _count_replay(capture, pipeline, config, windows, arcs)
    wheel_pockets = pipeline.view.pockets
    shown = _capture_pockets(capture, name, pipeline)
    again = args
    if shown is not None and shown != wheel_pockets:
        again = argparse.Namespace(**{**vars(args), "pockets": shown})
        capture, _, pipeline = _capture_pipeline(again, config)
        statistics = _count_replay(capture, pipeline, config, windows, arcs)
    pockets = _stats_pockets(args, asked or wheel_pockets, shown, "the capture")
    assert pockets is not None
    _check_arcs(arcs)
    if statistics is None:  # no game
        return Statistics(pockets, windows, arcs)
    if statistics.layout.pockets != pockets:
        capture, _, pipeline = _capture_pipeline(again, config)
        statistics = _count_replay(capture, pipeline, config, windows, arcs, pockets)
        assert statistics is not None
    return statistics


def _count_replay(
    capture: Capture,
    pipeline: TablePipeline,
    config: Config,
    windows: Sequence[int],
    arcs: Sequence[int],
    pockets: int | None = None,
) -> Statistics | None:
    """Replay the capture, counting the ``<base>/game`` payloads as they come: against
    ``pockets``, else the wheel the pipeline plays at the first game (its hello heard).
    None when no game came, or when the arcs cannot be counted (replayed all the same)."""
    import json

    from wheeld.audit.replay import replay
    from wheeld.core.stats import Statistics

    countable = not any(k > 36 for k in arcs)
    statistics = None
    game_topic = f"{config.base_topic}/game"
    for message in replay(capture, pipeline):
        if message.topic == game_topic and countable:
            if statistics is None:
                wheel = pockets or pipeline.view.pockets
                # The configured custom order, for the wheel it orders (wheel.pocket_order).
                order = pipeline.settings.pocket_order
                if order is not None and len(order) != wheel:
                    order = None
                statistics = Statistics(wheel, windows, arcs, order=order)
            statistics.add(json.loads(message.payload))
    return statistics


def _capture_pockets(capture: Capture, name: str, pipeline: TablePipeline) -> int | None:
    """The pockets a replayed capture shows: its hello's, else 38 for a 00 the wheel
    sent, else None."""
    from wheeld.drivers import driver_named

    shown: int | None = pipeline.view.wheel_info.get("wheel_pockets")
    if shown in (37, 38, 39, 40):
        return shown
    # A 00 a 37-pocket replay voided is no result there: the wheel's own frames tell.
    decoder = driver_named(name).decoder()
    for line in capture.lines:
        if line.direction == "<" and any(
            getattr(event, "number", None) == "00"
            for event in decoder.feed(line.data + b"\r\n", line.at)
        ):
            return 38
    return None


def _add_plugin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the subcommands other distributions plug in (``wheeld.core.commands`` entry points).

    Each entry point is ``add_parser(subparsers) -> None``; the parser it adds sets
    ``func``, which takes the parsed arguments and returns the exit status. This is
    how wheeld-simulators adds ``simulate`` and ``demo`` without wheeld shipping them.
    """
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="wheeld.commands"), key=lambda entry: entry.name):
        try:
            entry.load()(commands)
        except Exception as exc:  # any failure: a broken plug-in must not break wheeld
            print(
                f"wheeld: plug-in command {entry.name!r} ({entry.value}) skipped: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
            )


#: The commands other distributions of this project add, and the distribution of each.
PLUGIN_DISTRIBUTIONS = {
    "simulate": ("wheeld-simulators", "./simulators"),
    "demo": ("wheeld-simulators", "./simulators"),
}


def _add_missing_plugin_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """The project's plug-in commands whose distribution is not installed: each says where
    it comes from (argparse said only "invalid choice"). Not listed in the help."""
    for name, (distribution, source) in PLUGIN_DISTRIBUTIONS.items():
        if name in commands.choices:
            continue
        missing = commands.add_parser(name, add_help=False, prefix_chars="\0")
        missing.add_argument("rest", nargs=argparse.REMAINDER)
        line = (
            f"comes with the {distribution} distribution, which is not installed:"
            f" pip install {source} (in wheeld's source tree) adds it"
        )
        missing.set_defaults(func=functools.partial(_not_installed, line))


def _not_installed(line: str, args: argparse.Namespace) -> int:
    raise CommandError(line, EXIT_USAGE)


def _load_config(path: Path | None, *, signing_key: bool = True) -> Config:
    from wheeld.config import Config, ConfigError, load

    if path is None:
        return Config()
    try:
        return load(path, signing_key=signing_key)
    except ConfigError as exc:
        raise CommandError(_lines(exc)) from None


def _lines(error: ConfigError) -> str:
    """A configuration's problems as check-config says them: one line each, never joined."""
    return "\n".join(str(report) for report in error.reports)


def _capture_pipeline(
    args: argparse.Namespace, config: Config, signer: Signer | None = None
) -> tuple[Capture, str, TablePipeline]:
    """The capture ``args.capture``, its driver's name, and a table pipeline to replay it."""
    from wheeld.config import driver_settings
    from wheeld.core import capture as capture_format
    from wheeld.core.stats import Statistics
    from wheeld.drivers import UnknownDriver, driver_named
    from wheeld.table.pipeline import TablePipeline, TableSettings

    try:
        capture = capture_format.read(args.capture)
    except capture_format.CaptureError as exc:
        raise CommandError(str(exc)) from None
    name = args.driver or capture.driver or config.wheel.driver
    try:
        driver = driver_named(name)
    except UnknownDriver as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    pockets = args.pockets or config.wheel.pockets
    # --pockets asks for another wheel: the configured custom order is not its.
    order = None if args.pockets else config.wheel.order
    settings = TableSettings(
        table=config.table.id,
        base_topic=config.base_topic,
        driver=name,
        port=str(args.capture),
        pockets=pockets,
        pocket_order=order,
        rules=config.rules,
        history_length=config.mqtt.history_length,
        epoch=capture_format.epoch_of(args.capture),
    )
    statistics = Statistics(pockets or 37, arcs=config.alerts.sector_arcs, order=order)
    # The configuration's driver section applies when it is the capture's driver.
    section = driver_settings(config) if name == config.wheel.driver else None
    decoder = driver.new_decoder(section)
    pipeline = TablePipeline(settings, decoder, signer=signer, statistics=statistics)
    return capture, name, pipeline


def _replay(args: argparse.Namespace) -> int:
    import json

    from wheeld.audit.replay import ReplaySummary, replay

    config = _load_config(args.config)
    capture, name, pipeline = _capture_pipeline(args, config, _replay_signer(args.key, config))
    for warning in capture.warnings:
        print(f"replay: {warning}", file=sys.stderr)
    summary = ReplaySummary()
    game_topic = f"{config.base_topic}/game"
    out = sys.stdout
    for message in replay(capture, pipeline, summary):
        if args.topics:
            line = {
                "topic": message.topic,
                "payload": json.loads(message.payload),
                "retain": message.retain,
            }
            out.write(json.dumps(line))
            out.write("\n")
        elif message.topic == game_topic:
            out.write(message.payload)
            out.write("\n")
    out.flush()
    print(f"replay: {args.capture}: driver {name}: {summary.describe()}", file=sys.stderr)
    if summary.from_wheel and not summary.counters.get("frames", 0):
        print(
            f"replay: no frame of driver {name} in {args.capture}: "
            "a capture of another wheel? (--driver NAME)",
            file=sys.stderr,
        )
    return 0


def _replay_signer(key: Path | None, config: Config) -> Signer | None:
    """``--key``, else the configuration's ``signing.key_file``, else None (unsigned)."""
    from wheeld.core.signing import Signer, SigningError

    if key is not None:
        where, path = "--key", key
    elif config.signing.key_file is not None:
        where, path = "signing.key_file", config.signing.key_file
    else:
        return None
    try:
        return Signer.from_file(path)
    except SigningError as exc:
        raise CommandError(f"{where}: {exc}", EXIT_USAGE) from None


def _keygen(args: argparse.Namespace) -> int:
    import os

    from wheeld.core.signing import Signer

    out: Path = args.out
    key_path, public_path = out / "signing.key", out / "signing.pub"
    signer = Signer.generate()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        # mkdir's own word for a file in the way: no key is there to keep.
        raise CommandError(f"{out}: not a directory") from None
    except OSError as exc:
        raise CommandError(f"{out}: {exc.strerror or exc}") from None
    try:
        # O_EXCL: an existing key (perhaps the only copy of a table's) is never replaced;
        # mode 0600 from the first byte, not after a chmod.
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise CommandError(f"{key_path}: a key is already there; not overwritten") from None
    except OSError as exc:
        raise CommandError(f"{key_path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(signer.private_pem())
            handle.flush()
            os.fsync(handle.fileno())
        public_path.write_bytes(signer.public_pem())
    except OSError as exc:
        key_path.unlink(missing_ok=True)
        raise CommandError(f"{out}: {exc.strerror or exc}") from None
    print(signer.kid)
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from wheeld.config import ConfigError
    from wheeld.shell.readiness import config_warnings, load_for_run, state_dir_holder

    try:
        config = load_for_run(args.file, live=True)
    except ConfigError as exc:
        for report in exc.reports:
            print(report, file=sys.stderr)
        return EXIT_FAILURE
    warnings = config_warnings(config)
    holder = state_dir_holder(config.state.dir)
    if holder is not None:
        warnings.append(
            f"state.dir: {config.state.dir}: {holder} is using it now "
            "(wheeld run would stop while it runs; its port and metrics address were not tried)"
        )
    for warning in warnings:
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    # A file that sets nothing is likely the wrong file, whatever the environment sets.
    note = " (empty: every value is a default)" if _sets_nothing(args.file) else ""
    print(f"{args.file}: ok{note}")
    return 0


def _sets_nothing(path: Path) -> bool:
    import tomllib

    try:
        return not tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def _status(args: argparse.Namespace) -> int:
    from wheeld.followers import status

    if not 0 < args.timeout <= 60:
        raise CommandError("--timeout: between 0 and 60 seconds", EXIT_USAGE)
    config = _load_config(args.config, signing_key=False)
    return status.main(config, args.timeout)


def _run(args: argparse.Namespace) -> int:
    import gc
    import os

    # pydantic looks for its plugins (observability hooks) in every installed
    # distribution's entry points at the first model it builds: a scan of
    # site-packages that READY waits for, for plugins a table never runs. Set it to
    # anything else to have them.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # Start-up builds some 80,000 objects the daemon keeps all its life (modules,
    # models, the pipeline): the cyclic collector would walk them again and again
    # on the way to READY, about a tenth of start-up's CPU. Paused until READY.
    gc.disable()
    try:
        return _run_daemon(args)
    finally:
        gc.enable()


def _run_daemon(args: argparse.Namespace) -> int:
    import asyncio
    import gc

    from wheeld import logs
    from wheeld.config import ConfigError
    from wheeld.shell.readiness import config_warnings, load_for_run

    try:
        config = load_for_run(args.config)
    except ConfigError as exc:
        raise CommandError(_lines(exc)) from None
    logs.configure(config.log.level, config.log.format)
    log = logs.get().bind(table=config.table.id)
    for warning in config_warnings(config):
        log.warning("configuration", problem=warning)
    from wheeld.core.signing import SigningError
    from wheeld.shell.daemon import Daemon
    from wheeld.shell.journal import JournalCorrupt, JournalError
    from wheeld.shell.link import LinkOpenError
    from wheeld.shell.notify import Notifier
    from wheeld.shell.presence import EX_CONFIG, RivalDaemon

    class _Ready(Notifier):
        def ready(self, status: str) -> None:
            """Once READY is said, the payload models are built (``defer_build``: not on
            the way to READY, nor on the first game's path); then what start-up built is
            frozen out of the cyclic collector's reach (``gc.freeze``: no later collection
            walks it again, nor holds the loop that long), and the collector, paused since
            the start, runs."""
            super().ready(status)
            from wheeld.core.health import HealthPayload
            from wheeld.core.messages import PAYLOADS

            for model in (*PAYLOADS.values(), HealthPayload):
                model.model_rebuild()
            gc.freeze()
            gc.enable()

    try:
        return asyncio.run(Daemon(config, capture=args.capture, notifier=_Ready()).run())
    except RivalDaemon as exc:
        raise CommandError(str(exc), EX_CONFIG) from None
    except SigningError as exc:
        raise CommandError(str(exc)) from None
    except LinkOpenError as exc:
        raise CommandError(f"wheel.port: {exc}") from None
    except JournalCorrupt as exc:  # restarting cannot mend it: the units leave it stopped
        raise CommandError(f"state.dir: {exc}", EX_DATAERR) from None
    except JournalError as exc:
        raise CommandError(f"state.dir: {exc}") from None
    except OSError as exc:
        raise CommandError(str(exc)) from None


def _marquee(args: argparse.Namespace) -> int:
    import asyncio

    from wheeld import logs
    from wheeld.followers.marquee.app import run

    config = _load_config(args.config, signing_key=False)
    logs.configure(config.log.level, config.log.format)
    from wheeld.config import split_listen

    listen = args.listen or config.marquee.listen
    # Whose value it is, in every message: the flag's or the configuration's.
    source = "--listen" if args.listen else "marquee.listen"
    try:
        # The flag may ask for any free port (0), as the demo does; the file may not.
        host, port = split_listen(listen, any_port=bool(args.listen))
    except ValueError as exc:
        raise CommandError(f"{source}: {listen!r}: {exc}", EXIT_USAGE) from None
    try:
        return asyncio.run(run(config, host, port, logs.get("wheeld.followers.marquee")))
    except OSError as exc:
        raise CommandError(f"{source}: {listen}: {exc.strerror or exc}") from None


def _display(args: argparse.Namespace) -> int:
    import asyncio

    from wheeld import logs
    from wheeld.followers.display import run
    from wheeld.shell.link import LinkOpenError

    config = _load_config(args.config, signing_key=False)
    logs.configure(config.log.level, config.log.format)
    try:
        return asyncio.run(
            run(config, args.port, args.baudrate, logs.get("wheeld.followers.display"))
        )
    except LinkOpenError as exc:
        raise CommandError(f"--port: {exc}") from None


def _archive(args: argparse.Namespace) -> int:
    import json

    from wheeld.config import ConfigError, load_archive

    path = getattr(args, "action_config", None) or args.config
    if path is None:
        raise CommandError("--config FILE is required", EXIT_USAGE)
    try:
        settings = load_archive(path)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    action = args.archive_action
    if action is None:
        return _archive_run(settings)
    from wheeld.archive import answers

    config = settings.archive
    try:
        if action == "verify":
            return _archive_verify(config)
        if action == "gaps":
            for gap in answers.gaps(config):
                print(
                    f"{gap['table']} epoch {gap['epoch'] or '(none)'}: seq {gap['first_seq']}"
                    f"-{gap['last_seq']} ({gap['missing']} missing, games {gap['before_game']}"
                    f"-{gap['after_game']}): {gap['state']}"
                    + (f" after {gap['attempts']} recall(s): {gap['why']}" if gap["why"] else "")
                )
            return 0
        if action == "report":
            if args.last < args.first:
                raise CommandError("--to is before --from", EXIT_USAGE)
            rows = answers.report(config, args.table, args.first, args.last)
            if args.format == "csv":
                sys.stdout.write(answers.report_csv(rows))
            else:
                print(json.dumps({"table": args.table, "days": rows}, indent=2))
            return 0
        for message in answers.game(config, args.table, args.game):
            print(json.dumps(message, default=answers.jsonable))
        return 0
    except answers.AnswerError as exc:
        raise CommandError(str(exc)) from None
    except answers.DatabaseError as exc:  # gone, or refusing, in the middle of an answer
        raise CommandError(f"archive.dsn: {answers.said(exc)}") from None


def _archive_verify(config: Any) -> int:
    from wheeld.archive import answers

    findings = epochs = 0
    for audit in answers.verify(config):
        epochs += 1
        findings += len(audit.findings)
        for line in audit.lines():
            print(line)
    print(f"{epochs} epoch(s) checked: " + (f"{findings} finding(s)" if findings else "intact"))
    return EXIT_FAILURE if findings else 0


def _archive_run(settings: Any) -> int:
    import asyncio

    from wheeld import logs

    logs.configure(settings.log.level, settings.log.format)
    from wheeld.archive.service import Archive
    from wheeld.archive.store import StoreError

    try:
        return asyncio.run(Archive(settings, logs.get("wheeld.archive")).run())
    except StoreError as exc:
        raise CommandError(f"archive.dsn: {exc}") from None


_COMMANDS = {
    "marquee": _marquee,
    "display": _display,
    "replay": _replay,
    "check-config": _check_config,
    "run": _run,
    "status": _status,
    "keygen": _keygen,
    "verify": _verify,
    "recall": _recall,
    "export": _export,
    "stats": _stats,
    "archive": _archive,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``wheeld`` console script."""
    import signal

    import wheeld

    # Ctrl-C at any moment is one line and status 130, never a traceback: from
    # here on as Python's KeyboardInterrupt, caught below (before, while the
    # package was imported, by ``wheeld._interrupted``; after, again by it).
    quiet = signal.getsignal(signal.SIGINT) is wheeld._interrupted
    if quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = _ctrl_c_again
    said = {"name": "wheeld"}
    try:
        try:
            return _dispatch(argv, said)
        except Exception as exc:
            # A Ctrl-C inside a class's creation (``__set_name__``, a pydantic model
            # built at import) comes out wrapped in a RuntimeError: still an interrupt.
            if not _from_ctrl_c(exc):
                raise
            raise KeyboardInterrupt from None
    except KeyboardInterrupt:
        # Also one raised while a CommandError's lines were being printed: a second
        # Ctrl-C must not cut this line short.
        if quiet:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"{said['name']}: interrupted", file=sys.stderr)
        return 130
    finally:
        if quiet:  # the interpreter's own shutdown, too, ends in one line
            signal.signal(signal.SIGINT, wheeld._interrupted)
        # CPython 3.11 marks a Ctrl-C that left an ``exec`` of a string (a dataclass's
        # methods are made so) as unhandled, caught or not, and at exit kills itself with
        # SIGINT instead of returning 130 (found by review: "python -m wheeld run" ended
        # -2 about one start in five). An ``exec`` that ends well clears the mark.
        exec("")


def _ctrl_c_again(unraisable: Any) -> None:
    """CPython drops an exception raised where none can go on (a weakref callback, a
    ``__del__``): "Exception ignored", and the program runs on. A Ctrl-C must not be
    dropped so: it is delivered again, to land where it can stop the command (found by
    CI: one at an import's end landed in importlib's module-lock callback, and ``run``
    went on for ever)."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import threading

        # From another thread, a moment later: called here, the handler would raise at
        # once, inside this hook, and be dropped again (dropped again, it comes back here).
        threading.Timer(0.01, _interrupt_main).start()
        return
    sys.__unraisablehook__(unraisable)


def _interrupt_main() -> None:
    import _thread

    _thread.interrupt_main()


def _from_ctrl_c(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among what ``error`` was raised from."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _dispatch(argv: Sequence[str] | None, said: dict[str, str]) -> int:
    """The command line parsed and its command run; a CommandError's lines printed."""
    try:
        words = sys.argv[1:] if argv is None else argv
        args = _parser(plugins=not _built_in(words)).parse_args(words)
        said["name"] = name = f"wheeld {args.command}"
        # Plug-in commands carry their own handler; built-in ones are looked up.
        command: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
        command = command or _COMMANDS.get(args.command)
        if command is None:
            print(f"{name}: the plug-in gave this command no handler", file=sys.stderr)
            return EXIT_FAILURE
        return command(args)
    except CommandError as exc:
        for line in str(exc).splitlines():
            print(f"{said['name']}: {line}", file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        # `wheeld replay ... | head` is normal use, not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
