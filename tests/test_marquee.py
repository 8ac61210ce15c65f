"""The marquee in a real headless Chromium, fed by a real broker.

Screenshots of both layouts go to artifacts/ (kept by CI as test artifacts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.enums import CallbackAPIVersion

from tests import siege
from tests.test_publisher import BIG, publish_raw, until
from wheeld.config import load
from wheeld.followers.consumer import (
    DropCounter,
    Dropped,
    Follower,
    HistoryMessage,
    LatestResult,
    Message,
    NoMoreBetsMessage,
    ResultMessage,
    SpinningMessage,
    parse,
)
from wheeld.followers.marquee.app import Marquee
from wheeld.followers.marquee.board import HEAT_SHOWN, Board, statistics
from wheeld.followers.marquee.server import LIMITS, Hub, MarqueeServer
from wheeld.shell.http_server import Limits
from wheeld.shell.mqtt_client import MAX_PAYLOAD_BYTES
from wheeld.testing.rig import (
    Broker,
    DaemonProcess,
    PtyWheel,
    Subscriber,
    free_port,
    running,
    wait_for,
    write_config,
)

BASE = "wheeld/T9"
#: How long a test waits for what a board is sent or shows: a limit, never a measure.
WAIT_S = 10.0
ARTIFACTS = Path(__file__).parent.parent / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


# -- the board itself (pure) ----------------------------------------------------------


def message(kind: str, body: object) -> Message:
    return parse(BASE, "T9", f"{BASE}/{kind}", json.dumps(body).encode())


def test_board_starts_from_retained_history_and_follows_games() -> None:
    board = Board(base=BASE, language="en")
    board.apply(message("history", {"numbers": ["17", "0", "32"]}))
    board.apply(message("result", {"event": "result", "game_id": 3, "number": "17"}))
    assert board.snapshot()["last"] == {"number": "17", "color": "black"}
    board.apply(message("game", {"event": "spinning", "game_id": 4}))
    board.apply(message("game", {"event": "no_more_bets", "game_id": 4}))
    assert board.snapshot()["phase"] == "no_more_bets"
    result = {"event": "result", "game_id": 4, "number": "5", "table": "T9"}
    board.apply(message("game", result))
    board.apply(message("game", result))  # a repeat
    snap = board.snapshot()
    assert [n["number"] for n in snap["history"]] == ["5", "17", "0", "32"]
    assert snap["stats"]["games"] == 4 and snap["stats"]["red"] == 50


def test_results_published_again_in_any_order_are_not_new_numbers() -> None:
    """Redeliveries of games 1, 2, 1, 2 are two numbers, and the last stays game 2's."""
    board = Board(base=BASE, language="en")
    for game_id, number in [(1, "7"), (2, "5"), (1, "7"), (2, "5"), (1, "7")]:
        board.apply(message("game", {"event": "result", "game_id": game_id, "number": number}))
    snap = board.snapshot()
    assert [n["number"] for n in snap["history"]] == ["5", "7"]
    assert snap["last"] == {"number": "5", "color": "red"}
    board.apply(message("result", {"event": "result", "game_id": 3, "number": "9"}))
    board.apply(message("game", {"event": "result", "game_id": 3, "number": "9"}))
    assert [n["number"] for n in board.snapshot()["history"]] == ["5", "7"]  # history's own topic


def test_game_1_of_a_new_epoch_is_a_new_game() -> None:
    """A journal and the broker's memory lost: ids start again, in a new epoch."""
    board = Board(base=BASE, language="en")
    # Epochs as a journal makes them (16 URL-safe characters; the contract wants 11 at least).
    first, second = "epochAAAAAAAAAAA", "epochBBBBBBBBBBB"
    for epoch, number in [(first, "7"), (first, "7"), (second, "25")]:
        result = {"event": "result", "game_id": 1, "number": number, "epoch": epoch}
        board.apply(message("game", result))
    snap = board.snapshot()
    assert [n["number"] for n in snap["history"]] == ["25", "7"]
    assert snap["last"] == {"number": "25", "color": "red"}


def test_a_daemon_in_fault_is_not_shown_online() -> None:
    """``fault``: online but deciding no game (its journal cannot write)."""
    board = Board(base=BASE, language="en")
    board.apply(message("status", {"state": "online"}))
    assert board.snapshot()["online"] is True
    board.apply(message("status", {"state": "fault", "fault": "journal_unwritable"}))
    assert board.snapshot()["online"] is False


def test_no_spin_banner_shows_until_the_next_game() -> None:
    board = Board(base=BASE, language="es")
    board.apply(message("game", {"event": "no_spin", "game_id": 1, "reason": "foreign_object"}))
    assert board.snapshot()["no_spin"] == {
        "reason": "foreign_object",
        "text": "Objeto extraño en el cilindro",
    }
    board.apply(message("game", {"event": "spinning", "game_id": 2}))
    assert board.snapshot()["no_spin"] is None


def test_the_closed_screen_has_the_last_three_results_the_table_said() -> None:
    board = Board(base=BASE, language="es")
    closing = {"state": "closed", "last_numbers": ["17", "0", "32"], "table": "T9"}
    board.apply(message("table", closing))
    snap = board.snapshot()
    assert snap["closed"] is True
    assert snap["closed_numbers"] == [
        {"number": "17", "color": "black"},
        {"number": "0", "color": "green"},
        {"number": "32", "color": "red"},
    ]
    assert snap["labels"]["closed_last"] == "Últimas tiradas"
    board.apply(message("table", {"state": "open", "last_numbers": ["17", "0", "32"]}))
    assert board.snapshot()["closed"] is False
    # An older wheeld's close says no numbers: the closed screen is the words alone.
    board.apply(message("table", {"state": "closed"}))
    assert board.snapshot()["closed_numbers"] == []


def test_a_table_message_naming_a_number_the_wheel_has_not_is_dropped() -> None:
    body = json.dumps({"state": "closed", "last_numbers": ["00", "1", "2"]}).encode()
    with pytest.raises(Dropped, match="37-pocket wheel"):
        parse(BASE, "T9", f"{BASE}/table", body, 37)
    with pytest.raises(Dropped):
        message("table", {"state": "closed", "last_numbers": ["1", "2", "3", "4"]})


def test_the_name_is_shown_and_the_id_kept_for_staff(tmp_path: Path) -> None:
    from wheeld.followers.marquee.app import board_for

    named = tmp_path / "named.toml"
    named.write_text('[table]\nid = "DEMO-19748-79fa"\nname = "Ruleta 1"\n')
    assert board_for(load(named, signing_key=False)).snapshot()["table"] == {
        "id": "DEMO-19748-79fa",
        "name": "Ruleta 1",
        "limits": None,
    }
    unnamed = tmp_path / "unnamed.toml"
    unnamed.write_text('[table]\nid = "T4"\n')
    assert board_for(load(unnamed, signing_key=False)).snapshot()["table"]["name"] == "T4"


