"""Structured logs: JSON lines for journald, readable lines on a terminal.

Secrets never reach a log: the configuration's password fields are excluded
from its repr, and ``redact`` blanks any key that looks like one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_SECRET_WORDS = ("password", "secret", "token", "key_file")
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def redact(_: object, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Blank every field whose name says it holds a secret."""
    for key in event:
        if any(word in key for word in _SECRET_WORDS):
            event[key] = "***"
    return event


def configure(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    """Set up structlog for the process; ``fmt`` is auto, json or console."""
    out = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    # aiomqtt and paho log through the standard library: warnings and up, rendered as
    # wheeld's own lines (JSON for journald), never a bare text line among them.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def get(name: str = "wheeld") -> Any:
    """A bound logger; bind ``table=`` and ``game_id=`` where they are known."""
    return structlog.get_logger(name)
