"""Test-suite options (``--long``: statistical tests at full size) and shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig import Broker


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
