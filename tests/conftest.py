"""Test-suite options: ``--long`` runs the statistical and fuzzing tests at full size."""

from __future__ import annotations

import pytest


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
