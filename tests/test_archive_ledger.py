"""The archive's judgement, pure: verdicts, chains, gaps, epochs, trust and recall, with no
database and no broker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wheeld.archive.audit import EpochAudit, StoredMessage
from wheeld.archive.ledger import Ledger
from wheeld.archive.records import (
    BAD_SIGNATURE,
    CHAIN_BREAK,
    UNKNOWN_KEY,
    UNSIGNED,
    VERIFIED,
    Outcome,
    Received,
    Settings,
    base_of,
)
from wheeld.core.signing import ChainState, Signer, chain

SIGNER = Signer.generate()
PATTERNS = ("wheeld/+",)


class Table:
    """Signed, chained messages of one table and epoch, as wheeld makes them."""

    def __init__(self, table: str = "T1", epoch: str = "E1", signer: Signer = SIGNER) -> None:
        self.table, self.epoch, self.signer = table, epoch, signer
        self.state = ChainState()
        self.game = 0

    def message(self, event: str = "result", **members: Any) -> dict[str, Any]:
        if event in ("spinning", "result") and not members.pop("same_game", False):
            self.game += 1
        body = {
            "event": event,
            "game_id": self.game,
            "table": self.table,
            "ts": "2026-03-04T05:06:07.000Z",
            "epoch": self.epoch,
            **members,
        }
        signed, self.state = chain(body, self.state, self.signer)
        return signed

    def messages(self, n: int) -> list[dict[str, Any]]:
        return [self.message("result", number=str(i % 37)) for i in range(n)]


def received(
    payload: dict[str, Any] | bytes,
    topic: str = "wheeld/T1/game",
    at: float = 1000.0,
    source: str = "live",
) -> Received:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return Received(topic, data, at, source)


def ledger(**settings: Any) -> Ledger:
    return Ledger(Settings(PATTERNS, **settings), {"T1": [SIGNER.public_key]})


def verdicts(out: Outcome) -> list[tuple[int, str]]:
    return [(g.seq, g.verdict) for g in out.games]


def feed_all(book: Ledger, payloads: list[dict[str, Any]], **kw: Any) -> Outcome:
    total = Outcome()
    for payload in payloads:
        total.extend(book.feed(received(payload, **kw)))
    return total


def codes(out: Outcome) -> list[str]:
    return [alarm.code for alarm in out.alarms]


def test_a_chain_verifies_message_by_message() -> None:
    book = ledger()
    out = feed_all(book, Table().messages(5))
    assert verdicts(out) == [(s, VERIFIED) for s in range(1, 6)]
    assert out.alarms == [] and book.open_gaps() == []
    assert out.games[0].number == "0" and out.games[0].day == "2026-03-04"
    assert out.bases == {"T1": "wheeld/T1"}


def test_a_redelivery_is_kept_once() -> None:
    book = ledger()
    sent = Table().messages(3)
    feed_all(book, sent)
    again = book.feed(received(sent[1]))
    assert again.games == [] and again.duplicates == 1


def test_a_bad_signature_is_kept_flagged_and_alarmed_and_moves_no_chain() -> None:
    book = ledger()
    table = Table()
    first, second = table.messages(2)
    forged = {**second, "number": "0"}
    out = feed_all(book, [first, forged, second])
    assert verdicts(out) == [(1, VERIFIED), (2, BAD_SIGNATURE), (2, VERIFIED)]
    assert codes(out) == [BAD_SIGNATURE]
    assert out.alarms[0].payload()["seq"] == 2


def test_an_unknown_key_and_an_unsigned_message_are_flagged() -> None:
    book = ledger()
    stranger = Table(signer=Signer.generate()).messages(1)[0]
    unsigned = {k: v for k, v in Table().messages(1)[0].items() if k not in ("kid", "sig")}
    out = feed_all(book, [stranger, unsigned])
    assert [g.verdict for g in out.games] == [UNKNOWN_KEY, UNSIGNED]
    assert codes(out) == [UNKNOWN_KEY, UNSIGNED]


def test_alarms_of_a_kind_are_held_back_then_counted() -> None:
    book = ledger()
    stranger = Table(signer=Signer.generate())
    out = Outcome()
    for i, payload in enumerate(stranger.messages(5)):
        out.extend(book.feed(received(payload, at=1000.0 + i)))
    out.extend(book.feed(received(stranger.messages(1)[0], at=1100.0)))
    assert codes(out) == [UNKNOWN_KEY, UNKNOWN_KEY]
    assert out.alarms[1].payload()["held_back"] == 4
    assert len(out.games) == 6  # every one kept all the same


def test_a_wrong_prev_is_a_chain_break() -> None:
    book = ledger()
    table = Table()
    first = table.message()
    table.state = ChainState(2, "A" * 43)  # a table whose chain went astray
    out = feed_all(book, [first, table.message()])
    assert verdicts(out) == [(1, VERIFIED), (2, CHAIN_BREAK)]
    assert out.games[1].why == "prev does not name seq 1"


def test_a_second_different_message_with_a_seq_held_is_a_chain_break() -> None:
    book = ledger()
    sent = Table().messages(2)
    fork = Table()
    fork.state, fork.game = ChainState(2, sent[1]["prev"]), 1
    other = fork.message("result", number="36")  # signed by the table's key, seq 2 again
    out = feed_all(book, [*sent, other])
    assert verdicts(out) == [(1, VERIFIED), (2, VERIFIED), (2, CHAIN_BREAK)]
    assert out.games[-1].why == "a second, different message with seq 2"
    assert codes(out) == [CHAIN_BREAK]


def test_a_gap_is_kept_with_its_ends_and_filled_by_recall() -> None:
    book = ledger(recall_games=10)
    sent = Table().messages(6)
    out = feed_all(book, [sent[0], sent[1], sent[4], sent[5]])
    [gap] = book.open_gaps()
    assert (gap.first, gap.last, gap.before_game, gap.after_game) == (3, 4, 2, 5)
    assert codes(out) == ["gap"]
    requests, _ = book.due_recalls(1000.0)
    assert requests == []  # a late message gets its moment first
    [request] = book.due_recalls(1010.0)[0]
    assert (request.base, request.game_id, request.last) == ("wheeld/T1", 5, 4)
    reply = json.dumps(
        {
            "ok": True,
            "correlation_id": request.correlation_id,
            "games": [
                {"game_id": p["game_id"], "events": [p], "messages": [p], "frames": []}
                for p in sent
            ],
        }
    ).encode()
    table, epoch, messages = book.recalled(request.correlation_id, reply) or ("", "", [])
    assert (table, epoch, len(messages)) == ("T1", "E1", 6)
    before = book.missing("T1", "E1")
    filled = Outcome()
    for payload in messages:
        seq = json.loads(payload)["seq"]
        if book.in_gap("T1", "E1", seq):
            filled.extend(book.feed(Received("wheeld/T1/game", payload, 1011.0, "recall")))
    filled.extend(book.answered(request.correlation_id, reply, before, 1011.0))
    assert verdicts(filled) == [(3, VERIFIED), (4, VERIFIED)]
    assert {g.source for g in filled.games} == {"recall"}
    assert book.open_gaps() == [] and codes(filled) == ["gap_filled"]
    # What the table said is kept as it said it: the same JSON object.
    assert json.loads(filled.games[0].payload) == sent[2]


def test_a_filler_that_does_not_link_is_a_chain_break() -> None:
    book = ledger()
    sent = Table().messages(3)
    feed_all(book, [sent[0], sent[2]])
    impostor_table = Table()
    impostor_table.state = ChainState(2, "B" * 43)
    out = book.feed(received(impostor_table.messages(1)[0]))
    assert verdicts(out) == [(2, CHAIN_BREAK)]


def test_a_gap_the_table_cannot_fill_is_given_up_and_stays_listed() -> None:
    book = ledger(recall_attempts=2, recall_timeout_s=5)
    sent = Table().messages(4)
    feed_all(book, [sent[0], sent[3]])
    [request] = book.due_recalls(1010.0)[0]
    reply = json.dumps({"ok": True, "games": [], "correlation_id": request.correlation_id})
    before = book.missing("T1", "E1")
    out = book.answered(request.correlation_id, reply.encode(), before, 1011.0)
    [gap] = book.open_gaps()
    assert gap.state == "unfillable" and "no longer holds" in (gap.why or "")
    assert codes(out) == ["gap_unfillable"]
    assert book.due_recalls(5000.0)[0] == []  # not asked again


@pytest.mark.parametrize(
    "error",
    [
        "/var/lib/wheeld/T1/journal.sqlite3: no game 3 in the journal",
        "/var/lib/wheeld/T1/journal.sqlite3: game 3 was superseded: decided here but never"
        " announced; another controller's game 3 stands",
    ],
)
def test_a_table_that_says_it_has_no_such_game_is_given_up_at_once(error: str) -> None:
    """The daemon's refusal begins with its journal's path: matched at the start only, it
    never matched, and the gap was asked again and again before it was given up."""
    book = ledger(recall_attempts=5, recall_timeout_s=5)
    sent = Table().messages(4)
    feed_all(book, [sent[0], sent[3]])
    [request] = book.due_recalls(1010.0)[0]
    reply = json.dumps({"ok": False, "error": error, "correlation_id": request.correlation_id})
    out = book.answered(request.correlation_id, reply.encode(), book.missing("T1", "E1"), 1011.0)
    [gap] = book.open_gaps()
    assert gap.state == "unfillable" and codes(out) == ["gap_unfillable"], gap


def test_a_table_that_never_answers_is_asked_again_then_given_up() -> None:
    book = ledger(recall_attempts=2, recall_timeout_s=5)
    sent = Table().messages(3)
    feed_all(book, [sent[0], sent[2]])
    assert len(book.due_recalls(1010.0)[0]) == 1
    requests, out = book.due_recalls(1016.0)
    assert requests == [] and book.open_gaps()[0].attempts == 1
    assert len(book.due_recalls(1100.0)[0]) == 1
    _, out = book.due_recalls(1200.0)
    assert codes(out) == ["gap_unfillable"]
    assert "did not answer" in (book.open_gaps()[0].why or "")


def test_a_new_epoch_is_not_a_gap() -> None:
    book = ledger()
    first = Table(epoch="E1")
    feed_all(book, first.messages(3))
    restarted = Table(epoch="E2")  # journal and broker lost: from 1 again
    out = feed_all(book, restarted.messages(2))
    assert verdicts(out) == [(1, VERIFIED), (2, VERIFIED)]
    assert book.open_gaps() == [] and codes(out) == []


def test_a_handover_links_to_the_epoch_it_went_on_from() -> None:
    book = ledger()
    first = Table(epoch="E1")
    feed_all(book, first.messages(3))
    successor = Table(epoch="E2")
    successor.state = first.state  # went on after the broker's marker
    out = feed_all(book, successor.messages(2))
    assert verdicts(out) == [(4, VERIFIED), (5, VERIFIED)]
    assert book.epochs[("T1", "E2")].after_epoch == "E1"
    assert book.open_gaps() == []


def test_an_older_epoch_whose_end_was_missed_has_a_gap_there() -> None:
    book = ledger()
    first = Table(epoch="E1")
    sent = first.messages(5)
    feed_all(book, sent[:2])
    successor = Table(epoch="E2")
    successor.state = first.state
    feed_all(book, successor.messages(1))
    [gap] = book.open_gaps()
    assert (gap.epoch, gap.first, gap.last) == ("E1", 3, 5)
    out = feed_all(book, sent[2:])
    assert verdicts(out) == [(3, VERIFIED), (4, VERIFIED), (5, VERIFIED)]
    assert book.open_gaps() == []


def test_trust_on_first_use_pins_the_info_key_and_flags_a_change() -> None:
    book = Ledger(Settings(PATTERNS, trust_on_first_use=True))
    table = Table()
    early = book.feed(received(table.message()))
    assert [g.verdict for g in early.games] == [UNKNOWN_KEY] and early.alarms == []
    info = SIGNER.sign(
        {"table": "T1", "signing": {"kid": SIGNER.kid, "public_key": SIGNER.public_pem().decode()}}
    )
    out = book.feed(received(info, topic="wheeld/T1/info"))
    assert [p.kid for p in out.pins] == [SIGNER.kid] and codes(out) == ["key_pinned"]
    assert out.sides[0].verdict == VERIFIED
    assert verdicts(book.feed(received(table.message()))) == [(2, VERIFIED)]
    other = Signer.generate()
    changed = other.sign(
        {"table": "T1", "signing": {"kid": other.kid, "public_key": other.public_pem().decode()}}
    )
    out = book.feed(received(changed, topic="wheeld/T1/info"))
    assert codes(out) == ["key_changed"] and out.pins == []
    assert out.sides[0].verdict == UNKNOWN_KEY


def test_a_message_judged_again_once_its_key_is_pinned() -> None:
    book = Ledger(Settings(PATTERNS, trust_on_first_use=True))
    sent = Table().messages(2)
    feed_all(book, sent)
    info = SIGNER.sign(
        {"table": "T1", "signing": {"kid": SIGNER.kid, "public_key": SIGNER.public_pem().decode()}}
    )
    book.feed(received(info, topic="wheeld/T1/info"))
    again = Received("wheeld/T1/game", json.dumps(sent[0]).encode(), 1000.0, stored_id=7)
    out = book.feed(again)
    assert [(g.verdict, g.stored_id) for g in out.games] == [(VERIFIED, 7)]


def test_what_is_no_message_is_rejected_with_one_reason() -> None:
    book = ledger()
    cases = {
        b"\xff\xfe": "payload is not UTF-8",
        b"[1]": "payload is not a JSON object",
        b'{"table": "T1", "table": "T2"}': "member 'table' appears twice",
        b'{"table": "T1", "event": "result", "game_id": 1}': "no seq",
        b"not json": "payload is not JSON",
    }
    for payload, reason in cases.items():
        out = book.feed(received(payload))
        assert out.games == [] and reason in out.rejects[0].reason, payload
    assert book.feed(received(b"{}", topic="elsewhere/T1/game")).rejects


def test_a_long_past_seq_is_looked_up() -> None:
    book = ledger()
    sent = Table().messages(1100)
    feed_all(book, sent)
    out = book.feed(received(sent[5]))
    assert out.lookup is not None and out.lookup.seq == 6
    assert book.feed(received(sent[5]), stored=[_digest(sent[5])]).duplicates == 1
    other = book.feed(received(sent[5]), stored=["C" * 43])
    assert verdicts(other) == [(6, CHAIN_BREAK)]


def _digest(payload: dict[str, Any]) -> str:
    from wheeld.core.signing import digest

    return digest(payload)


def test_topics_match_patterns_level_by_level() -> None:
    assert base_of("wheeld/T1/game", ["wheeld/+"]) == ("wheeld/T1", "game")
    assert base_of("casino/floor/T1/info", ["casino/+/+"]) == ("casino/floor/T1", "info")
    assert base_of("wheeld/a/b/game", ["wheeld/+"]) is None


def test_the_audit_tells_an_altered_message_from_a_known_gap() -> None:
    sent = Table().messages(5)
    audit = EpochAudit("T1", "E1", [SIGNER.public_key], gaps=[(3, 3)])
    for i, payload in enumerate(sent):
        if i == 2:
            continue
        audit.feed(StoredMessage(i, i + 1, VERIFIED, json.dumps(payload)))
    assert audit.findings == [] and audit.known == 1
    altered = EpochAudit("T1", "E1", [SIGNER.public_key])
    for i, payload in enumerate(sent):
        text = json.dumps({**payload, "number": "36"} if i == 3 else payload)
        altered.feed(StoredMessage(i, i + 1, VERIFIED, text))
    assert len(altered.findings) == 1 and "bad signature" in altered.findings[0]


def test_statistics_belong_to_the_table_of_their_base_topic() -> None:
    """A table's <base>/stats names no table: the base topic's table is its own."""
    book = ledger()
    feed_all(book, Table().messages(1))
    out = book.feed(received(b'{"games": 1}', topic="wheeld/T1/stats"))
    assert [(s.kind, s.table) for s in out.sides] == [("stats", "T1")]
    unseen = book.feed(received(b'{"games": 1}', topic="wheeld/T7/stats"))
    assert [s.table for s in unseen.sides] == ["T7"]


def test_a_nul_character_is_rejected_not_a_batch_the_database_refuses() -> None:
    """PostgreSQL's text holds no NUL: such a message is kept as rejected bytes instead."""
    payload = {**Table().messages(1)[0], "number": "1\u0000"}
    out = ledger().feed(received(payload))
    assert out.games == [] and "NUL" in out.rejects[0].reason


