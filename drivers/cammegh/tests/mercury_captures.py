"""Write the Mercury golden captures from the scripted simulator.

    python drivers/cammegh/tests/mercury_captures.py   # then: python -m tests.captures.regenerate

There is no public capture of Mercury traffic: these are the simulator's, played
from the maker's guide, one per output level, and a test holds them to it.
"""

from __future__ import annotations

from pathlib import Path

from wheeld_simulators.mercury import DONE_WHEN, LEVELS, Level, ScriptedMercury

HERE = Path(__file__).parent / "captures" / "mercury"
CORPUS = Path(__file__).parent / "corpus"


def done_when_capture(level: Level) -> str:
    """The issue's games (a clean one, a ball spun the rotor's way, a rotor that stops,
    two revolutions) at ``level``."""
    wheel = ScriptedMercury(level)
    wheel.games(DONE_WHEN)
    return wheel.capture(
        [
            f"source: wheeld_simulators.mercury.ScriptedMercury, level {level}, DONE_WHEN "
            "(drivers/cammegh/tests/mercury_captures.py); no real Mercury capture exists"
        ]
    )


#: The event log's game entries, newest first: the third game logged as 24, not the
#: 23 it announced.
EVENT_LOG = ["01/12/26 14:03:10 G 24", "01/12/26 14:02:01 G 05", "01/12/26 14:00:52 G 17"]


def event_log_capture() -> str:
    """Three games on Advanced, then the table closes and wheeld reads the event log."""
    wheel = ScriptedMercury("advanced")
    wheel.games([("17", {}), ("5", {}), ("23", {})])
    wheel.run(2000, state=6, speed=0)
    wheel.ask(b"*E?", b"E %d" % (len(EVENT_LOG) + 3))
    for index, entry in enumerate(EVENT_LOG):
        wheel.ask(b"*EN" if index else b"*EG", b"E " + entry.encode())
    wheel.ask(b"*EN", b"E None")
    wheel.run(1000, state=6)
    return wheel.capture(
        [
            "source: wheeld_simulators.mercury.ScriptedMercury, level advanced "
            "(drivers/cammegh/tests/mercury_captures.py): three games, the table closed and "
            "its event log read ([wheel.mercury] read_log); no real Mercury capture exists"
        ]
    )


def fuzz_seed(level: Level) -> bytes:
    """The fuzzer's seed at ``level``: the issue's games, then a dealer lock with
    bonus lines, as raw serial bytes."""
    wheel = ScriptedMercury(level)
    bonus = [b"*Y:P:1", b"*Y:A:05", b"*Y:1:017"]
    wheel.games([*DONE_WHEN, ("0", {"dealer_lock_ms": 3000, "bonus": bonus})])
    return wheel.wire()


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    log = HERE / "event-log-advanced.cap"
    log.write_text(event_log_capture())
    print(f"wrote {log}")
    for level in LEVELS:
        path = HERE / f"done-when-{level}.cap"
        path.write_text(done_when_capture(level))
        print(f"wrote {path}")
        seed = CORPUS / f"mercury-{level}.mer"
        seed.write_bytes(fuzz_seed(level))
        print(f"wrote {seed}")


if __name__ == "__main__":
    main()
