"""The board's strip of last numbers, and the rules' counts in its words.

The strip: one vertical column, newest on top, red numbers in the left lane,
black in the right, zeros centred, as many as fit whole, never pushed by a
long table name nor over the big last number; checked in headless Chromium at
every screen, in Spanish and English, with screenshots in docs/.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.test_marquee import (  # the browser machinery of the board's own tests
    BASE,
    DOCS,
    SCREENS,
    Table,
    _inside_viewport,
    _marquee,
    _overlap,
    _rect,
    _resize,
    _testid,
    browser,  # noqa: F401  (a fixture)
    message,
    pytestmark_browser,
)
from wheeld.config import load
from wheeld.followers.marquee.app import board_for
from wheeld.followers.marquee.board import Board
from wheeld.followers.marquee.labels import REASONS, reason_text
from wheeld.testing.rig import Broker, free_port, wait_for, write_config

# -- the rules' counts in the board's words (pure) ----------------------------------------


def _no_spin_text(board: Board, reason: str = "insufficient_revolutions") -> str:
    board.apply(message("game", {"event": "no_spin", "game_id": 1, "reason": reason}))
    text: str = board.snapshot()["no_spin"]["text"]
    return text


@pytest.mark.parametrize(
    ("language", "says"),
    [("es", "La bola no dio el mínimo de 5 vueltas"), ("en", "the minimum 5 turns")],
)
def test_the_no_spin_reason_names_the_table_s_minimum_revolutions(language: str, says: str) -> None:
    text = _no_spin_text(Board(base=BASE, language=language, min_ball_revolutions=5))
    assert says in text and "3" not in text and "tres" not in text and "three" not in text
    assert "3" in _no_spin_text(Board(base=BASE, language=language))  # the regulations' floor


def test_every_reason_reads_whole_in_both_languages() -> None:
    """No template is left with a placeholder, and an unknown code is shown as itself."""
    for language, reasons in REASONS.items():
        for reason in reasons:
            text = reason_text(language, reason, 7)
            assert "{" not in text and "}" not in text, (language, reason)
    assert reason_text("en", "respin_too_early", 7) == "Re-spun before 3 wheel turns"
    assert reason_text("en", "a_new_code", 7) == "a_new_code"


def test_the_board_reads_its_minimum_and_strip_size_from_the_table_s_config(
    tmp_path: Path,
) -> None:
    config = load(
        write_config(
            tmp_path / "c.toml",
            port="unused",
            broker=1,
            state=tmp_path,
            rules="[rules]\nmin_ball_revolutions = 5\n",
            marquee="[marquee]\nhistory_shown = 12\n",
        )
    )
    board = board_for(config)
    assert board.min_ball_revolutions == 5
    assert board.snapshot()["history_shown"] == 12
    assert "5" in _no_spin_text(board)


# -- the strip in the browser, at every screen ----------------------------------------------

LONG_NAME = "Ruleta Americana Principal del Gran Salón Internacional Norte"
#: Newest first: both zeros among the first numbers, then enough to overflow any screen.
NUMBERS = ["32", "0", "15", "19", "00", "4", "21", "2", "25", "17", "34", "6", "27", "13", "36"]
NUMBERS += ["11", "30", "8", "23", "10", "5", "24", "16", "33", "1", "20", "14", "31", "9", "22"]
NUMBERS += ["18", "29", "7", "28", "12", "35", "3", "26", "0", "32", "15", "19"]


def _strip(driver: Any) -> list[dict[str, Any]]:
    """Each number in the strip, top to bottom: its text, colour and box."""
    items: list[dict[str, Any]] = driver.execute_script(
        "return [...document.querySelectorAll("
        '\'[data-testid="history"] [data-testid="history-number"]\')].map((el) => {'
        "  const r = el.getBoundingClientRect();"
        "  return {number: el.textContent, color: el.className,"
        "          left: r.left, right: r.right, top: r.top, bottom: r.bottom};"
        "});"
    )
    return items


def _laid_out(driver: Any, height: int) -> bool:
    """Whether the strip has been laid out again for a screen this tall."""
    items = _strip(driver)
    return bool(items) and items[-1]["bottom"] <= height


def _check_strip(driver: Any, slots: int, screen: str) -> int:
    """The strip's rules at this screen; returns how many numbers it shows."""
    items = _strip(driver)
    shown = len(items)
    assert 0 < shown <= slots, screen
    # Newest on top, one number a row, in the order drawn.
    assert [item["number"] for item in items] == NUMBERS[:shown], screen
    assert all(a["bottom"] <= b["top"] for a, b in itertools.pairwise(items)), screen
    # Lanes by colour: red on the left, black on the right, zeros in the middle.
    strip = _rect(driver, "history")
    lanes: dict[str, set[tuple[int, int]]] = {"red": set(), "black": set(), "green": set()}
    for item in items:
        lanes[item["color"]].add((round(item["left"]), round(item["right"])))
    assert len(lanes["red"]) == len(lanes["black"]) == 1, (screen, lanes)
    ((red_left, red_right),) = lanes["red"]
    ((black_left, black_right),) = lanes["black"]
    assert abs(red_left - strip["left"]) <= 1 and abs(black_right - strip["right"]) <= 1, screen
    assert red_right < black_left, screen
    centre = (strip["left"] + strip["right"]) / 2
    assert lanes["green"], screen  # 0 and 00 are among the numbers shown
    for left, right in lanes["green"]:
        assert abs((left + right) / 2 - centre) <= 1, screen
    # Whole, on the screen, and clear of the big number and the table's name.
    last_item = {key: items[-1][key] for key in ("left", "right", "top", "bottom")}
    assert _inside_viewport(driver, last_item), screen
    assert last_item["bottom"] <= strip["bottom"] + 0.5, screen
    last = _rect(driver, "last-number")
    assert _inside_viewport(driver, last), screen
    for item in items:
        box = {key: item[key] for key in ("left", "right", "top", "bottom")}
        assert not _overlap(box, last), (screen, item["number"])
    name = _rect(driver, "table-name")
    assert name["right"] <= strip["left"], screen
    assert driver.execute_script(
        "const el = document.querySelector('[data-testid=\"table-name\"]');"
        "return el.scrollWidth > el.clientWidth;"
    ), f"{screen}: the long name is cut with an ellipsis, not laid out whole"
    return shown


