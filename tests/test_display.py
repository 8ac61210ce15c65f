"""The passive display driver on a real pty: two-character lines, and reconnection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.rig import Broker, PtyWheel, wait_for, write_config
from wheeld.display import display_line

BASE = "wheeld/T9"


def test_display_lines_are_two_characters_right_justified() -> None:
    assert display_line("7") == b" 7\r\n"
    assert display_line("17") == b"17\r\n"
    assert display_line("00") == b"00\r\n"


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    broker = Broker(tmp_path)
    broker.start()
    yield broker  # type: ignore[misc]
    broker.stop()


def test_display_writes_each_new_number_and_survives_a_replug(
    tmp_path: Path, broker: Broker
) -> None:
    board = PtyWheel(tmp_path / "display")
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "unused", broker=broker.port, state=tmp_path / "state"
    )
    client = paho.Client(paho.CallbackAPIVersion.VERSION2)
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
        result(2, "5")
        wait_for(lambda: heard(b"17\r\n 5\r\n"), 5, "a new number")
        result(2, "5")  # the same game again: not a new number
        result(3, "0")
        wait_for(lambda: heard(b" 0\r\n"), 5, "the next number")
        assert received == b"17\r\n 5\r\n 0\r\n"
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