def test_board_is_offline_without_the_broker_or_the_daemon() -> None:
    board = Board(base=BASE, connected=False)
    assert board.snapshot()["online"] is False
    assert board.feed(True)
    assert board.snapshot()["online"] is None  # nothing said yet: not shown as offline
    board.apply(message("status", {"state": "online"}))
    assert board.snapshot()["online"] is True
    board.apply(message("status", {"state": "offline"}))
    assert board.snapshot()["online"] is False
    board.apply(message("status", {"state": "online"}))
    assert board.feed(False)
    assert board.snapshot()["online"] is False
    board.feed(True)
    assert board.snapshot()["online"] is None  # the daemon's word before the outage is stale


#: (topic, payload, what the drop reason says): every one must be dropped, none may crash.
MALFORMED: list[tuple[str, bytes, str]] = [
    ("game", b"", "empty"),
    ("result", b"", "empty"),  # a retained clear
    ("game", b"not json", "not JSON"),
    ("game", b"\xff\xfe{}", "not UTF-8"),
    ("game", b"[1, 2]", "JSON array"),
    ("game", b'"result"', "JSON string"),
    ("game", b"null", "JSON null"),
    ("game", b"{", "not JSON"),
    ("game", b"[" * 50_000, "nested"),
    ("game", b'{"event": "result", "game_id": 1, "number": NaN}', "NaN"),
    ("game", b"{" + b" " * 70_000 + b"}", "over"),
    ("game", b'{"event": "result", "game_id": 5, "number": "abc"}', "not a pocket"),
    ("game", b'{"event": "result", "game_id": 5, "number": "37"}', "not a pocket"),
    ("game", b'{"event": "result", "game_id": 5, "number": 17}', "number"),
    ("game", b'{"event": "result", "game_id": "5", "number": "17"}', "game_id"),
    ("game", b'{"event": "result", "game_id": true, "number": "17"}', "game_id"),
    ("game", b'{"event": "result", "game_id": 0, "number": "17"}', "game_id"),
    ("game", b'{"event": "result", "number": "17"}', "game_id"),
    ("game", b'{"event": "result", "game_id": 5}', "number"),
    ("game", b'{"event": "jackpot", "game_id": 5}', "event"),
    ("game", b'{"game_id": 5}', "event"),
    ("game", b'{"event": "no_spin", "game_id": 5}', "reason"),
    ("game", b'{"event": "result", "game_id": 5, "number": "8", "table": "T8"}', "T8"),
    ("game", b'{"event": "spinning", "game_id": 5, "table": 9}', "table"),
    ("result", b'{"event": "no_spin", "game_id": 5, "reason": "declared"}', "event"),
    ("history", b'{"numbers": ["1", "abc"]}', "not a pocket"),
    ("history", b'{"numbers": "1 2 3"}', "numbers"),
    ("history", b'{"numbers": [1, 2]}', "numbers"),
    ("status", b'{"state": "maybe"}', "state"),
    ("status", b'{"state": null}', "state"),
    ("status", b"{}", "state"),
    ("table", b'{"state": 1}', "state"),
]


@pytest.mark.parametrize(("kind", "payload", "why"), MALFORMED)
def test_malformed_messages_are_dropped_with_a_reason(kind: str, payload: bytes, why: str) -> None:
    with pytest.raises(Dropped, match=re.escape(why)) as dropped:
        parse(BASE, "T9", f"{BASE}/{kind}", payload)
    assert "\n" not in str(dropped.value) and len(str(dropped.value)) < 200


def test_payloads_that_are_not_bytes_and_foreign_topics_are_dropped() -> None:
    with pytest.raises(Dropped, match="not bytes"):
        parse(BASE, "T9", f"{BASE}/game", 17)
    with pytest.raises(Dropped, match="not a topic"):
        parse(BASE, "T9", "wheeld/T8/game", b'{"event": "spinning", "game_id": 1}')


