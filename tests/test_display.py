"""The passive display driver on a real pty: two-character lines, and reconnection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.test_marquee import MALFORMED
from wheeld.config import load
from wheeld.followers.consumer import Follower
from wheeld.followers.display import BLANK_LINE, Display, display_line
from wheeld.testing.rig import Broker, PtyWheel, wait_for, write_config

BASE = "wheeld/T9"


def test_display_lines_are_two_characters_right_justified() -> None:
    assert display_line("7") == b" 7\r\n"
    assert display_line("17") == b"17\r\n"
    assert display_line("00") == b"00\r\n"


class WrittenLink:
    """Stands in for the display's port: keeps every line written."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)


def test_display_blanks_while_the_feed_is_gone_and_ignores_garbage(tmp_path: Path) -> None:
    config = load(write_config(tmp_path / "c.toml", port="unused", broker=1, state=tmp_path))
    link = WrittenLink()
    display = Display(link)
    follower = Follower(config, ("status", "result", "game"), display.on_message, WrittenLog())

    def deliver(kind: str, payload: bytes) -> None:
        follower.deliver(f"{BASE}/{kind}", payload)

    display.on_up()
    assert link.lines == [BLANK_LINE]  # nothing current before the broker is reached
    display.on_feed(True)
    deliver("result", b'{"event": "result", "game_id": 4, "number": "17"}')
    for kind, payload, _ in MALFORMED:
        deliver(kind, payload)
    assert follower.drops.total == len(MALFORMED)
    deliver("game", b'{"event": "result", "game_id": 5, "number": "5"}')
    assert link.lines[1:] == [b"17\r\n", b" 5\r\n"]
    del link.lines[:]
    deliver("status", b'{"state": "offline"}')
    deliver("game", b'{"event": "result", "game_id": 6, "number": "0"}')  # a late publish
    deliver("status", b'{"state": "online"}')
    display.on_feed(False)
    display.on_up()  # the port replugged while the broker is away
    display.on_feed(True)
    assert link.lines == [BLANK_LINE, b" 0\r\n", BLANK_LINE, BLANK_LINE, b" 0\r\n"]


class WrittenLog:
    """Swallows log lines: what is dropped is counted by the follower."""

    def info(self, event: str, **fields: object) -> None:
        pass

    def warning(self, event: str, **fields: object) -> None:
        pass


def test_display_writes_each_new_number_and_survives_a_replug(
    tmp_path: Path, broker: Broker
) -> None:
    board = PtyWheel(tmp_path / "display")
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "unused", broker=broker.port, state=tmp_path / "state"
    )
    client = paho.Client(CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()

    def result(game_id: int, number: str) -> None:
        body = json.dumps({"event": "result", "game_id": game_id, "number": number})
        client.publish(f"{BASE}/result", body, qos=1, retain=True).wait_for_publish(5)
        client.publish(f"{BASE}/game", body, qos=1).wait_for_publish(5)

    result(1, "17")  # retained: shown at start
    display = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wheeld",
            "display",
            "--config",
            str(config),
            "--port",
            str(tmp_path / "display"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "display.log").open("ab"),
    )
    received = b""

    def heard(expected: bytes) -> bool:
        nonlocal received
        received += board.read()
        return expected in received

    try:
        wait_for(lambda: heard(b"17\r\n"), 10, "the retained number")
        for kind, payload, _ in MALFORMED:
            client.publish(f"{BASE}/{kind}", payload, qos=1).wait_for_publish(5)
        result(2, "5")
        wait_for(lambda: heard(b"17\r\n 5\r\n"), 5, "a new number")
        result(2, "5")  # the same game again: not a new number
        result(3, "0")
        wait_for(lambda: heard(b" 0\r\n"), 5, "the next number")
        # Blank until the broker is reached, then each number once.
        assert received == BLANK_LINE + b"17\r\n 5\r\n 0\r\n"
        board.close()  # unplugged...
        board.open()  # ...and back: the display gets the number again
        received = b""
        wait_for(lambda: heard(b" 0\r\n"), 15, "the number after the replug")
        result(4, "36")
        wait_for(lambda: heard(b"36\r\n"), 5, "a number after the replug")
    finally:
        display.terminate()
        display.wait(10)
        client.loop_stop()
        board.close()


def test_display_shows_no_number_the_wheel_has_not_nor_a_game_again(tmp_path: Path) -> None:
    """A spoofed "00" on a 37-pocket table, and results published again out of turn."""
    config = load(write_config(tmp_path / "c.toml", port="unused", broker=1, state=tmp_path))
    link = WrittenLink()
    display = Display(link)
    follower = Follower(config, ("status", "result", "game"), display.on_message, WrittenLog())
    display.on_feed(True)

    def result(game_id: int, number: str) -> None:
        body = {"event": "result", "game_id": game_id, "number": number}
        follower.deliver(f"{BASE}/game", json.dumps(body).encode())

    follower.deliver(f"{BASE}/wheel", b'{"link": "up", "pockets": 37}')
    result(1, "7")
    result(2, "00")
    result(3, "5")
    result(1, "7")
    result(3, "5")
    assert link.lines == [b" 7\r\n", b" 5\r\n"]
    assert follower.drops.total == 1
