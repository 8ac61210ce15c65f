"""wheeld: the controller daemon for electronic roulette wheels."""

# ``_signal``, not ``signal``: the C module is built in and loads at once, where
# ``signal`` imports ``enum`` and ``functools`` first, and a Ctrl-C in those was a
# traceback through this file.
import _signal  # type: ignore[import-not-found]  # typeshed stubs only `signal`
import posix as _os  # built in, as ``sys``: nothing imported before the handler is set
import sys as _sys


def _interrupted(signum: int, frame: object) -> None:
    """Ctrl-C before ``wheeld.cli.main`` took it over (while Python imports): one line."""
    _sys.stderr.write("wheeld: interrupted\n")
    _sys.stderr.flush()
    _os._exit(130)


# The console script and ``python -m wheeld`` import this package first. A Ctrl-C
# while the command is still being imported would otherwise print Python's
# KeyboardInterrupt traceback from whatever module was loading; ``main`` hands SIGINT
# back to Python once it can catch it. Taken over at once, before this file does anything
# more (found by CI: a Ctrl-C inside the check below was a traceback through this file),
# and given back just below to a program that imports wheeld: it keeps its own handling.
_TAKEN = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
if _TAKEN:
    _signal.signal(_signal.SIGINT, _interrupted)


def _a_wheeld_command() -> bool:
    """Whether this process is the ``wheeld`` command: the console script, or
    ``python -m wheeld`` (its package is imported while ``sys.argv[0]`` is still "-m")."""
    if (_sys.argv[0] if _sys.argv else "").rsplit("/", 1)[-1] == "wheeld":
        return True
    words = iter(getattr(_sys, "orig_argv", [])[1:])
    for word in words:  # the interpreter's options, up to the first that names a program
        if word in ("-X", "-W"):
            next(words, None)  # its argument
        elif word.startswith("-m"):
            return (word[2:] or next(words, "")) == "wheeld"
        elif word == "-c" or not word.startswith("-"):
            return False
    return False


if _TAKEN and not _a_wheeld_command():
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