class RecordingLog:
    """Stands in for a structlog logger: keeps every (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.lines.append(("debug", event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def error(self, event: str, **fields: Any) -> None:
        self.lines.append(("error", event, fields))

    def events(self, event: str) -> list[dict[str, Any]]:
        return [fields for _, name, fields in self.lines if name == event]


def test_drops_are_counted_and_logged_at_most_once_per_period() -> None:
    log = RecordingLog()
    now = [100.0]
    drops = DropCounter(log, every_s=10.0, clock=lambda: now[0])
    for _ in range(1000):
        drops.drop(f"{BASE}/game", "payload is not JSON")
    now[0] += 10.5
    drops.drop(f"{BASE}/game", "payload is not JSON")
    assert drops.total == 1001
    logged = log.events("message dropped")
    assert len(logged) == 2
    assert logged[1]["dropped_total"] == 1001 and logged[1]["not_logged_since_last"] == 999


def test_a_handler_that_fails_costs_one_message_not_the_feed(tmp_path: Path) -> None:
    config = load(write_config(tmp_path / "c.toml", port="unused", broker=1, state=tmp_path))
    log = RecordingLog()
    seen: list[Message] = []

    def handle(message: Message) -> None:
        if isinstance(message, SpinningMessage):
            raise RuntimeError("a bug")
        seen.append(message)

    follower = Follower(config, ("game",), handle, log)
    follower.deliver(f"{BASE}/game", b'{"event": "spinning", "game_id": 1}')
    follower.deliver(f"{BASE}/game", b'{"event": "no_more_bets", "game_id": 1}')
    assert [type(m) for m in seen] == [NoMoreBetsMessage]
    assert follower.drops.total == 1
    assert "RuntimeError: a bug" in log.events("message dropped")[0]["reason"]


def _follower(
    tmp_path: Path, environ: dict[str, str]
) -> tuple[Follower, list[Message], RecordingLog]:
    config = load(
        write_config(tmp_path / "c.toml", port="unused", broker=1, state=tmp_path), environ
    )
    seen: list[Message] = []
    log = RecordingLog()
    return Follower(config, ("game", "result", "history"), seen.append, log), seen, log


def _numbers(seen: list[Message]) -> list[str]:
    return [m.number for m in seen if isinstance(m, ResultMessage | LatestResult)]


def test_a_number_the_table_s_wheel_has_not_is_dropped(tmp_path: Path) -> None:
    follower, seen, log = _follower(tmp_path, {})

    def result(game_id: int, number: str) -> None:
        body = {"event": "result", "game_id": game_id, "number": number}
        follower.deliver(f"{BASE}/game", json.dumps(body).encode())

    result(1, "00")  # the wheel not known yet: any pocket of either wheel
    assert _numbers(seen) == ["00"] and follower.drops.total == 0
    follower.deliver(f"{BASE}/wheel", b'{"link": "up", "pockets": 37, "model": "SS2"}')
    assert follower.pockets == 37
    result(3, "00")  # spoofed on a single-zero table
    follower.deliver(f"{BASE}/result", b'{"event": "result", "game_id": 3, "number": "00"}')
    follower.deliver(f"{BASE}/history", b'{"numbers": ["5", "00"]}')
    result(4, "36")
    assert _numbers(seen) == ["00", "36"]
    assert follower.drops.total == 3
    (logged, *_) = log.events("message dropped")  # the rest counted, their lines rate-limited
    assert logged["reason"] == "'00' is not a pocket of this table's 37-pocket wheel"


def test_a_pinned_pocket_count_is_not_widened_by_the_wheel_topic(tmp_path: Path) -> None:
    follower, seen, _ = _follower(tmp_path, {"WHEELD_WHEEL__POCKETS": "37"})
    assert follower.pockets == 37
    follower.deliver(f"{BASE}/wheel", b'{"pockets": 38}')
    with pytest.raises(Dropped, match="'00' is not a pocket of this table's 37-pocket wheel"):
        parse(BASE, "T9", f"{BASE}/game", b'{"event": "result", "game_id": 1, "number": "00"}', 37)
    follower.deliver(f"{BASE}/game", b'{"event": "result", "game_id": 1, "number": "00"}')
    assert _numbers(seen) == [] and follower.drops.total == 1
    assert follower.pockets == 37


def test_a_double_zero_wheel_has_its_00(tmp_path: Path) -> None:
    follower, seen, _ = _follower(tmp_path, {})
    follower.deliver(f"{BASE}/wheel", b'{"pockets": 38}')
    follower.deliver(f"{BASE}/game", b'{"event": "result", "game_id": 1, "number": "00"}')
    assert _numbers(seen) == ["00"] and follower.drops.total == 0


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_a_follower_never_reads_a_payload_over_the_limit(
    tmp_path: Path, broker: Broker, protocol: str
) -> None:
    """MQTT 5: the broker never sends it (the follower's CONNECT asks for packets of at most
    MAX_PACKET_BYTES). MQTT 3.1.1: it arrives, and is dropped before it is parsed."""
    publish_raw(broker.port, BIG, f"{BASE}/result", retain=True)
    publish_raw(broker.port, b'{"numbers": ["5"]}', f"{BASE}/history", retain=True)
    config = load(
        write_config(tmp_path / "c.toml", port="unused", broker=broker.port, state=tmp_path),
        {"WHEELD_MQTT__PROTOCOL": f'"{protocol}"'},
    )
    seen: list[Message] = []
    log = RecordingLog()
    follower = Follower(config, ("result", "history"), seen.append, log)
    task = asyncio.create_task(follower.run())
    try:
        # Retained ones come in the order subscribed: the result's before the history's.
        async with asyncio.timeout(10):
            while not seen:
                await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [type(m) for m in seen] == [HistoryMessage]
    if protocol == "5":
        assert (follower.received, follower.drops.total) == (1, 0)
    else:
        assert (follower.received, follower.drops.total) == (2, 1)
        (dropped,) = log.events("message dropped")
        assert dropped["reason"] == f"payload of {len(BIG)} bytes, over {MAX_PAYLOAD_BYTES}"


# -- the marquee in this process, with a real broker -------------------------------------


@contextlib.contextmanager
def serving(marquee: Marquee) -> Iterator[Marquee]:
    """Runs the marquee's loop in a thread of its own, as ``wheeld marquee`` would."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(marquee.serve(stop),))
    thread.start()
    try:
        wait_for(lambda: marquee.server.port, 10, "the marquee listening")
        yield marquee
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)  # generous: a loaded machine (and a broker refusing it) is slow
        assert not thread.is_alive(), "the marquee did not stop within 60 s of being asked"
        loop.close()


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def board_state(port: int) -> dict[str, Any]:
    status, _, body = fetch(port, "/state")
    assert status == 200
    state: dict[str, Any] = json.loads(body)
    return state


@pytest.fixture
def in_process(tmp_path: Path, broker: Broker) -> Iterator[tuple[Marquee, RecordingLog]]:
    config = load(
        write_config(tmp_path / "c.toml", port="unused", broker=broker.port, state=tmp_path)
    )
    log = RecordingLog()
    with serving(Marquee(config, "127.0.0.1", 0, log)) as marquee:
        yield marquee, log


def test_a_flood_of_malformed_messages_then_a_good_result_shows_it(
    broker: Broker, in_process: tuple[Marquee, RecordingLog]
) -> None:
    marquee, log = in_process
    port = marquee.server.port
    wait_for(lambda: marquee.follower.connected, 10, "the marquee's broker connection")
    table = Table(broker)
    try:
        for kind, payload, _ in MALFORMED * 5:
            table.publish_raw(kind, payload)
        table.result(12, "26", ["26"])
        wait_for(
            lambda: (board_state(port)["last"] or {}).get("number") == "26", 10, "the good result"
        )
    finally:
        table.close()
    assert marquee.follower.drops.total == len(MALFORMED) * 5
    assert [n["number"] for n in board_state(port)["history"]] == ["26"]
    assert len(log.events("message dropped")) == 1  # rate-limited: one line, all counted


def test_the_retained_wheel_is_known_before_the_retained_result_is_checked(
    tmp_path: Path, broker: Broker
) -> None:
    table = Table(broker)
    try:
        table.publish("wheel", {"link": "up", "pockets": 37}, retain=True)
        table.result(7, "00", ["00", "5"])  # spoofed, retained
        config = load(
            write_config(tmp_path / "c.toml", port="unused", broker=broker.port, state=tmp_path)
        )
        with serving(Marquee(config, "127.0.0.1", 0, RecordingLog())) as marquee:
            port = marquee.server.port
            wait_for(lambda: marquee.follower.drops.total >= 2, 10, "the retained 00 dropped")
            table.result(8, "26", ["26", "5"])
            wait_for(lambda: (board_state(port)["last"] or {}).get("number") == "26", 10, "26")
            # The history is a topic of its own: it may come after the result (found
            # beside another suite), so it is waited for, not asserted at once.
            wait_for(
                lambda: [n["number"] for n in board_state(port)["history"]] == ["26", "5"],
                10,
                "the history 26, 5",
            )
            # The retained result and history with the 00: neither ever shown.
            assert marquee.follower.drops.total == 2
    finally:
        table.close()


