"""Write the SS2 firmware 2.52 golden capture (and its fuzz seed) from the scripted simulator.

    python drivers/cammegh/tests/ss2_captures.py   # then: python -m tests.captures.regenerate

No recorded traffic shows firmware 2.52's state 7, direction control or a read
of the wheel's log: this capture is the simulator's, played from the maker's
guide (the formats the guide leaves open as the driver's README assumes them),
and a test holds it to the simulator.
"""

from __future__ import annotations

from pathlib import Path

from wheeld_cammegh.wheel_log import encode_page
from wheeld_simulators.ss2 import ScriptedSS2

HERE = Path(__file__).parent / "captures" / "ss2-2.52"
CORPUS = Path(__file__).parent / "corpus"
#: The games before wheeld's, already in the wheel's log.
OLDER = [5, 9, 12]
#: wheeld's games, each started by its direction (``*u 1`` clockwise, ``*u 3`` not),
#: held in state 7 (the dealer lock) before its number.
GAMES = [("17", b"*u 3"), ("0", b"*u 1"), ("23", b"*u 3")]
#: What the wheel's log says of them: the third game logged as 24, not the 23 announced.
LOGGED = [17, 0, 24]


def _controlled_wheel() -> ScriptedSS2:
    wheel = ScriptedSS2(start=1_764_600_000.0, spin=40)
    wheel.run(1000)
    for command, reply in (
        (b"*o 1159", b"*o 1159"),
        (b"*T g 48", b"*T OK"),
        (b"*P 1", b"*P OK"),
    ):
        wheel.ask(command, reply)
        wheel.run(500)
    for number, start in GAMES:
        wheel.game(number, start=start, dealer_lock_ms=2000)
    wheel.close()
    counts = [0] * 37
    for value in OLDER + LOGGED:
        counts[value] += 1
    for command, reply in (
        (b"*w", b"*w 39.50 77%"),
        (b"*W", b"*W " + b";".join(b"%d" % c for c in counts)),
        (b"*s t", b"*s t 1"),
        (b"*s r 0", encode_page(0, [*OLDER, *LOGGED])),
    ):
        wheel.ask(command, reply)
        wheel.run(500, state=6)
    return wheel


def controlled_session() -> str:
    """A 2.52 wheel under live control: connect, three games (direction control,
    state 7), then it closes and its records are read."""
    return _controlled_wheel().capture(
        [
            "source: wheeld_simulators.ss2.ScriptedSS2 (drivers/cammegh/tests/ss2_captures.py): "
            "firmware 2.52 under live control (*T g 48: direction control, state 7), then "
            "the wheel's own records read; no recorded traffic shows these",
        ]
    )


def fuzz_seed() -> bytes:
    """The SS2 fuzzer's seed for firmware 2.52 and the wheel's log replies: the same
    session as the wheel sent it."""
    return _controlled_wheel().wire()


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    path = HERE / "controlled-2.52.cap"
    path.write_text(controlled_session())
    print(f"wrote {path}")
    seed = CORPUS / "ss2-2.52-controlled.ss2"
    seed.write_bytes(fuzz_seed())
    print(f"wrote {seed}")


if __name__ == "__main__":
    main()