def test_a_time_with_no_utc_date_is_no_time() -> None:
    payload = {**Table().messages(1)[0], "ts": "0001-01-01T00:00:00+14:00"}
    out = ledger().feed(received(payload))
    assert out.games[0].ts is None and out.games[0].day == "1970-01-01"


def test_a_clock_set_back_holds_no_alarm_back() -> None:
    book = ledger()
    stranger = Table(signer=Signer.generate())
    out = book.feed(received(stranger.messages(1)[0], at=5000.0))
    out.extend(book.feed(received(stranger.messages(1)[0], at=1400.0)))  # an hour back
    out.extend(book.feed(received(stranger.messages(1)[0], at=1410.0)))
    assert codes(out) == [UNKNOWN_KEY, UNKNOWN_KEY]  # the second said, the third held back


def test_a_clock_set_back_holds_no_recall_back() -> None:
    book = ledger(recall_timeout_s=5)
    sent = Table().messages(5)
    feed_all(book, [sent[0], sent[2]], at=5000.0)
    assert len(book.due_recalls(5010.0)[0]) == 1  # asked; then the clock goes an hour back
    assert book.due_recalls(1410.0)[0] == []  # still waiting for that answer ...
    _, out = book.due_recalls(1416.0)  # ... for recall_timeout_s, no more
    assert codes(out) == [] and book.open_gaps()[0].attempts == 1
    assert len(book.due_recalls(1416.0 + 10)[0]) == 1  # asked again after its backoff
    feed_all(book, [sent[4]], at=1500.0)  # a new gap, found in the clock's past
    assert len(book.due_recalls(1506.0)[0]) == 1