def test_offline_without_the_broker_and_back_when_it_returns(
    broker: Broker, in_process: tuple[Marquee, RecordingLog]
) -> None:
    marquee, _ = in_process
    port = marquee.server.port
    wait_for(lambda: board_state(port)["online"] is None, 10, "connected, status unknown")
    table = Table(broker)
    table.publish("status", {"state": "online"}, retain=True)
    wait_for(lambda: board_state(port)["online"] is True, WAIT_S, "the daemon online")
    table.publish("status", {"state": "offline"}, retain=True)
    wait_for(lambda: board_state(port)["online"] is False, WAIT_S, "the daemon's last will")
    table.publish("status", {"state": "online"}, retain=True)
    wait_for(lambda: board_state(port)["online"] is True, WAIT_S, "the daemon back")
    table.close()

    broker.stop()
    wait_for(lambda: board_state(port)["online"] is False, 10, "offline without a broker")
    broker.start()
    wait_for(lambda: marquee.follower.connected, 15, "the marquee to reconnect")
    table = Table(broker)
    try:
        table.publish("status", {"state": "online"}, retain=True)
        wait_for(lambda: board_state(port)["online"] is True, WAIT_S, "online again")
        table.result(13, "8", ["8"])
        eight = {"number": "8", "color": "black"}
        wait_for(lambda: board_state(port)["last"] == eight, WAIT_S, "8")
    finally:
        table.close()


# -- the web server facing a hostile network ---------------------------------------------