@pytestmark_browser
def test_the_strip_at_every_screen_in_both_languages(
    tmp_path: Path,
    broker: Broker,
    browser: Any,  # noqa: F811
) -> None:
    # Spanish with the default strip (18 rows, all fit); English asks for 40,
    # more than any of the screens holds whole.
    strips = {"es": "", "en": "history_shown = 40\n"}
    configs, ports = {}, {}
    for language, strip in strips.items():
        config = write_config(
            tmp_path / f"{language}.toml",
            port=tmp_path / "wheel0",
            broker=broker.port,
            state=tmp_path / "state",
            rules="[rules]\nmin_ball_revolutions = 5\n",
            marquee=f'[marquee]\nlanguage = "{language}"\n{strip}',
        )
        config.write_text(
            config.read_text().replace(
                'id = "T9"',
                f'id = "T9"\nname = "{LONG_NAME}"\nmin_bet = 5\nmax_bet = 500\ncurrency = "EUR"',
            )
        )
        configs[language], ports[language] = config, free_port()
    assert len(LONG_NAME) >= 60
    table = Table(broker)
    table.result(50, NUMBERS[0], NUMBERS)
    table.publish("status", {"state": "online"}, retain=True)
    marquees = [_marquee(configs[lang], ports[lang], tmp_path) for lang in configs]
    try:
        shown: dict[str, dict[str, int]] = {"es": {}, "en": {}}
        for language, slots in (("es", 18), ("en", 40)):
            browser.get(f"http://127.0.0.1:{ports[language]}/")
            wait_for(lambda: len(_strip(browser)) > 0, 10, "the strip")
            wait_for(lambda: _testid(browser, "last-number").text == "32", 10, "the board")
            for width, height in SCREENS:
                screen = f"{language} {width}x{height}"
                _resize(browser, width, height)
                # The strip is laid out again for the new screen.
                wait_for(lambda: _laid_out(browser, height), 5, screen)  # noqa: B023
                shown[language][screen] = _check_strip(browser, slots, screen)
                if (language, width) == ("es", 1920):
                    browser.save_screenshot(str(DOCS / "marquee.png"))
                browser.save_screenshot(
                    str(DOCS / f"marquee-strip-{language}-{width}x{height}.png")
                    if (language, width) in (("es", 1366), ("en", 1080))
                    else str(tmp_path / f"strip-{language}-{width}x{height}.png")
                )
        assert set(shown["es"].values()) == {18}, shown  # the default fits every screen
        assert max(shown["en"].values()) < 40, shown  # the oldest gave way, whole rows only

        # The no-spin reason names this table's minimum, in both languages.
        table.publish(
            "game", {"event": "no_spin", "game_id": 51, "reason": "insufficient_revolutions"}
        )
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), 5, "the English banner")
        assert "the minimum 5 turns" in _testid(browser, "no-spin").text
        browser.get(f"http://127.0.0.1:{ports['es']}/")
        wait_for(lambda: _testid(browser, "no-spin").is_displayed(), 10, "the Spanish banner")
        assert "el mínimo de 5 vueltas" in _testid(browser, "no-spin").text
        for width, height in SCREENS:
            _resize(browser, width, height)
            wait_for(lambda: _laid_out(browser, height), 5, f"{width}x{height}")  # noqa: B023
            _check_strip(browser, 18, f"es {width}x{height} with the banner")
            assert not _overlap(_rect(browser, "no-spin"), _rect(browser, "history"))
    finally:
        for marquee in marquees:
            marquee.terminate()
            marquee.wait(10)
        table.close()
