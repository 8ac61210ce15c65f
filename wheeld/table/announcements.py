"""Announcements: every payload a table publishes, built (and signed) in one place.

Game messages (chained and signed when the table signs) with the retained
``<base>/sequence`` that names each before it goes out, ``<base>/result``,
alarms (signed, not chained), ``<base>/status``, ``<base>/wheel``,
``<base>/history``, ``<base>/stats`` and ``<base>/table``. Builders only: what
to say, and when, is the pipeline's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from wheeld.core.game import Alarm, GameEvent, Result
from wheeld.core.layout import WheelLayout
from wheeld.core.messages import SCHEMA_VERSION, event_name, game_payload, iso_utc
from wheeld.core.signing import ChainState, Signer
from wheeld.core.signing import chain as sign_into_chain
from wheeld.core.stats import Statistics
from wheeld.table.effects import GameRecord, Outgoing

#: Made once: ``json.dumps`` with options makes an encoder at every call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact(payload: Mapping[str, Any]) -> str:
    """A signed payload on the wire: compact, like the unsigned ones (the models' JSON)."""
    return _COMPACT.encode(payload)


class Announcer:
    """One table's payload builders: its id, base topic and epoch, and its signer."""

    def __init__(self, table: str, base_topic: str, epoch: str, signer: Signer | None) -> None:
        self.table = table
        self.base = base_topic
        self.epoch = epoch
        #: Signs every <base>/game payload (chained) and every alarm; None: unsigned.
        self.signer = signer

    def game(
        self, decision: GameEvent, layout: WheelLayout, chain: ChainState
    ) -> tuple[GameRecord, list[Outgoing], ChainState]:
        """A game decision: its journal record, its messages in order (the sequence
        marker first: intent first), and where the chain stands after it."""
        model = game_payload(decision, self.table, layout, self.epoch)
        message: dict[str, Any] = model.model_dump(mode="json")
        if self.signer is not None:
            message, chain = sign_into_chain(message, chain, self.signer)
            body = compact(message)
        else:
            body = model.to_json()  # serialised once: a signed body is the chain's own
        number = decision.number if isinstance(decision, Result) else None
        event = event_name(decision)
        record = GameRecord(decision.game_id, event, body, number, message)
        messages = [
            self._sequence(decision.game_id, event, message, chain),
            Outgoing.on(self.base, "game", body),
        ]
        if number is not None:
            messages.append(Outgoing.on(self.base, "result", body))
        return record, messages, chain

    def _sequence(
        self, game_id: int, event: str, message: dict[str, Any], chain: ChainState
    ) -> Outgoing:
        """``<base>/sequence``, retained: the game message about to be published, whole.

        Published before that message (intent first). A daemon that lost its
        state directory, or a standby that takes the table over with a journal
        of its own, reads it before deciding anything: it goes on past this
        game id and this seq, never reusing one a consumer saw, and says the
        message again (a repeat a consumer drops) rather than contradict it.
        """
        said: dict[str, Any] = {"game_id": game_id, "event": event, "epoch": self.epoch}
        if self.signer is not None:
            said["seq"] = chain.seq - 1
            said["digest"] = chain.prev  # the next message's prev
        said.update(message=message, table=self.table, schema_version=SCHEMA_VERSION)
        return Outgoing.on(self.base, "sequence", json.dumps(said))

    def said_again(self, message: Mapping[str, Any]) -> list[Outgoing]:
        """Another controller's game message, said again word for word (a repeat
        consumers drop: it may never have gone out)."""
        body = compact(message)
        again = [Outgoing.on(self.base, "game", body)]
        if message.get("event") == "result":
            again.append(Outgoing.on(self.base, "result", body))
        return again

    def alarm(self, alarm: Alarm) -> Outgoing:
        """``<base>/alarm`` for ``alarm``: the contract's payload, signed when the table signs.

        The one builder of alarms: the publisher's own (``broker_refused``) comes
        here too, so every alarm carries ``schema_version`` and a signature.
        """
        payload = {
            "alarm": alarm.code,
            "table": self.table,
            "ts": iso_utc(alarm.at),
            **alarm.detail,
            "schema_version": SCHEMA_VERSION,
        }
        if self.signer is not None:
            # Signed, not chained: alarms are not decisions and may bypass the journal.
            return Outgoing.on(self.base, "alarm", compact(self.signer.sign(payload)))
        return Outgoing.on(self.base, "alarm", json.dumps(payload))

    def status(self, journal_failed: bool) -> Outgoing:
        """The retained status: online, or a fault that stops the table deciding."""
        if journal_failed:
            body: dict[str, Any] = {"state": "fault", "fault": "journal_unwritable"}
        else:
            body = {"state": "online"}
        body["schema_version"] = SCHEMA_VERSION
        return Outgoing.on(self.base, "status", json.dumps(body))

    def wheel(self, state: Mapping[str, Any], now: float) -> Outgoing:
        """The retained wheel state (link, identity, pockets, counters: the pipeline's)."""
        body = {**state, "ts": iso_utc(now), "schema_version": SCHEMA_VERSION}
        return Outgoing.on(self.base, "wheel", json.dumps(body))

    def history(self, numbers: Iterable[str]) -> Outgoing:
        """The retained winning-number history, latest first."""
        body = json.dumps({"numbers": list(numbers), "schema_version": SCHEMA_VERSION})
        return Outgoing.on(self.base, "history", body)

    def stats(self, statistics: Statistics, wheel_figures: Mapping[str, Any]) -> Outgoing:
        """The retained statistics (the text built once an outcome), with the wheel's own
        beside them when its log is read."""
        figures = statistics.to_json_text(schema_version=SCHEMA_VERSION)
        if wheel_figures:
            figures = json.dumps({**json.loads(figures), "wheel": dict(wheel_figures)})
        return Outgoing.on(self.base, "stats", figures)

    def table_state(self, state: str, last_numbers: list[str], now: float) -> dict[str, Any]:
        """The retained ``<base>/table`` payload: open or closed, and the last numbers."""
        return {
            "state": state,
            "last_numbers": last_numbers,
            "table": self.table,
            "ts": iso_utc(now),
            "schema_version": SCHEMA_VERSION,
        }

    def table_message(self, announcement: Mapping[str, Any]) -> Outgoing:
        """``<base>/table``, retained."""
        return Outgoing.on(self.base, "table", json.dumps(announcement))