class ServedBoard:
    """A MarqueeServer on an event loop of its own, in a thread, for tests that block."""

    def __init__(self, port: int = 0, *, limits: Limits = LIMITS) -> None:
        self.hub = Hub()
        self.log = RecordingLog()
        self.server = MarqueeServer(self.hub, "127.0.0.1", port, log=self.log, limits=limits)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._on_loop(self.server.start())

    def _on_loop(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    @property
    def port(self) -> int:
        return self.server.port

    def publish(self, snapshot: dict[str, Any]) -> None:
        async def publish() -> None:
            self.hub.publish(snapshot)

        self._on_loop(publish())

    def stop(self) -> None:
        self._on_loop(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


#: The real limits, but for a head deadline of 1 s (10 s in service), to keep tests short.
QUICK = dataclasses.replace(LIMITS, head_timeout_s=1.0)
#: For the tests that show a client served while a siege holds the server: the siege is
#: cut at the head deadline, so the client must be served before it. These tests once
#: asserted "served in under 1 s" (1.5 s): a measure a busy machine can miss; now the
#: order of events is asserted, with a deadline that leaves a busy machine room.
SIEGE = dataclasses.replace(LIMITS, head_timeout_s=5.0)


@pytest.fixture
def server() -> Iterator[ServedBoard]:
    board = ServedBoard(limits=QUICK)
    board.publish({"last": None})
    yield board
    board.stop()


def test_half_sent_requests_neither_block_others_nor_stay() -> None:
    server = ServedBoard(limits=SIEGE)
    server.publish({"last": None})
    try:
        _half_sent_requests_neither_block_others_nor_stay(server)
    finally:
        server.stop()


def _half_sent_requests_neither_block_others_nor_stay(server: ServedBoard) -> None:
    half_open = []
    for _ in range(200):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: marquee\r\n")  # never the blank line
        half_open.append(sock)
    dripper = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    started = time.monotonic()
    status, _, _ = fetch(server.port, "/state")
    assert status == 200
    # Served before the head deadline freed a single slot: not by waiting the siege out.
    assert server.server.http.dropped["head_late"] == 0

    def cut_off(sock: socket.socket) -> bool:
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True

    # A client sending a byte now and then, well inside any one read's
    # timeout, is still cut off at the request deadline.
    drip_until = time.monotonic() + SIEGE.head_timeout_s + 30  # a limit, not a measure
    dripped_out = False
    while not dripped_out and time.monotonic() < drip_until:
        try:
            dripper.sendall(b"X")
        except (BrokenPipeError, ConnectionResetError):
            dripped_out = True
        else:
            time.sleep(0.2)  # the drip itself, not a wait for a condition
    # Cut at the deadline, never before it: a drip now and then does not put it off.
    assert dripped_out and time.monotonic() - started > 0.9 * SIEGE.head_timeout_s
    for sock in half_open:
        sock.settimeout(WAIT_S)
        assert cut_off(sock)
        sock.close()
    dripper.close()
    wait_for(lambda: server.server.http.connections == 0, WAIT_S, "every slot back")


def test_five_hundred_clients_at_once_are_all_served(server: ServedBoard) -> None:
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(500)]
    try:
        for sock in clients:
            sock.sendall(b"GET /state HTTP/1.0\r\n\r\n")
        for sock in clients:
            with sock.makefile("rb") as answer:
                assert answer.readline().startswith(b"HTTP/1.1 200")
    finally:
        for sock in clients:
            sock.close()


def test_head_returns_the_headers_only(server: ServedBoard) -> None:
    status, headers, body = fetch(server.port, "/", "HEAD")
    _, _, page = fetch(server.port, "/")
    assert status == 200 and body == b""
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert int(headers["Content-Length"]) == len(page) > 0
    status, headers, body = fetch(server.port, "/events", "HEAD")
    assert status == 200 and body == b"" and headers["Content-Type"] == "text/event-stream"
    assert fetch(server.port, "/nowhere", "HEAD")[::2] == (404, b"")
    wait_for(
        lambda: server.server.http.connections == 0,
        WAIT_S,
        "no slot kept: HEAD /events is no stream",
    )


@pytest.mark.parametrize(
    "request_",
    [
        b"HEAD /events HTTP/1.0\r\n\r\n",
        b"HEAD /events HTTP/1.1\r\nHost: m\r\nConnection: keep-alive\r\n\r\n",
        b"GET /state HTTP/1.1\r\nHost: m\r\nConnection: keep-alive\r\n\r\n",
        b"HEAD / HTTP/1.1\r\nHost: m\r\n\r\n",
        b"GET /nowhere HTTP/1.1\r\nHost: m\r\nConnection: keep-alive\r\n\r\n",
    ],
)
def test_every_answer_but_a_stream_closes_its_connection(
    server: ServedBoard, request_: bytes
) -> None:
    """A kept connection would carry a second request with no deadline (found by attack:
    HEAD /events, then a byte every 20 s, held a thread per socket)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S) as sock:
        sock.sendall(request_)
        answer = b""
        while chunk := sock.recv(4096):  # b"": the server closed; a kept one times out
            answer += chunk
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert b"\r\nconnection: close" in head and b"keep-alive" not in head


@pytest.mark.parametrize(
    "path",
    [
        "/../app.py",
        "/static/../app.py",
        "/%2e%2e/%2e%2e/etc/passwd",
        "//etc/passwd",
        "/..%2fapp.py",
    ],
)
def test_nothing_but_the_page_is_served(server: ServedBoard, path: str) -> None:
    assert fetch(server.port, path)[0] == 404


def _events(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /events HTTP/1.0\r\n\r\n")
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a browser tab killed mid-transfer does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_early_disconnects_leave_no_traceback(
    server: ServedBoard, capfd: pytest.CaptureFixture[str]
) -> None:
    big = {"history": ["x" * 1000] * 2000}  # a snapshot bigger than any socket buffer
    server.publish(big)
    for _ in range(20):
        stream = _events(server.port)
        stream.recv(10)
        _reset(stream)
        page = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        page.sendall(b"GET /state HTTP/1.0\r\n\r\n")
        _reset(page)
        half = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        half.sendall(b"GET /marq")
        _reset(half)
    server.publish({"last": "after the resets"})
    wait_for(lambda: fetch(server.port, "/state")[2].find(b"after the resets") > 0, WAIT_S, "state")
    streams = [_events(server.port) for _ in range(2)]
    try:
        assert all(s.recv(4096).startswith(b"HTTP/1.1 200") for s in streams)
    finally:
        for sock in streams:
            sock.close()
    wait_for(lambda: server.server.http.connections == 0, WAIT_S, "every slot back")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err
    assert not server.log.events("marquee request failed")


# -- the same, on the test's own loop: a thousand connections and more


async def _read_until(reader: asyncio.StreamReader, marker: bytes, timeout: float) -> bytes:
    """What the stream sent, up to and including ``marker``; fails after ``timeout``."""
    async with asyncio.timeout(timeout):
        return await reader.readuntil(marker)


async def _board_stream(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    writer.write(b"GET /events HTTP/1.1\r\nHost: board\r\nAccept: text/event-stream\r\n\r\n")
    await writer.drain()
    return reader, writer


async def test_the_board_is_served_beside_slowloris_idle_and_non_reading_streams() -> None:
    """Found: 220 event streams that never read filled the 200 stream slots and the board
    got 503; 8 slowloris connections and 1,000 idle ones held the rest. Now they make
    room: the page and the board's own stream are served at once."""
    hub = Hub()
    hub.publish({"last": None})
    log = RecordingLog()
    server = MarqueeServer(hub, "127.0.0.1", 0, log=log, limits=SIEGE)
    sockets: list[socket.socket] = []
    with siege.descriptors(SIEGE.descriptors + 2048):
        await server.start()
        port = server.port
        try:
            # Each from an address of its own: each is a peer of its own to the server.
            events = b"GET /events HTTP/1.1\r\nHost: m\r\n\r\n"
            sockets += await siege.not_reading(port, 220, events, source="127.0.0.2")
            sockets += await siege.idle(port, 1000, source="127.0.0.3")
            drippers = siege.Drippers(port, 8, b"GET / HTTP/1.1\r\nX-Slow: ")
            assert server.http.connections <= SIEGE.max_connections

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: board\r\n\r\n")
            page = await _read_until(reader, b"</html>", WAIT_S)
            assert page.startswith(b"HTTP/1.1 200 OK")
            writer.close()
            reader, writer = await _board_stream(port)
            opening = await _read_until(reader, b"\n\n", WAIT_S)
            assert opening.startswith(b"HTTP/1.1 200 OK") and b'data: {"last":null}' in opening
            hub.publish({"last": "17"})
            assert await _read_until(reader, b"\n\n", WAIT_S) == b'data: {"last":"17"}\n\n'
            # Served while the siege held: nothing cut at its deadline yet, not waited out.
            assert drippers.cut_after == [] and server.http.dropped["head_late"] == 0

            cut = await drippers.all_cut(timeout=SIEGE.head_timeout_s + 30)
            # Cut at the head deadline, never before it.
            assert len(cut) == 8 and all(after > 0.9 * SIEGE.head_timeout_s for after in cut), cut
            hub.publish({"last": "5"})  # the board's stream outlived all of it
            assert await _read_until(reader, b"\n\n", WAIT_S) == b'data: {"last":"5"}\n\n'
            writer.close()
        finally:
            for sock in sockets:
                sock.close()
            await server.stop()
    assert server.http.dropped["made_room_idle"] >= 1000 + 220 - SIEGE.max_connections
    assert not log.events("marquee request failed")


async def test_when_streams_hold_every_slot_the_crowded_peer_gives_way() -> None:
    """Streams look alike until they fill up: the newcomer takes the slot of the peer
    holding the most (a flood from one address makes room out of its own)."""
    hub = Hub()
    hub.publish({"last": None})
    limits = dataclasses.replace(QUICK, max_connections=8)
    server = MarqueeServer(hub, "127.0.0.1", 0, log=RecordingLog(), limits=limits)
    await server.start()
    flood: list[socket.socket] = []
    events = b"GET /events HTTP/1.1\r\nHost: m\r\n\r\n"
    try:
        flood += await siege.not_reading(server.port, 8, events, source="127.0.0.2")
        reader, writer = await _board_stream(server.port)
        assert b"data: " in await _read_until(reader, b"\n\n", WAIT_S)
        # The flood comes again and again: every newcomer displaces one of its own.
        for _ in range(3):
            flood += await siege.not_reading(server.port, 8, events, source="127.0.0.2")
        hub.publish({"last": "26"})
        assert await _read_until(reader, b"\n\n", WAIT_S) == b'data: {"last":"26"}\n\n'
        assert server.http.connections == 8
        assert server.http.dropped["made_room_crowded"] == 25
        writer.close()
    finally:
        for sock in flood:
            sock.close()
        await server.stop()


@pytest.mark.parametrize("why", ["high_water", "deadline"])
async def test_a_stream_that_does_not_read_is_dropped(why: str) -> None:
    """What a board does not take piles up in our buffer (its kernel buffer is kept small):
    past the high-water mark when the next snapshot comes, or unsent for the write
    deadline, the stream is cut off. A board that reads, beside it, is not."""
    hub = Hub()
    hub.publish({"last": None})
    if why == "high_water":
        limits = dataclasses.replace(QUICK, write_timeout_s=30.0)
    else:
        limits = dataclasses.replace(QUICK, write_timeout_s=0.5, stream_high_water_bytes=1 << 30)
    server = MarqueeServer(hub, "127.0.0.1", 0, log=RecordingLog(), limits=limits)
    await server.start()
    events = b"GET /events HTTP/1.1\r\nHost: m\r\n\r\n"
    (stuck,) = await siege.not_reading(server.port, 1, events, receive_buffer=4096)
    reader, writer = await _board_stream(server.port)
    try:
        await _read_until(reader, b"\n\n", WAIT_S)
        big = {"history": ["x" * 1000] * 300}  # 300 KB: more than both kernel buffers
        for _ in range(3):
            hub.publish(big)
            await _read_until(reader, b"\n\n", WAIT_S)  # the board reads every one
        # Not read until it is dropped: reading it would make it a reader.
        await until(lambda: server.http.dropped["not_reading"], "the stream dropped", WAIT_S)
        assert await siege.closed(stuck, timeout=WAIT_S)
        assert server.http.dropped == {"not_reading": 1}
        hub.publish({"last": "9"})
        assert await _read_until(reader, b"\n\n", WAIT_S) == b'data: {"last":"9"}\n\n'
        writer.close()
    finally:
        stuck.close()
        await server.stop()


# -- in the browser -----------------------------------------------------------------------

pytestmark_browser = pytest.mark.skipif(
    not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists(),
    reason="Debian chromium and chromium-driver are not installed",
)


class Table:
    def __init__(self, broker: Broker) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2)
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()

    def publish(self, topic: str, payload: dict[str, Any], retain: bool = False) -> None:
        self.client.publish(
            f"{BASE}/{topic}", json.dumps(payload), qos=1, retain=retain
        ).wait_for_publish(5)

    def publish_raw(self, topic: str, payload: bytes, retain: bool = False) -> None:
        self.client.publish(f"{BASE}/{topic}", payload, qos=1, retain=retain).wait_for_publish(5)

    def result(self, game_id: int, number: str, history: list[str]) -> None:
        body = {"event": "result", "game_id": game_id, "table": "T9", "number": number}
        self.publish("game", body)
        self.publish("result", body, retain=True)
        self.publish("history", {"numbers": history}, retain=True)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _marquee(config: Path, port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheeld",
            "marquee",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "marquee.log").open("ab"),
    )
    import socket

    def listening() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, 10, "the marquee server")
    return process


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1920,1080",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _testid(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'[data-testid="{name}"]')


