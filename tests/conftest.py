"""Test-suite options (``--long``: statistical tests at full size) and shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

# The public fixtures (wheeld.testing.fixtures), as a driver's distribution takes them.
from wheeld.testing.fixtures import broker, pty_wheel, shared_broker, table  # noqa: F401

# A time per example is a limit that only a busy machine breaks (found: 261 ms against
# Hypothesis's 200 ms beside another suite): examples are judged by what they do.
if TYPE_CHECKING:
    from tests.archive_rig import Databases, PgCluster

settings.register_profile("wheeld", deadline=None)
settings.load_profile("wheeld")


#: The tests that wait longest on real parts (brokers, clusters, daemons, a simulated
#: wheel), longest first, by node id prefix: they run before all others. The suite runs on
#: three workers (tools/test.sh) and lasts as long as its busiest one: dealt out last
#: (the driver's tests are collected last), they were a tail of minutes the other workers
#: spent idle (docs/testing.md, "The suite's tail"). A test missing here only runs in its
#: collected place; what each one checks is untouched.
LONGEST_FIRST = (
    "tests/cluster/test_rabbitmq.py::",
    "tests/chaos/test_chaos_short.py::test_faults_lose_and_invent_nothing",
    "drivers/cammegh/tests/test_ss2_corruption.py::test_no_single_corrupted_line",
    "tests/test_command_flood.py::test_a_close_sent_during_a_flood",
    "tests/cluster/test_nats.py::",
    "tests/test_stats_text.py::test_the_text_of_statistics_fed_one_at_a_time",
    "tests/test_archive_service.py::test_games_are_kept_verified_and_answered",
    "drivers/cammegh/tests/test_ss2_control.py::test_a_40_pocket_wheel",
    "tests/takeover/test_takeover.py::test_takeover_just_after_each_game_message",
    "tests/test_stats_snapshot.py::test_a_restored_statistics_goes_on_exactly",
    "tests/test_archive_daemon.py::test_a_real_table_fills_what_the_archive_missed",
    "drivers/cammegh/tests/test_ss2_control.py::test_a_wheel_that_closes",
    "drivers/cammegh/tests/test_ss2_control.py::test_a_2_52_wheel",
    "tests/test_marquee.py::test_offline_closed_and_no_spin_rules_at_every_screen",
    "tests/test_simulator_fairness.py::test_every_pocket_is_equally_likely",
    "tests/test_check_config.py::test_what_run_refuses_check_config_refused_first",
    "tests/test_marquee_strip.py::test_the_strip_at_every_screen",
    "tests/test_stats_snapshot.py::test_a_mutated_snapshot",
    "tests/test_journal_codec.py::test_any_lines_come_back_as_they_went_in",
    "tests/test_publisher.py::test_a_session_taken_over_is_said_once",
    "drivers/cammegh/tests/test_ss2_control.py::test_daemon_starts_games",
    "tests/test_archive_service.py::test_nothing_is_lost_when_the_database_restarts",
    "drivers/cammegh/tests/test_ss2_corruption.py::test_two_flipped_frames",
    "drivers/cammegh/tests/test_ss2_control.py::test_a_wheel_that_stops_answering",
    "drivers/cammegh/tests/test_ss2_control.py::test_a_miss_spin",
    "drivers/cammegh/tests/test_ss2_control.py::test_busy_replies_are_retried",
    "tests/test_simulator_daemon.py::test_fault_through_pty_and_daemon",
    "tests/test_demo.py::test_demo_plays_any_installed_drivers_wheel",
    "tests/test_marquee.py::test_marquee_shows_offline_when_the_daemon_dies",
    "tests/test_benchmark_history.py::test_the_fast_build_writes_the_rows",
    "tests/test_simulator.py::test_a_default_ss2_alternates_its_rotor",
    "tests/takeover/test_takeover.py::test_lost_disk_and_forgetful_broker",
    "tests/test_metrics.py::test_a_running_daemon_counts_its_games",
    "tests/test_demo.py::test_demo_on_a_given_broker_stops_on_ctrl_c",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first (``LONGEST_FIRST``), every other test in its collected
    order. A stable sort: every worker collects the same order, as xdist requires."""

    def rank(item: pytest.Item) -> int:
        return next(
            (at for at, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
            len(LONGEST_FIRST),
        )

    items.sort(key=rank)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="run statistical tests at full size (minutes instead of seconds)",
    )


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> bool:
    """True under ``pytest --long``."""
    return bool(request.config.getoption("--long"))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster | None]:
    """The archive tests' PostgreSQL cluster, one for a worker (None: initdb cannot make
    one). Here, not in a test module: a module that imported it had a cluster of its own."""
    from tests.archive_rig import own_cluster

    cluster = own_cluster()
    yield cluster
    if cluster is not None:
        cluster.destroy()


@pytest.fixture(scope="session")
def databases(pg_cluster: PgCluster | None) -> Iterator[Databases]:
    from tests.archive_rig import Databases, machine_server

    if pg_cluster is not None:
        made = Databases(pg_cluster.dsn(), pg_cluster.dsn)
    else:
        server = machine_server()
        if server is None:
            pytest.skip("no PostgreSQL: initdb cannot start a cluster and none on 127.0.0.1:5432")
        made = server
    yield made
    if pg_cluster is None:
        # The machine's server keeps what is not dropped; the suite's own cluster is
        # deleted whole.
        made.drop_all()


@pytest.fixture
def dsn(databases: Databases) -> str:
    """A fresh database of the test's own."""
    return databases.new()
