"""What the shell may read of a table: a small, named, read-only surface.

The pipeline's parts (the engine, the driver's decoder, the recorder, the
announcer) are its own; the shell (the journal's commit, the metrics, the
``<base>/info`` job, ``replay`` and the command line) reads only what this
view names, never the parts themselves, so they can change inside
``wheeld/table`` without the shell following (``tests/test_shell_boundaries.py``
holds it).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from wheeld.core.engine import EngineState, GameEngine
    from wheeld.core.signing import ChainState
    from wheeld.drivers import WheelDecoder
    from wheeld.table.announcements import Announcer
    from wheeld.table.decisions import Recorder
    from wheeld.table.effects import Outgoing
    from wheeld.table.wheel import WheelFacts


class TableView:
    """Read-only: each member reads the pipeline's part as it stands now."""

    __slots__ = ("_announce", "_decoder", "_engine", "_record", "_wheel")

    def __init__(
        self,
        engine: GameEngine,
        decoder: WheelDecoder,
        record: Recorder,
        announce: Announcer,
        wheel: WheelFacts,
    ) -> None:
        self._engine = engine
        self._decoder = decoder
        self._record = record
        self._announce = announce
        self._wheel = wheel

    @property
    def engine_state(self) -> EngineState:
        """The engine's state, to keep with the decisions it made (what a start resumes)."""
        return self._engine.state

    @property
    def signed_chain(self) -> ChainState | None:
        """Where the chain of signed ``<base>/game`` messages stands (what the next one
        carries), to keep with them; None when the table signs nothing."""
        return self._record.chain if self._announce.signer is not None else None

    @property
    def wheel_info(self) -> Mapping[str, Any]:
        """What the wheel said of itself (its hello: model, firmware, serial, pockets)."""
        return MappingProxyType(self._wheel.info)

    @property
    def pockets(self) -> int:
        """The wheel's pockets (37, 38, ...), as the table's layout has them."""
        return self._engine.layout.pockets

    def decoder_counters(self) -> dict[str, int]:
        """The driver's decoder's counters (frames, bad frames by kind, ...), a copy."""
        return self._decoder.counters.as_dict()

    def refused_events(self) -> dict[tuple[str, str], int]:
        """Wheel events refused for the phase they came in: (phase, event) -> count, a copy."""
        return dict(self._engine.refused)

    def derived_messages(self) -> list[Outgoing]:
        """``<base>/history`` and (when kept) ``<base>/stats`` as the table's games make them
        now: what a start compares with what its journal last said."""
        record = self._record
        wanted = [record.announce.history(record.history)]
        if record.statistics is not None:
            wanted.append(record.announce.stats(record.statistics, record.wheel_figures))
        return wanted