def _history(driver: Any) -> list[str]:
    # Read in one script, not element by element: the board redraws the strip as
    # messages arrive, and an element found before a redraw is stale after it.
    texts: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll("
        '\'[data-testid="history"] [data-testid="history-number"]\''
        ")).map((el) => el.innerText.trim());"
    )
    return texts


@pytestmark_browser
def test_marquee_in_chromium(tmp_path: Path, broker: Broker, browser: Any) -> None:
    config = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
        marquee='[marquee]\nlanguage = "es"\n',
    )
    config.write_text(
        config.read_text().replace(
            'id = "T9"',
            'id = "T9"\nname = "Ruleta 9"\nmin_bet = 5\nmax_bet = 500\ncurrency = "EUR"',
        )
    )
    table = Table(broker)
    table.result(7, "17", ["17", "0", "32"])
    table.publish("status", {"state": "online"}, retain=True)
    port = free_port()
    marquee = _marquee(config, port, tmp_path)
    try:
        browser.get(f"http://127.0.0.1:{port}/")
        wait_for(lambda: _testid(browser, "last-number").text == "17", 30, "the retained result")
        assert _history(browser) == ["17", "0", "32"]

        # Live: pushed over the event stream, not polled. The limits are for a machine
        # busy with other suites; a page that polled would still miss its chance here.
        table.result(8, "5", ["5", "17", "0", "32"])
        wait_for(lambda: _testid(browser, "last-number").text == "5", 10, "a live result")
        assert _history(browser) == ["5", "17", "0", "32"]
        assert _testid(browser, "phase").text == "HAGAN JUEGO"

        table.publish("game", {"event": "spinning", "game_id": 9})
        table.publish("game", {"event": "no_more_bets", "game_id": 9})
        wait_for(lambda: _testid(browser, "phase").text == "NO VA MÁS", 10, "no more bets")
        assert not _testid(browser, "no-spin").is_displayed()
        table.publish(
            "game",
            {
                "event": "no_spin",
                "game_id": 9,
                "reason": "foreign_object",
                "reasons": ["foreign_object"],
            },
        )
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), 10, "the no-spin banner")
        assert "TIRADA NULA" in _testid(browser, "no-spin").text
        assert "Objeto extraño" in _testid(browser, "no-spin").text
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "marquee-no-spin-1920x1080.png"))
        table.publish("game", {"event": "spinning", "game_id": 10})
        wait_for(lambda: not _testid(browser, "no-spin").is_displayed(), 10, "banner cleared")
        table.result(10, "32", ["32", "5", "17", "0", "32"])
        wait_for(lambda: _testid(browser, "last-number").text == "32", 10, "result 32")
        browser.save_screenshot(str(ARTIFACTS / "marquee-1920x1080.png"))
        browser.set_window_size(1080, 1920)
        time.sleep(0)  # layout follows the resize on the next frame
        wait_for(
            lambda: browser.execute_script("return innerHeight > innerWidth"),
            5,
            "the portrait window",
        )
        browser.save_screenshot(str(ARTIFACTS / "marquee-1080x1920.png"))
        browser.set_window_size(1920, 1080)

        marquee.terminate()
        marquee.wait(10)
        marquee = _marquee(config, port, tmp_path)
        table.result(11, "26", ["26", "32", "5", "17", "0", "32"])
        wait_for(
            lambda: _testid(browser, "last-number").text == "26",
            10,
            "the page to recover after the server restarted",
        )
    finally:
        marquee.terminate()
        marquee.wait(10)
        table.close()


@pytestmark_browser
def test_marquee_shows_offline_when_the_daemon_dies(
    tmp_path: Path, broker: Broker, browser: Any
) -> None:
    pty = PtyWheel(tmp_path / "wheel0")
    config = write_config(
        tmp_path / "c.toml",
        port=tmp_path / "wheel0",
        broker=broker.port,
        state=tmp_path / "state",
        marquee='[marquee]\nlanguage = "en"\n',
    )
    daemon = DaemonProcess(config, tmp_path)
    port = free_port()
    marquee = _marquee(config, port, tmp_path)
    try:
        with running(daemon):
            watcher = Subscriber(broker.port, f"{BASE}/status")
            watcher.wait(
                f"{BASE}/status", lambda p: isinstance(p, dict) and p.get("state") == "online"
            )
            watcher.close()
            browser.get(f"http://127.0.0.1:{port}/")
            wait_for(
                lambda: (
                    not _testid(browser, "offline").is_displayed()
                    and _testid(browser, "phase").text == "PLACE YOUR BETS"
                ),
                10,
                "online",
            )
            daemon.kill()
            wait_for(lambda: _testid(browser, "offline").is_displayed(), 10, "offline")
            assert _testid(browser, "offline").text == "WHEEL OFFLINE"
            ARTIFACTS.mkdir(exist_ok=True)
            browser.save_screenshot(str(ARTIFACTS / "marquee-offline.png"))
    finally:
        marquee.terminate()
        marquee.wait(10)
        pty.close()


# -- the board's statistics (pure) --------------------------------------------------------


def _heat(stats: dict[str, Any], key: str) -> list[tuple[str, int]]:
    return [(n["number"], n["count"]) for n in stats[key]]


def test_hot_and_cold_wait_for_the_minimum_sample() -> None:
    """Four games (0 twice): no hot, no cold, just how many games they wait for."""
    stats = statistics(["0", "17", "0", "5"], min_games=37)
    assert stats["hot"] == [] and stats["cold"] == []
    assert stats["heat_after"] == 37
    assert stats["games"] == 4 and stats["green"] == 50 and stats["red"] == 25
    assert statistics([], min_games=37) == {"games": 0, "hot": [], "cold": [], "heat_after": 37}


