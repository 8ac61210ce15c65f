"""Registers the ``chaos`` marker (``pytest -m "not chaos"`` skips the suite)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: faults thrown at a real daemon, broker and wheel")
