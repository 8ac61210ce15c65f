"""The one registry of the wire: every topic wheeld publishes and every command it obeys.

Each topic under ``<base>/`` is named here once, with its payload's model, its
retain flag, its QoS and what it is for; each command with its payload's model
and the replies it can get. The daemon's builders take the retain flag and QoS
from here (``wheeld.table.effects.Outgoing.on``), the AsyncAPI document and the
JSON Schemas are generated from here (``wheeld.contract.asyncapi``), and the
followers and the tests validate by the models named here.

Light on purpose: the daemon reads this module on its way to READY, so it
imports no pydantic. A model is named by its class's name and imported only
when ``model()`` is asked for it (by the document, the followers, the tests);
``tests/test_contract.py`` resolves every one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from wheeld.core import commands as judged

if TYPE_CHECKING:
    from pydantic import BaseModel

#: Where the models are: the topics' payloads, and the commands' and replies'.
_TOPIC_MODELS = "wheeld.contract.topics"
_COMMAND_MODELS = "wheeld.contract.commands"

#: The last level of each topic wheeld publishes under ``<base>/``.
TopicName = Literal[
    "status",
    "game",
    "result",
    "history",
    "sequence",
    "wheel",
    "alarm",
    "info",
    "stats",
    "table",
    "health",
    "preflight",
]


def _resolve(module: str, name: str) -> type[BaseModel]:
    model: type[BaseModel] = getattr(importlib.import_module(module), name)
    return model


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic wheeld publishes: ``<base>/<name>``."""

    name: TopicName
    #: Its payload's model, by name, in ``wheeld.contract.topics``.
    model_name: str
    #: Retained by the broker: a consumer that subscribes later still gets the last one.
    retain: bool
    #: What it carries and when (the AsyncAPI channel's description).
    doc: str
    qos: Literal[0, 1, 2] = 1
    #: Where it is under ``<base>/`` when that is not its name (one level down).
    level: str = ""

    def address(self, base: str) -> str:
        """The topic under ``base`` (``mqtt.base_topic``)."""
        return f"{base}/{self.level or self.name}"

    def model(self) -> type[BaseModel]:
        """The payload's model (imports the contract's models the first time)."""
        return _resolve(_TOPIC_MODELS, self.model_name)


@dataclass(frozen=True, slots=True)
class Command:
    """A command wheeld obeys on ``<base>/command/<name>``, and the replies it can get."""

    name: str
    #: Its payload's model, by name, in ``wheeld.contract.commands``.
    model_name: str
    #: The reply when it is carried out, by model name; a refusal is always ``Refused``.
    reply_name: str
    #: The reply's schema file under ``docs/api/schemas/`` (open and close share one).
    reply_file: str

    def address(self, base: str) -> str:
        """The topic under ``base`` (``mqtt.base_topic``) the command is published to."""
        return f"{base}/command/{self.name}"

    def model(self) -> type[BaseModel]:
        """The payload's model (imports the contract's models the first time)."""
        return _resolve(_COMMAND_MODELS, self.model_name)

    def replies(self) -> tuple[type[BaseModel], type[BaseModel]]:
        """The reply when carried out, and the refusal."""
        return _resolve(_COMMAND_MODELS, self.reply_name), _resolve(_COMMAND_MODELS, REFUSED)


#: Any command's refusal: the one-line reason (``reply-refused``).
REFUSED = "Refused"
REFUSED_FILE = "reply-refused"

TOPICS: dict[TopicName, Topic] = {
    topic.name: topic
    for topic in (
        Topic(
            "status",
            "Status",
            retain=True,
            doc="The daemon's presence: online on every connect; offline as its last will and"
            " on a clean stop; fault while the journal cannot write (nothing is decided then).",
        ),
        Topic(
            "game",
            "GameEvent",
            retain=False,
            doc="Every game event, in order: spinning, no_more_bets, then result or no_spin."
            " Signed and chained (seq, prev, kid, sig) when the daemon signs. A consumer drops"
            " repeats by game_id and event.",
        ),
        Topic(
            "result",
            "LatestResult",
            retain=True,
            doc="The latest result: the very payload <base>/game carried.",
        ),
        Topic(
            "history",
            "History",
            retain=True,
            doc="The last mqtt.history_length winning numbers, newest first.",
        ),
        Topic(
            "sequence",
            "Sequence",
            retain=True,
            doc="The last game event published (game_id, event; seq and digest when signed),"
            " after each: a daemon starting with a lost state directory or another journal"
            " goes on past it, never reusing a game id or seq a consumer saw.",
        ),
        Topic(
            "wheel",
            "Wheel",
            retain=True,
            doc="The wheel link, the wheel's identity and the decoder's counters: on link"
            " changes, on the wheel's hello and every 60 s.",
        ),
        Topic(
            "alarm",
            "Alarm",
            retain=False,
            doc="What an engineer should know that is not a game decision (codes in"
            " docs/mqtt.md). Signed (kid, sig) when the daemon signs.",
        ),
        Topic(
            "info",
            "Info",
            retain=True,
            doc="Which software, drivers, wheel, key and configuration decide this table's"
            " games: at start and when the wheel's hello changes it. Signed when the daemon"
            " signs.",
        ),
        Topic(
            "stats",
            "Stats",
            retain=True,
            doc="The table's statistics after each result or no-spin (docs/statistics.md).",
        ),
        Topic(
            "table",
            "Table",
            retain=True,
            doc="Open or closed, with the last three results: after open and close.",
        ),
        Topic(
            "health",
            "Health",
            retain=True,
            doc="The table's health in one word (ok, degraded, fault) with the link, the"
            " broker, the outbox, the journal, the faults set (its own health) and the"
            " alerts set (statistical judgements), each in its own list: on every change"
            " and every metrics.health_interval_s (docs/metrics.md). Not journaled.",
        ),
        Topic(
            "preflight",
            "Preflight",
            level="status/preflight",
            retain=False,
            doc="The daemon's start-up check, to itself: a random token it publishes and waits"
            " to hear back, proof that the broker has handed over everything it retains for"
            " the table. At start and at every connect; followers ignore it.",
        ),
    )
}

_BY_LEVEL: dict[str, Topic] = {topic.level or topic.name: topic for topic in TOPICS.values()}


def topic_named(level: str) -> Topic | None:
    """The topic ``<base>/<level>``, when wheeld publishes one (for a topic read off the wire)."""
    return _BY_LEVEL.get(level)


def topic_at(base: str, address: str) -> Topic | None:
    """The topic ``address`` is, under ``base``; None when it is none wheeld publishes there."""
    level = address.removeprefix(base + "/")
    return topic_named(level) if level != address else None


#: Each command wheeld obeys: the names ``wheeld.core.commands.COMMANDS`` judges, in its
#: order. A name without an entry here (or an entry for a name it does not judge) fails at
#: import, rather than as a command missing from the contract.
COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        Command("no_spin", "NoSpinCommand", "NoSpinDone", "reply-no_spin"),
        Command("open", "OpenCommand", "TableSet", "reply-table"),
        Command("close", "CloseCommand", "TableSet", "reply-table"),
        Command("recall", "RecallCommand", "Recalled", "reply-recall"),
        Command("ack", "AckCommand", "Acknowledged", "reply-ack"),
    )
}
if tuple(COMMANDS) != judged.COMMANDS:
    raise ImportError(
        f"the contract's commands {tuple(COMMANDS)} are not those wheeld obeys {judged.COMMANDS}"
    )