def test_hot_and_cold_are_drawn_numbers_with_their_counts_never_both() -> None:
    numbers = ["0"] * 4 + ["17"] * 3 + ["5"] * 2 + ["32"] * 2 + ["9"] * 2 + ["1"] * 1 + ["2"]
    stats = statistics(numbers, min_games=len(numbers))
    assert stats["heat_after"] is None
    assert _heat(stats, "hot") == [("0", 4), ("17", 3), ("5", 2), ("32", 2), ("9", 2)]
    # 1 and 2 drawn once; the 30 never-drawn numbers are neither hot nor cold.
    assert _heat(stats, "cold") == [("2", 1), ("1", 1)]
    assert stats["hot"][0]["color"] == "green" and stats["hot"][1]["color"] == "black"


def test_ties_go_to_the_newest_for_hot_and_the_oldest_for_cold() -> None:
    # Newest first: 8 and 3 drawn twice (8 more recently), 4 6 7 once (7 longest ago).
    numbers = ["8", "3", "4", "8", "3", "6", "7"]
    stats = statistics(numbers, min_games=1)
    assert [n for n, _ in _heat(stats, "hot")][:2] == ["8", "3"]
    # Five hot: 8, 3, then 4 and 6 and 7 by recency; nothing left below a count of 1.
    assert _heat(stats, "hot") == [("8", 2), ("3", 2), ("4", 1), ("6", 1), ("7", 1)]
    assert stats["cold"] == []
    numbers = ["8", "8", "3", "3", "4", "4", "5", "5", "6", "6", "11", "12", "13"]
    assert _heat(statistics(numbers, min_games=1), "cold") == [("13", 1), ("12", 1), ("11", 1)]


def test_a_number_drawn_as_often_as_a_hot_one_is_not_cold() -> None:
    numbers = [str(n) for n in range(1, 11)]  # ten numbers, once each
    stats = statistics(numbers, min_games=10)
    assert len(stats["hot"]) == HEAT_SHOWN and stats["cold"] == []


def test_double_zero_counts_as_a_zero_and_can_be_hot() -> None:
    stats = statistics(["00", "00", "0", "1", "2", "3", "4", "5", "6", "7"], min_games=10)
    assert stats["green"] == 30 and stats["red"] + stats["black"] == 70
    assert _heat(stats, "hot")[0] == ("00", 2)
    assert stats["hot"][0]["color"] == "green"
    assert stats["odd"] + stats["even"] == 70 and stats["low"] + stats["high"] == 70


def test_percentages_of_every_even_chance_dozen_and_column() -> None:
    stats = statistics(["1", "2", "3", "13", "25", "36", "0", "19"], min_games=37)
    assert (stats["red"], stats["black"], stats["green"]) == (62, 25, 12)
    assert (stats["odd"], stats["even"]) == (62, 25)
    assert (stats["low"], stats["high"]) == (50, 38)
    assert stats["dozens"] == [38, 25, 25]
    assert stats["columns"] == [50, 12, 25]


def test_the_board_takes_its_statistics_over_the_window_only() -> None:
    board = Board(base=BASE, shown=5, stats_games=40, stats_min_games=37)
    for game_id in range(1, 51):
        number = "36" if game_id <= 10 else str(game_id % 3 + 1)  # 36 only before the window
        board.apply(message("game", {"event": "result", "game_id": game_id, "number": number}))
    stats = board.snapshot()["stats"]
    assert stats["games"] == 40 and stats["dozens"] == [100, 0, 0]
    assert "36" not in [n for n, _ in _heat(stats, "hot") + _heat(stats, "cold")]
    assert len(board.snapshot()["history"]) == 5


def test_a_minimum_above_the_window_means_the_whole_window() -> None:
    board = Board(base=BASE, stats_games=10, stats_min_games=37)
    for game_id in range(1, 11):
        board.apply(message("game", {"event": "result", "game_id": game_id, "number": "7"}))
    assert _heat(board.snapshot()["stats"], "hot") == [("7", 10)]


@given(
    st.lists(st.sampled_from([str(n) for n in range(37)] + ["00"]), max_size=200),
    st.integers(min_value=1, max_value=60),
)
def test_heat_rules_hold_for_any_series(numbers: list[str], min_games: int) -> None:
    stats = statistics(numbers, min_games)
    hot, cold = _heat(stats, "hot"), _heat(stats, "cold")
    if len(numbers) < min_games:
        assert hot == cold == [] and stats["heat_after"] == min_games
        return
    assert not {n for n, _ in hot} & {n for n, _ in cold}
    assert all(numbers.count(n) == count >= 1 for n, count in hot + cold)
    assert len(hot) <= HEAT_SHOWN and len(cold) <= HEAT_SHOWN
    if hot and cold:
        assert min(c for _, c in hot) > max(c for _, c in cold)
    if numbers:
        assert max(numbers.count(n) for n in numbers) == hot[0][1]
        assert stats["red"] + stats["black"] + stats["green"] in (99, 100, 101)


# -- the board rules in the browser, at every screen ---------------------------------------

SCREENS = ((1920, 1080), (1366, 768), (1080, 1920))
DOCS = Path(__file__).parent.parent / "docs"


def _rect(driver: Any, name: str) -> dict[str, float]:
    rect: dict[str, float] = driver.execute_script(
        'const r = document.querySelector(`[data-testid="${arguments[0]}"]`)'
        ".getBoundingClientRect();"
        "return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};",
        name,
    )
    return rect


def _on_top_at_centre(driver: Any, name: str) -> bool:
    """Whether the element named is what the viewer sees in the middle of the screen."""
    return bool(
        driver.execute_script(
            "const el = document.elementFromPoint(innerWidth / 2, innerHeight / 2);"
            'return !!el && !!el.closest(`[data-testid="${arguments[0]}"]`);',
            name,
        )
    )


def _inside_viewport(driver: Any, rect: dict[str, float]) -> bool:
    width, height = driver.execute_script("return [innerWidth, innerHeight]")
    return bool(
        rect["left"] >= 0
        and rect["top"] >= 0
        and rect["right"] <= width
        and rect["bottom"] <= height
    )


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["right"] <= b["left"]
        or b["right"] <= a["left"]
        or a["bottom"] <= b["top"]
        or b["bottom"] <= a["top"]
    )


def _resize(driver: Any, width: int, height: int) -> None:
    # The window's outer size is not its viewport: emulate the screen exactly.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    wait_for(
        lambda: driver.execute_script("return [innerWidth, innerHeight]") == [width, height],
        5,
        f"a {width}x{height} window",
    )


