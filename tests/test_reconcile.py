"""The wheel's own log against the results wheeld published (``wheeld.core.reconcile``)."""

from __future__ import annotations

from wheeld.core.events import LoggedGame
from wheeld.core.reconcile import LogMismatch, reconcile


def _log(*numbers: str | None) -> list[LoggedGame]:
    return [LoggedGame(n, {"slot": i}) for i, n in enumerate(numbers)]


def _kinds(found: list[LogMismatch]) -> list[tuple[str, str | None, str | None]]:
    return [
        (
            m.kind,
            None if m.wheel_record is None else m.wheel_record["number"],
            None if m.wheeld_record is None else m.wheeld_record["number"],
        )
        for m in found
    ]


def test_agreeing_series_say_nothing_and_older_wheel_games_are_not_judged() -> None:
    assert reconcile(_log("5", "6", "1", "2", "3"), 0, ["3", "2", "1"]) == []


def test_a_game_either_side_lacks_shifts_nothing_after_it() -> None:
    found = reconcile(_log("1", "2", "3", "9", "4"), 0, ["4", "3", "7", "2", "1"])
    assert _kinds(found) == [("not_logged", None, "7"), ("not_published", "9", None)]


def test_games_the_wheel_played_since_wheelds_last_result_are_unpublished() -> None:
    found = reconcile(_log("1", "2", "3", "4", "5", "6"), 0, ["4", "3"])
    assert _kinds(found) == [("not_published", "5", None), ("not_published", "6", None)]


def test_a_repeated_number_aligns_on_the_newest() -> None:
    # wheeld published one 7; the wheel logged 7 twice: the older one is unpublished.
    found = reconcile(_log("7", "8", "7"), 0, ["7", "8"])
    assert _kinds(found) == []
    found = reconcile(_log("8", "7", "7"), 0, ["7", "8"])
    assert _kinds(found) == [("not_published", "7", None)]


def test_games_judged_at_an_earlier_read_are_not_judged_again() -> None:
    assert _kinds(reconcile(_log("1", "9", "2", "8"), 3, ["2", "1"])) == [
        ("not_published", "8", None)
    ]


def test_a_misfire_is_no_number_on_both_sides_unless_wheeld_published_one() -> None:
    assert reconcile(_log("1", None, "2"), 0, ["2", "1"]) == []
    found = reconcile(_log("1", None, "2"), 0, ["2", "5", "1"])
    assert _kinds(found) == [("published_differently", None, "5")]


def test_nothing_remembered_or_nothing_logged_judges_nothing() -> None:
    assert reconcile(_log("1", "2"), 0, []) == []
    assert reconcile([], 0, ["1"]) == []
