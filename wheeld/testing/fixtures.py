"""pytest fixtures over the public rig, for a driver's distribution and wheeld's own tests.

``broker``: a mosquitto of the test's own; ``shared_broker``: one for a whole
test module (cheaper, for tests that each use their own table); ``pty_wheel``:
a pseudo-terminal standing in for the wheel's serial port; ``table``: a
factory for a real ``wheeld run`` of one table (its configuration, signing
key and state directory in the test's directory) against a broker, with a
subscriber to its topics, stopped and closed after the test.

A driver's distribution takes them in its ``conftest.py``::

    from wheeld.testing.fixtures import broker, pty_wheel, shared_broker, table  # noqa: F401

or names the module as a plugin (``pytest -p wheeld.testing.fixtures``, or
``pytest_plugins`` in its root ``conftest.py``). Imported by tests only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from wheeld.testing.rig import Broker, DaemonProcess, PtyWheel, Subscriber, write_config

#: The base topic of a table written by ``write_config`` (table id ``T9``).
BASE = "wheeld/T9"


@dataclass
class Table:
    """One table's daemon (not started: ``running(table.daemon)`` starts it), its
    configuration, and a subscriber to ``<base>/#`` on its broker."""

    config: Path
    daemon: DaemonProcess
    subscriber: Subscriber
    base: str = BASE

    def on(self, name: str) -> list[object]:
        """The payloads heard so far on ``<base>/<name>``."""
        return self.subscriber.on(f"{self.base}/{name}")


#: ``table(broker, port, driver="wrp", **sections)``: what the ``table`` fixture hands over.
TableFactory = Callable[..., Table]


def _started(workdir: Path) -> Broker:
    broker = Broker(workdir)
    broker.start()
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A mosquitto of the test's own, on a free port (a test module may define a broker
    of another kind under this name)."""
    broker = _started(tmp_path)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One mosquitto for every test of a module (not persistent): what one test's table
    retained, the next one's may hear."""
    broker = _started(tmp_path_factory.mktemp("broker"))
    yield broker
    broker.stop()


@pytest.fixture
def pty_wheel(tmp_path: Path) -> Iterator[PtyWheel]:
    """A pseudo-terminal at ``<tmp_path>/wheel``: the daemon opens the link, the test
    writes the wheel's bytes to the other end and reads what the daemon sends."""
    wheel = PtyWheel(tmp_path / "wheel")
    try:
        yield wheel
    finally:
        wheel.close()


@pytest.fixture
def table(tmp_path: Path) -> Iterator[TableFactory]:
    """Builds a table's daemon for ``port`` against ``broker``; each is stopped (and its
    subscriber closed) after the test."""
    made: list[Table] = []

    def build(broker: Broker, port: Path | str, *, driver: str = "wrp", **sections: str) -> Table:
        workdir = tmp_path / f"table{len(made)}"
        workdir.mkdir()
        config = write_config(
            workdir / "wheeld.toml",
            port=port,
            broker=broker.port,
            state=workdir / "state",
            driver=driver,
            **sections,
        )
        built = Table(config, DaemonProcess(config, workdir), Subscriber(broker.port, f"{BASE}/#"))
        made.append(built)
        return built

    yield build
    for built in made:
        built.daemon.ensure_stopped()
        built.subscriber.close()
