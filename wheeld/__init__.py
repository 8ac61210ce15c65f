"""wheeld: the controller daemon for electronic roulette wheels."""

import os as _os
import signal as _signal
import sys as _sys


def _interrupted(signum: int, frame: object) -> None:
    """Ctrl-C before ``wheeld.cli.main`` took it over (while Python imports): one line."""
    _sys.stderr.write("wheeld: interrupted\n")
    _sys.stderr.flush()
    _os._exit(130)


# The console script imports this package first. A Ctrl-C while the command is
# still being imported would otherwise print Python's KeyboardInterrupt traceback
# from whatever module was loading; ``main`` hands SIGINT back to Python once it
# can catch it. Only for the ``wheeld`` command: a program importing wheeld keeps
# its own handling.
if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "wheeld" and (
    _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
):
    _signal.signal(_signal.SIGINT, _interrupted)
