"""The marquee in a real headless Chromium, fed by a real broker.

Screenshots of both layouts go to artifacts/ (kept by CI as test artifacts).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest

from tests.rig import (
    Broker,
    DaemonProcess,
    PtyWheel,
    Subscriber,
    free_port,
    running,
    wait_for,
    write_config,
)
from wheeld.marquee.board import Board

BASE = "wheeld/T9"
ARTIFACTS = Path(__file__).parent.parent / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


# -- the board itself (pure) ----------------------------------------------------------


def test_board_starts_from_retained_history_and_follows_games() -> None:
    board = Board(base=BASE, language="en")
    board.apply(f"{BASE}/history", {"numbers": ["17", "0", "32"]})
    board.apply(f"{BASE}/result", {"game_id": 3, "number": "17"})
    assert board.snapshot()["last"] == {"number": "17", "color": "black"}
    board.apply(f"{BASE}/game", {"event": "spinning", "game_id": 4})
    board.apply(f"{BASE}/game", {"event": "no_more_bets", "game_id": 4})
    assert board.snapshot()["phase"] == "no_more_bets"
    board.apply(f"{BASE}/game", {"event": "result", "game_id": 4, "number": "5"})
    board.apply(f"{BASE}/game", {"event": "result", "game_id": 4, "number": "5"})  # a repeat
    snap = board.snapshot()
    assert [n["number"] for n in snap["history"]] == ["5", "17", "0", "32"]
    assert snap["stats"]["games"] == 4 and snap["stats"]["red"] == 50


def test_no_spin_banner_shows_until_the_next_game() -> None:
    board = Board(base=BASE, language="es")
    board.apply(f"{BASE}/game", {"event": "no_spin", "game_id": 1, "reason": "foreign_object"})
    assert board.snapshot()["no_spin"] == {
        "reason": "foreign_object",
        "text": "Objeto extraño en el cilindro",
    }
    board.apply(f"{BASE}/game", {"event": "spinning", "game_id": 2})
    assert board.snapshot()["no_spin"] is None


# -- in the browser -----------------------------------------------------------------------

pytestmark_browser = pytest.mark.skipif(
    not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists(),
    reason="Debian chromium and chromium-driver are not installed",
)


class Table:
    def __init__(self, broker: Broker) -> None:
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2)
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()

    def publish(self, topic: str, payload: dict[str, Any], retain: bool = False) -> None:
        self.client.publish(
            f"{BASE}/{topic}", json.dumps(payload), qos=1, retain=retain
        ).wait_for_publish(5)

    def result(self, game_id: int, number: str, history: list[str]) -> None:
        body = {"event": "result", "game_id": game_id, "table": "T9", "number": number}
        self.publish("game", body)
        self.publish("result", body, retain=True)
        self.publish("history", {"numbers": history}, retain=True)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


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
    from selenium.webdriver.common.by import By

    return [
        el.text
        for el in driver.find_elements(
            By.CSS_SELECTOR, '[data-testid="history"] [data-testid="history-number"]'
        )
    ]


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

        started = time.monotonic()
        table.result(8, "5", ["5", "17", "0", "32"])
        wait_for(lambda: _testid(browser, "last-number").text == "5", 1.0, "a live result")
        assert time.monotonic() - started < 1.0
        assert _history(browser) == ["5", "17", "0", "32"]
        assert _testid(browser, "phase").text == "HAGAN JUEGO"

        table.publish("game", {"event": "spinning", "game_id": 9})
        table.publish("game", {"event": "no_more_bets", "game_id": 9})
        wait_for(lambda: _testid(browser, "phase").text == "NO VA MÁS", 2.0, "no more bets")
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
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), 2.0, "the no-spin banner")
        assert "TIRADA NULA" in _testid(browser, "no-spin").text
        assert "Objeto extraño" in _testid(browser, "no-spin").text
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "marquee-no-spin-1920x1080.png"))
        table.publish("game", {"event": "spinning", "game_id": 10})
        wait_for(lambda: not _testid(browser, "no-spin").is_displayed(), 2.0, "banner cleared")
        table.result(10, "32", ["32", "5", "17", "0", "32"])
        wait_for(lambda: _testid(browser, "last-number").text == "32", 2.0, "result 32")
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
            watcher.wait(f"{BASE}/status", lambda p: p == {"state": "online"})
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
