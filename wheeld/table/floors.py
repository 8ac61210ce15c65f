"""Broker floors: what the broker's retained messages say this table must go on past.

The retained ``<base>/sequence`` marker and ``<base>/result`` are read at start
and at every reconnect. A game id or a seq the broker holds at or past this
table's next one would repeat one a consumer saw (a state directory lost, a
standby that took the table over): the table goes on past it, and a critical
alarm says so. A marker of another controller's is taken over from once. Each
retained message is judged into a :class:`Move`, which is then carried out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wheeld.core.engine import GameEngine
from wheeld.core.events import Direction
from wheeld.core.game import Alarm, Decision, NoSpin
from wheeld.core.messages import OPENING_EVENTS
from wheeld.core.signing import ChainState, Signer, digest, signature_problem
from wheeld.table.announcements import Announcer
from wheeld.table.decisions import Recorder
from wheeld.table.effects import Effects, LogLevel

#: The highest game id or seq the broker may move a table on to. Far below JSON's
#: exact integers (2**53 - 1): a table moved there still has room for every game
#: it will ever play, and a forged or broken value near the end is no evidence.
LAST_CONTINUABLE = 2**52
#: Events that open a game (a game whose last word was one of these is still open).
LAUNCHED = OPENING_EVENTS
#: The most numbers a retained ``<base>/history`` may hold to be adopted at a takeover
#: (``mqtt.history_length`` is at most this).
MOST_HISTORY = 1000


@dataclass(frozen=True, slots=True)
class Standing:
    """Where the table stands, as the floors are judged against."""

    epoch: str
    chain: ChainState
    next_game_id: int
    #: The marker of another controller last taken over from (epoch, seq or game id, event).
    taken_from: tuple[str, int, str] | None


@dataclass(slots=True)
class Move:
    """What a retained message moves, carried out in this order (None or empty: nothing)."""

    logs: list[tuple[LogLevel, str, dict[str, Any]]] = field(default_factory=list)
    #: Another controller's marker, taken over from: kept, and this journal's unsent
    #: game messages let go (``Effects.superseded``).
    taken_from: tuple[str, int, str] | None = None
    #: That controller's message, said again word for word.
    said_again: dict[str, Any] | None = None
    #: The engine forgets a game open here at or before this id; alternation goes on
    #: from this rotor direction (None: unknown).
    taken_over: tuple[int, Direction | None] | None = None
    #: The chain goes on from here: its next seq and prev.
    chain: ChainState | None = None
    #: The message the chain went on after: (seq, digest), for ``verify``.
    chain_floor: tuple[int, str] | None = None
    #: The seq moved past the broker's: (broker's seq, next seq), said in a critical alarm.
    seq_behind: tuple[int, int] | None = None
    #: The next game id after the broker's (said in a critical alarm).
    next_game_id: int | None = None
    #: A game the marker launched that no one ended: voided here, once.
    void: int | None = None
    #: The history the table shows from the takeover on, latest first (``taken_history``).
    history: list[str] | None = None


class BrokerFloors:
    """The broker's retained messages for one table: judged, and what they move moved."""

    def __init__(
        self,
        table: str,
        epoch: str,
        engine: GameEngine,
        record: Recorder,
        taken_from: tuple[str, int, str] | None,
    ) -> None:
        self.table = table
        self.epoch = epoch
        self.engine = engine
        self.record = record
        self.announce: Announcer = record.announce
        #: The last marker of another controller this journal took the table over
        #: from: (epoch, seq or game id, event); read again, it changes nothing.
        self.taken_from = taken_from

    @property
    def signer(self) -> Signer | None:
        """The table's key: a marker moves nothing unless signed by it (or, at an unsigned
        table, unsigned)."""
        return self.announce.signer

    def on_sequence(self, payload: bytes, now: float, history: bytes | None = None) -> Effects:
        """The retained ``<base>/sequence`` marker, read at start and at every reconnect
        (with the retained ``<base>/history``, if any: what a takeover may adopt).

        The marker names the last game message said for the table, before it
        went out, whole. One this journal holds (or already took over from)
        changes nothing. Another — a standby's, a lost state directory's, or
        one a power cut took from ours — is a table another controller went on
        with: its message is said again, word for word (a repeat consumers
        drop: it may never have gone out); ids and seqs go on past it, the next
        message's ``prev`` naming it; a game it launched is voided here, once;
        the game open here at or before it is forgotten (it was the other
        controller's to end); alternation goes on from the other's last
        result; and what this journal still had to say of its games is let go
        (``Effects.superseded``): it never went out, or the marker would say so.

        Only a marker whose message is the one it names, signed by this table's
        key (at an unsigned table: unsigned), moves anything: a marker is
        retained state, and anyone allowed to publish there could forge one.
        An older wheeld's marker (no epoch, no message) moves ids and seqs on.
        """
        out = Effects()
        move = self.judge_sequence(payload, self._standing())
        if move.said_again is not None:
            move.history = self.taken_history(move.said_again, history, move)
        self._carry_out(move, now, out)
        voided: list[Decision] = []
        if move.void is not None:
            voided.append(_controller_restart(move.void, now))
        self.record.decide(voided, out)  # the engine state too, when it changed
        return out

    def on_result(self, payload: bytes, now: float) -> Effects:
        """The retained ``<base>/result``: a game id (or seq) at or past ours would repeat.

        A state directory lost whole (journal and game-ids) restarts ids at 1,
        while the table's consumers have seen higher ones and drop repeats by id.
        The next game then takes the id after the broker's, and a critical
        alarm says so; a signed result moves the chain past its seq too.
        """
        out = Effects()
        self._carry_out(self.judge_result(payload, self._standing()), now, out)
        return out

    def _standing(self) -> Standing:
        next_game_id = self.engine.state.next_game_id
        return Standing(self.epoch, self.record.chain, next_game_id, self.taken_from)

    def _carry_out(self, move: Move, now: float, out: Effects) -> None:
        """What a retained message moves, in order."""
        for level, event, fields in move.logs:
            out.log(level, event, **fields)
        if move.taken_from is not None:
            self.taken_from = out.taken_from = move.taken_from
            out.superseded = True
        if move.said_again is not None:
            out.messages += self.announce.said_again(move.said_again)
        if move.history is not None:
            # The table's numbers, never this journal's older ones shown as the latest.
            self.record.history.clear()
            self.record.history.extend(move.history)
            out.taken_history = list(self.record.history)
            out.messages.append(self.announce.history(self.record.history))
        if move.taken_over is not None:
            forgotten = self.engine.taken_over(*move.taken_over)
            if forgotten is not None:
                out.log("warning", "game open here ended by another controller", game_id=forgotten)
        if move.chain is not None:
            self.record.chain = move.chain
            if move.chain_floor is not None:
                out.chain_floor = (*move.chain_floor, now)
        if move.seq_behind is not None:
            broker_seq, next_seq = move.seq_behind
            detail = {"severity": "critical", "broker_seq": broker_seq, "next_seq": next_seq}
            self.record.raise_alarm(Alarm(now, "seq_behind_broker", detail), out)
        if move.next_game_id is not None:
            self.engine.state.next_game_id = move.next_game_id
            detail = {"severity": "critical", "broker_game_id": move.next_game_id - 1}
            detail["next_game_id"] = move.next_game_id
            self.record.raise_alarm(Alarm(now, "game_ids_behind_broker", detail), out)
            self.record.state_changed(out, force=True)

    def judge_sequence(self, payload: bytes, standing: Standing) -> Move:
        """What the retained ``<base>/sequence`` marker moves, from where the table stands."""
        move = Move()
        body = self._retained(payload, "sequence", move)
        if body is None:
            return move
        game, event, seq = body.get("game_id"), body.get("event"), body.get("seq")
        if type(game) is not int or not 0 < game <= LAST_CONTINUABLE:
            why = f"game_id {str(game)[:32]} is not one to go on from"
            move.logs.append(("warning", "broker's retained sequence ignored", {"why": why}))
            return move
        if "epoch" not in body:
            return self._older_marker(body, game, standing, move)
        message = self._vouched(body, move)
        if message is None:
            return move
        # Signed, the marker's seq is its message's (``_vouched``): the chain's place.
        number = seq if self.signer is not None and type(seq) is int else None
        ours = body["epoch"] == standing.epoch and (
            number < standing.chain.seq if number is not None else game < standing.next_game_id
        )
        said = (str(body["epoch"]), number if number is not None else game, str(event))
        taken = standing.taken_from
        # The controller this journal took over from, at or before where it was taken
        # from: gone past already (a broker back with an older database holds it).
        past = taken is not None and said[0] == taken[0] and (said[1] < taken[1] or said == taken)
        if ours or past:
            return move
        move.taken_from = said
        move.said_again = message
        rotor = message.get("rotor_direction") if event == "result" else None
        move.taken_over = (game, rotor if rotor in ("cw", "ccw") else None)
        digest_ = body.get("digest")
        if number is not None and type(digest_) is str:
            # The next message names the other controller's as prev, its seq past both chains'.
            moved = standing.chain.seq <= number
            move.chain = ChainState(max(standing.chain.seq, number + 1), digest_)
            move.chain_floor = (move.chain.seq - 1, digest_)
            if moved:
                move.seq_behind = (number, number + 1)
        move.next_game_id = self._past_game_id(game, standing.next_game_id)
        if event in LAUNCHED:
            move.void = game
        return move

    def taken_history(
        self, message: dict[str, Any], retained: bytes | None, move: Move
    ) -> list[str]:
        """The history the table shows once taken over at ``message``, latest first.

        It starts from the table's latest result, the one said again: the broker's
        retained ``<base>/history`` whole when it is that table's (its latest that
        result, every number a pocket of this wheel, at most ``MOST_HISTORY``),
        else that result alone. After any other event the table's latest result is
        unknown here: none (never this journal's own, from before).
        """
        if message.get("event") != "result" or not isinstance(message.get("number"), str):
            return []
        latest: str = message["number"]
        if retained is None:
            return [latest]
        try:
            body, why = json.loads(retained, parse_constant=_not_json), "no list of numbers"
        except (ValueError, RecursionError):
            body, why = None, "not JSON"
        numbers = body.get("numbers") if isinstance(body, dict) else None
        layout = self.engine.layout
        if not isinstance(numbers, list):
            pass  # why: said above
        elif not 0 < len(numbers) <= MOST_HISTORY:
            why = f"{len(numbers)} numbers"
        elif not all(isinstance(n, str) and layout.has_pocket(n) for n in numbers):
            why = "not every number a pocket of this wheel"
        elif numbers[0] != latest:
            why = "its latest is not the result taken over from"
        else:
            return list(numbers)
        move.logs.append(("warning", "broker's retained history ignored", {"why": why}))
        return [latest]

    def judge_result(self, payload: bytes, standing: Standing) -> Move:
        """What the retained ``<base>/result`` moves, from where the table stands."""
        move = Move()
        body = self._retained(payload, "result", move)
        if body is None:
            return move
        if isinstance(body.get("sig"), str):
            try:
                said = digest(body)
            except (ValueError, TypeError):  # not canonicalisable: signed by nobody
                why = "not canonical JSON"
                move.logs.append(("warning", "broker's retained result ignored", {"why": why}))
                return move
            self._past_seq(body.get("seq"), said, standing, move)
        move.next_game_id = self._past_game_id(body.get("game_id"), standing.next_game_id)
        return move

    def _older_marker(
        self, body: dict[str, Any], game: int, standing: Standing, move: Move
    ) -> Move:
        """An older wheeld's marker: the last message after it went out, by id and seq."""
        digest_ = body.get("digest")
        if type(digest_) is str and len(digest_) == 43:
            self._past_seq(body.get("seq"), digest_, standing, move)
        move.next_game_id = self._past_game_id(game, standing.next_game_id)
        if body.get("event") in LAUNCHED and game >= standing.next_game_id:
            move.void = game  # left open, and the next game id now past it
        return move

    def _retained(self, payload: bytes, name: str, move: Move) -> dict[str, Any] | None:
        """A retained payload of this table's, as JSON; None (and a log line) for anything else."""
        try:
            # NaN and Infinity are Python's, not JSON: said again, they would go out so.
            body = json.loads(payload, parse_constant=_not_json)
        except (ValueError, RecursionError):
            why = "not JSON"
        else:
            if not isinstance(body, dict):
                why = "not a JSON object"
            elif body.get("table") != self.table:
                why = f"not this table's (table {str(body.get('table'))[:64]!r})"
            else:
                return body
        move.logs.append(("warning", f"broker's retained {name} ignored", {"why": why}))
        return None

    def _vouched(self, marker: dict[str, Any], move: Move) -> dict[str, Any] | None:
        """The game message a marker carries, when it is the one the marker names and this
        table vouches for it (a marker is retained state, and anyone allowed to publish
        there could forge one); else None, with one log line."""
        message = marker.get("message")
        why = None
        if not isinstance(message, dict):
            why = "it carries no message"
        elif (message.get("game_id"), message.get("event"), message.get("epoch")) != (
            marker.get("game_id"),
            marker.get("event"),
            marker.get("epoch"),
        ) or message.get("table") != self.table:
            why = "its message is not the one it names"
        elif self.signer is not None:
            why = signature_problem(message, self.signer.public_key)
            if why is None and (message.get("seq"), digest(message)) != (
                marker.get("seq"),
                marker.get("digest"),
            ):
                why = "its seq or digest is not its message's"
        elif "sig" in message:
            why = "a signed message at a table that signs nothing"
        if why is not None:
            move.logs.append(("warning", "broker's retained sequence ignored", {"why": why}))
            return None
        assert isinstance(message, dict)
        return message

    def _past_seq(self, seen: object, digest_: str, standing: Standing, move: Move) -> None:
        """The chain past ``seen`` (a seq the broker holds), from its ``digest_``."""
        if self.signer is None or type(seen) is not int:
            return
        if not standing.chain.seq <= seen <= LAST_CONTINUABLE:
            return
        move.chain = ChainState(seen + 1, digest_)
        move.chain_floor = (seen, digest_)
        move.seq_behind = (seen, seen + 1)

    @staticmethod
    def _past_game_id(seen: object, next_game_id: int) -> int | None:
        """The next game id past ``seen`` (a game id the broker holds), if it must move.

        A game in progress keeps its id; the next one takes the id after the broker's.
        """
        if type(seen) is not int or not 0 < seen <= LAST_CONTINUABLE:
            return None
        return seen + 1 if seen >= next_game_id else None


def _not_json(constant: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN, Infinity and -Infinity refused."""
    raise ValueError(f"{constant} is not JSON")


def _controller_restart(game_id: int, now: float) -> NoSpin:
    """A game another controller launched and no one ended: void, as in a restart."""
    return NoSpin(game_id, now, "controller_restart", ("controller_restart",))
