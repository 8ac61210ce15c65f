"""Test-suite options (``--long``: statistical tests at full size) and shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from wheeld.testing.rig import Broker

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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A mosquitto of the test's own (a test module may define a broker of another kind)."""
    broker = Broker(tmp_path)
    broker.start()
    yield broker
    broker.stop()
