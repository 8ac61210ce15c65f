"""The public rig's configuration serves any installed driver, not only WRP/1; its
pytest fixtures run a real daemon on a pty against a broker."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from wheeld.config import load
from wheeld.drivers.wrp import encode
from wheeld.testing.fixtures import TableFactory
from wheeld.testing.golden import golden_pairs, regenerate, replay_output
from wheeld.testing.rig import Broker, NotifySocket, PtyWheel, running, wait_for, write_config


def test_the_fixtures_run_a_table_on_a_pty_wheel_against_a_broker(
    broker: Broker, pty_wheel: PtyWheel, table: TableFactory
) -> None:
    wheel = table(broker, pty_wheel.link, driver="wrp")
    assert load(wheel.config, {}).wheel.port == str(pty_wheel.link)
    with running(wheel.daemon):
        wheel.subscriber.wait(f"{wheel.base}/status", lambda said: said["state"] == "online")
        # The daemon asks the head who it is (WRP/1's QRY) on the pty it opened.
        asked = bytearray()

        def queried() -> bool:
            asked.extend(pty_wheel.read())
            return b"$WRQRY" in asked

        wait_for(queried, 30, "the daemon's QRY")
        pty_wheel.write(encode("HEL", 0, 0, "37", "Ref", "1.0", "SN1"))
        wheel.subscriber.wait(f"{wheel.base}/wheel", lambda said: said.get("model") == "Ref")


def test_write_config_names_the_driver_asked_for(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml", port="/dev/null", broker=1883, state=tmp_path / "s", driver="wrp"
    )
    assert load(config, {}).wheel.driver == "wrp"
    other = write_config(
        tmp_path / "d.toml", port="/dev/null", broker=1883, state=tmp_path / "s", driver="acme"
    )
    assert '[wheel]\ndriver = "acme"\n' in other.read_text(encoding="utf-8")


def test_write_config_defaults_to_the_reference_driver(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", port="/dev/null", broker=1883, state=tmp_path / "s")
    assert load(config, {}).wheel.driver == "wrp"


def test_golden_regenerate_writes_then_keeps_a_captures_output(tmp_path: Path) -> None:
    source = Path(__file__).parent / "captures" / "wrp" / "double-zero.cap"
    capture = tmp_path / "double-zero.cap"
    capture.write_bytes(source.read_bytes())
    expected = capture.with_suffix(".expected.jsonl")
    assert regenerate([tmp_path]) == [expected]
    assert expected.read_text(encoding="utf-8") == source.with_suffix(".expected.jsonl").read_text(
        encoding="utf-8"
    )
    assert regenerate([tmp_path]) == []  # nothing changed: nothing rewritten
    assert golden_pairs([tmp_path]) == [(capture, expected)]
    assert replay_output(capture) == expected.read_text(encoding="utf-8")


def test_ready_at_is_the_time_the_ready_datagram_arrived(tmp_path: Path) -> None:
    """Not the end of a quiet spell after it (what ``messages`` waits for)."""
    notify = NotifySocket(tmp_path / "notify.sock")
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sender.sendto(b"STATUS=starting", str(notify.path))
        sent = time.monotonic()
        sender.sendto(b"READY=1\nSTATUS=online", str(notify.path))
        sender.sendto(b"STATUS=after", str(notify.path))
        arrived = notify.ready_at(5)
        assert sent <= arrived <= time.monotonic()
        # It returned on READY, without reading on until the socket fell quiet.
        assert notify.received == ["STATUS=starting", "READY=1\nSTATUS=online"]
        assert notify.messages()[-1] == "STATUS=after"
    finally:
        sender.close()
        notify.close()


def test_ready_at_says_what_it_waited_for_when_ready_never_comes(tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    try:
        with pytest.raises(AssertionError, match="waiting for READY"):
            notify.ready_at(0.1)
    finally:
        notify.close()
