"""Test-suite options (``--long``: statistical tests at full size) and shared fixtures."""

from __future__ import annotations

import pytest
from hypothesis import settings

# The public fixtures (wheeld.testing.fixtures), as a driver's distribution takes them.
from wheeld.testing.fixtures import broker, pty_wheel, shared_broker, table  # noqa: F401

# A time per example is a limit that only a busy machine breaks (found: 261 ms against
# Hypothesis's 200 ms beside another suite): examples are judged by what they do.
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
