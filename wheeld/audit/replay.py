"""``wheeld replay``: the table pipeline over a capture, no port, no broker.

Exactly what ``run`` does with the same bytes: capture time stands in for host
time (so ``wheel_link_lost`` is judged on the gaps the capture shows; every
other duration is wheel time), and the output is the messages ``run`` would
publish — the ``<base>/game`` payloads, or with ``--topics`` every message.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from wheeld.core.capture import Capture
from wheeld.table.effects import Effects, Outgoing
from wheeld.table.pipeline import TablePipeline


@dataclass(slots=True)
class ReplaySummary:
    """What a replay read and decided, for the one line it prints on stderr."""

    lines: int = 0
    from_wheel: int = 0
    spins: int = 0
    results: int = 0
    no_spins: int = 0
    alarms: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: what was read and what came of it."""
        drops = {k: v for k, v in self.counters.items() if v and k not in ("frames", "good")}
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(drops.items()))
        return (
            f"{self.lines} lines ({self.from_wheel} from the wheel), "
            f"frames {self.counters.get('frames', self.counters.get('good', 0))}"
            + (f" ({dropped})" if dropped else "")
            + f"; {self.spins} games: {self.results} results, {self.no_spins} no-spins"
            + f"; {self.alarms} alarms"
        )


def replay(
    capture: Capture,
    pipeline: TablePipeline,
    summary: ReplaySummary | None = None,
) -> Iterator[Outgoing]:
    """Yield, in order, every message ``run`` would publish for the capture's traffic."""
    summary = summary if summary is not None else ReplaySummary()
    lines = capture.lines
    if not lines:
        return
    first = lines[0].at
    yield pipeline.status_message()
    yield from _messages(pipeline.start(first), pipeline.settings.base_topic, summary)
    yield from _messages(pipeline.on_link_up(first), pipeline.settings.base_topic, summary)
    base = pipeline.settings.base_topic
    for line in lines:
        summary.lines += 1
        if line.clock_step:
            yield from _messages(pipeline.on_clock_step(line.clock_step, line.at), base, summary)
        # Timers fire at their deadlines, as the daemon's do: a gap is silence.
        while (deadline := pipeline.next_deadline()) is not None and deadline <= line.at:
            yield from _messages(pipeline.on_timer(deadline), base, summary)
            if pipeline.next_deadline() == deadline:
                break  # nothing moved it: the next line will
        if line.direction != "<":
            continue
        summary.from_wheel += 1
        yield from _messages(pipeline.on_bytes(line.data + b"\r\n", line.at), base, summary)
    summary.counters = pipeline.view.decoder_counters()


def _messages(effects: Effects, base: str, summary: ReplaySummary) -> Iterator[Outgoing]:
    for game in effects.games:
        if game.event == "spinning":
            summary.spins += 1
        elif game.event == "result":
            summary.results += 1
        elif game.event == "no_spin":
            summary.no_spins += 1
    for message in effects.messages:
        if message.topic == f"{base}/alarm":
            summary.alarms += 1
        yield message
