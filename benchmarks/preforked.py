"""One preloaded parent forking a `wheeld run` per table: the design weighed for 64 wheels.

Not wheeld's own (yet): ``python -m benchmarks.many --preforked`` measures it
beside one process started per wheel. The parent imports what ``wheeld run``
imports, reads the package's digest and the installed drivers once, then
freezes every object it holds out of the garbage collector's reach
(``gc.freeze``: a collection in a child would otherwise write to each object's
header, copying the page). It then reads one request a line on stdin (JSON:
``config``, ``notify``, ``log``) and forks a child for each, which runs
``wheeld run --config CONFIG`` as the command line does, with its own
``NOTIFY_SOCKET`` and its stderr to ``log``; the child's pid is written on
stdout. Every table keeps its own process, journal, broker connection and
event loop: a daemon that dies takes no other table with it. What the children
share is the parent's pages they only read: the code of the modules, the
configuration's models, the interpreter's own objects.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import sys
from types import FrameType

#: Linux's prctl option: a signal for the child when its parent dies.
_PR_SET_PDEATHSIG = 1


def _preload() -> None:
    """What ``wheeld run`` imports and reads once, imported and read here, before any fork."""
    import aiomqtt  # noqa: F401
    import serial_asyncio_fast  # noqa: F401

    import wheeld.cli
    import wheeld.logs
    import wheeld.shell.daemon
    import wheeld.shell.readiness
    from wheeld.core.signing import load_public_key  # noqa: F401
    from wheeld.drivers import drivers
    from wheeld.shell import identity

    drivers()
    identity.package_digest()
    identity.installed_drivers()
    # The command line's parser and the lazily imported modules of a run, built once here.
    wheeld.cli._parser(plugins=False)


def _reap(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _child(request: dict[str, str]) -> int:
    """In the forked child: become ``wheeld run --config CONFIG``."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.environ["NOTIFY_SOCKET"] = request["notify"]
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log, 2)
    sys.argv = ["wheeld", "run", "--config", request["config"]]
    import wheeld.cli

    return wheeld.cli.main(sys.argv[1:])


def main() -> int:
    _preload()
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, _reap)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = 70
            try:
                status = _child(request)
            finally:
                os._exit(status)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
