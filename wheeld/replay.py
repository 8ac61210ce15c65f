"""``wheeld replay``: a capture through the driver and the rules, no port, no broker.

Capture time stands in for host time, so ``wheel_link_lost`` is judged on the
gaps the capture shows; everything else is judged in wheel time. The output is
exactly the sequence of ``<base>/game`` payloads ``run`` would publish.
"""

from __future__ import annotations

from collections.abc import Iterator

from wheeld.capture import Capture
from wheeld.drivers import WheelDecoder
from wheeld.engine import GameEngine
from wheeld.game import Alarm, Decision
from wheeld.messages import GamePayload, game_payload


def replay(
    capture: Capture,
    decoder: WheelDecoder,
    engine: GameEngine,
    table: str,
) -> Iterator[GamePayload]:
    """Yield the game payloads, in order, that the capture's traffic decides."""
    for line in capture.lines:
        yield from _payloads(engine.on_host_time(line.at), engine, table)
        if line.direction != "<":
            continue
        for event in decoder.feed(line.data + b"\r\n", line.at):
            yield from _payloads(engine.on_event(event, line.at), engine, table)


def _payloads(decisions: list[Decision], engine: GameEngine, table: str) -> Iterator[GamePayload]:
    for decision in decisions:
        if not isinstance(decision, Alarm):
            yield game_payload(decision, table, engine.layout)