def _wait_text(driver: Any, name: str, text: str, timeout: float = 10) -> None:
    wait_for(lambda: _testid(driver, name).text == text, timeout, f"{name} to read {text}")


def _screens(driver: Any, case: str, shot: tuple[int, int] | None = None) -> Iterator[str]:
    """Resizes to each screen in turn, yielding its name.

    Saves ``docs/marquee-<case>-<w>x<h>.png`` at the ``shot`` screen, after its checks.
    """
    for width, height in SCREENS:
        _resize(driver, width, height)
        yield f"{width}x{height}"
        if (width, height) == shot:
            driver.save_screenshot(str(DOCS / f"marquee-{case}-{width}x{height}.png"))


@pytestmark_browser
def test_offline_closed_and_no_spin_rules_at_every_screen(
    tmp_path: Path, broker: Broker, browser: Any
) -> None:
    configs = {}
    for language in ("es", "en"):
        configs[language] = write_config(
            tmp_path / f"{language}.toml",
            port=tmp_path / "wheel0",
            broker=broker.port,
            state=tmp_path / "state",
            marquee=f'[marquee]\nlanguage = "{language}"\n',
        )
    table = Table(broker)
    # A retained result but no word from the daemon yet.
    table.result(7, "17", ["17", "0", "32"])
    ports = {language: free_port() for language in configs}
    marquees = [_marquee(configs[lang], ports[lang], tmp_path) for lang in configs]
    words = {
        "es": ("RULETA FUERA DE LÍNEA", "HAGAN JUEGO", "MESA CERRADA", "TIRADA NULA"),
        "en": ("WHEEL OFFLINE", "PLACE YOUR BETS", "TABLE CLOSED", "NO SPIN"),
    }
    try:
        for language in ("en", "es"):
            offline, bets_open, _, _ = words[language]
            browser.get(f"http://127.0.0.1:{ports[language]}/")
            # The page says offline from its first paint; wait for the board itself,
            # which has the retained numbers but no word from the daemon.
            wait_for(lambda: _history(browser) == ["17", "0", "32"], 10, "the board")
            _wait_text(browser, "offline", offline)
            shot = (1920, 1080) if language == "es" else None
            for screen in _screens(browser, f"offline-{language}", shot):
                assert _on_top_at_centre(browser, "offline"), screen
                assert bets_open not in browser.find_element("tag name", "body").text, screen

        table.publish("status", {"state": "online"}, retain=True)
        wait_for(lambda: _testid(browser, "phase").text == "HAGAN JUEGO", WAIT_S, "online")
        assert not _testid(browser, "offline").is_displayed()

        # Closed, then a no-spin while closed: the closed screen stays over everything,
        # with the last three results <base>/table carries.
        closing = {"state": "closed", "last_numbers": ["17", "0", "32"]}
        table.publish("table", closing, retain=True)
        wait_for(lambda: _testid(browser, "closed-title").text == "MESA CERRADA", WAIT_S, "closed")
        numbers = _testid(browser, "closed-numbers").find_elements("tag name", "li")
        assert [(n.text, n.get_attribute("class")) for n in numbers] == [
            ("17", "black"),
            ("0", "green"),
            ("32", "red"),
        ]
        assert "Últimas tiradas" in _testid(browser, "closed").text
        # The id for staff, small, in the corner, over the closed screen too.
        assert _testid(browser, "table-id").text == "Mesa T9"
        assert _rect(browser, "table-id")["top"] < 0.03 * browser.execute_script(
            "return innerHeight"
        )
        table.publish("game", {"event": "no_spin", "game_id": 8, "reason": "foreign_object"})
        wait_for(lambda: board_state(ports["es"])["no_spin"] is not None, WAIT_S, "the no-spin")
        for screen in _screens(browser, "closed-es", (1080, 1920)):
            assert _on_top_at_centre(browser, "closed"), screen
            assert _rect(browser, "closed")["bottom"] >= browser.execute_script(
                "return innerHeight"
            )
            assert not _testid(browser, "no-spin").is_displayed(), screen

        # Open again: the banner shows, under the last number, never over it.
        table.publish("table", {"state": "open"}, retain=True)
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), WAIT_S, "the banner")
        assert not _testid(browser, "closed").is_displayed()
        for screen in _screens(browser, "no-spin-es", (1366, 768)):
            last, banner = _rect(browser, "last-number"), _rect(browser, "no-spin")
            assert _inside_viewport(browser, last), screen
            assert _inside_viewport(browser, banner), screen
            assert not _overlap(last, banner), screen
            assert _testid(browser, "last-number").text == "17"
            assert "TIRADA NULA" in _testid(browser, "no-spin").text

        # The same rules in English: closed full screen, the banner beside the number.
        browser.get(f"http://127.0.0.1:{ports['en']}/")
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), 10, "the English banner")
        for screen in _screens(browser, "no-spin-en", (1920, 1080)):
            last, banner = _rect(browser, "last-number"), _rect(browser, "no-spin")
            assert not _overlap(last, banner) and _inside_viewport(browser, last), screen
            assert "NO SPIN" in _testid(browser, "no-spin").text
        table.publish("table", closing, retain=True)
        wait_for(lambda: _testid(browser, "closed-title").text == "TABLE CLOSED", WAIT_S, "closed")
        assert "Last spins" in _testid(browser, "closed").text
        for screen in _screens(browser, "closed-en", (1366, 768)):
            assert _on_top_at_centre(browser, "closed"), screen
    finally:
        for marquee in marquees:
            marquee.terminate()
            marquee.wait(10)
        table.close()


# -- contrast ------------------------------------------------------------------------------


def _css_colors() -> dict[str, str]:
    css = (Path(__file__).parent.parent / "wheeld/followers/marquee/static/marquee.css").read_text()
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{3,6})\b", css))


def _luminance(hex_color: str) -> float:
    """WCAG 2 relative luminance of ``#rgb`` or ``#rrggbb``."""
    digits = hex_color.lstrip("#")
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    channels = [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_formula_matches_the_wcag_extremes() -> None:
    assert contrast("#000", "#fff") == pytest.approx(21)
    assert contrast("#777", "#777") == pytest.approx(1)


@pytest.mark.parametrize("chip", ["red", "black", "green"])
def test_every_number_is_readable_on_its_chip(chip: str) -> None:
    colors = _css_colors()
    assert contrast(colors["chip-text"], colors[chip]) >= 4.5


def test_board_text_is_readable_and_black_chips_stand_out_from_the_board() -> None:
    colors = _css_colors()
    for text in ("fg", "gold"):
        assert contrast(colors[text], colors["bg"]) >= 4.5, text
    # A black chip is told from the board by its light edge (WCAG non-text, 3:1).
    assert contrast(colors["black-edge"], colors["bg"]) >= 3
    assert contrast(colors["black-edge"], colors["black"]) >= 3
