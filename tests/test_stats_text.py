"""``Statistics.to_json_text``: the figures of ``<base>/stats`` as ``json.dumps`` writes them,
put together from parts serialised once and kept while no outcome moves them. Kept
parts must never go stale: the text of statistics fed one payload at a time (and
asked for its figures after each) is that of statistics counted afresh (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_stats_snapshot import _table, payloads
from wheeld.core.judgements import Arcs
from wheeld.core.layout import layout_for
from wheeld.core.sliding_arcs import SlidingArcs
from wheeld.core.stats import Statistics


def _fresh(pockets: int, windows: list[int], arcs: list[int], events: list[Any]) -> Statistics:
    statistics = Statistics(pockets, windows, arcs)
    for event in events:
        statistics.add(event)
    return statistics


# Each example checks up to 140 prefixes against a fresh count (quadratic): 60 examples
# took 43 s of a loaded suite and 92 s beside one other test file, 20 check a few
# thousand prefixes of both wheels in a quarter of that.
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pockets=st.sampled_from([37, 38]),
    windows=st.lists(st.integers(1, 30), max_size=3),
    arcs=st.lists(st.integers(1, 36), max_size=3),
    played=st.integers(0, 80),
    odd=payloads(max_size=60),
)
def test_the_text_of_statistics_fed_one_at_a_time_is_that_of_a_fresh_count(
    pockets: int, windows: list[int], arcs: list[int], played: int, odd: list[dict[str, Any]]
) -> None:
    events = [*_table(played, seed=played, double_zero=pockets == 38), *odd]
    going = Statistics(pockets, windows, arcs)
    for index, event in enumerate(events):
        going.add(event)
        text = going.to_json_text(schema_version=1)
        if index % 7 == 0 or index == len(events) - 1:
            fresh = _fresh(pockets, windows, arcs, events[: index + 1])
            assert text == json.dumps({**fresh.to_json(), "schema_version": 1})
            assert fresh.to_json_text(schema_version=1) == text
        # The alert's figures come from the same kept parts.
        assert going.to_json()["chi_squared"] == going.chi_squared.to_json()


def test_the_text_is_json_dumps_of_the_figures_byte_for_byte() -> None:
    statistics = _fresh(37, [5, 50], [3, 9], list(_table(300, seed=4)))
    text = statistics.to_json_text()
    assert text == json.dumps(json.loads(text))
    assert json.loads(text) == statistics.to_json()
    assert statistics.window(5) == statistics.to_json()["windows"]["5"]


def test_an_extra_member_may_not_replace_a_figure() -> None:
    with pytest.raises(ValueError, match="already a member of the figures: \\['games'\\]"):
        Statistics().to_json_text(games=3)


@settings(max_examples=60, deadline=None)
@given(
    pockets=st.sampled_from([37, 38]),
    k=st.integers(1, 36),
    moves=st.lists(st.tuples(st.integers(0, 37), st.booleans()), max_size=80),
)
def test_arcs_moved_one_result_at_a_time_are_the_arcs_counted_afresh(
    pockets: int, k: int, moves: list[tuple[int, bool]]
) -> None:
    """A family's kept arcs, moved by each result in and out, judge and write exactly
    what the arcs summed again from the counts per pocket would."""
    layout = layout_for(pockets)
    per_pocket = [0] * pockets
    sliding = SlidingArcs(layout, k, per_pocket)
    for drawn, taken_out in moves:
        index = drawn % pockets
        by = -1 if taken_out and per_pocket[index] else 1
        per_pocket[index] += by
        sliding.move(layout.order[index], by)
        fresh = Arcs.of_pockets(per_pocket, layout, k)
        assert sliding.text() == json.dumps(fresh.to_json()) == fresh.to_json_text()
        assert sliding.arcs() == fresh
