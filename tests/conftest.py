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
