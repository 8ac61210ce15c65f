"""WRP/1 decoder throughput, against pynmea2 parsing comparable NMEA sentences."""

from __future__ import annotations

import statistics
import time

from wheeld.drivers.wrp import WrpDecoder, encode


def wrp_stream(count: int) -> bytes:
    frames = []
    for seq in range(count):
        kind = seq % 4
        if kind == 0:
            frames.append(encode("HBT", seq, seq * 250))
        elif kind == 1:
            frames.append(encode("ROT", seq, seq * 250, "CW", "2400"))
        elif kind == 2:
            frames.append(encode("BAL", seq, seq * 250, "CCW", "1350"))
        else:
            frames.append(encode("POC", seq, seq * 250, "17"))
    return b"".join(frames)


def wrp_rate(count: int = 200_000) -> float:
    data = wrp_stream(count)
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    decoder = WrpDecoder()
    start = time.perf_counter()
    for chunk in chunks:
        decoder.feed(chunk)
    elapsed = time.perf_counter() - start
    assert decoder.counters.frames == count
    return count / elapsed


def pynmea2_rate(count: int = 100_000) -> float | None:
    try:
        import pynmea2  # type: ignore[import-not-found]
    except ImportError:
        return None
    # The position fixes every GPS sends, as gpsd and pynmea2 users parse them.
    sentences = [
        "$GPGGA,184353.07,1929.045,S,02410.506,E,1,04,2.6,100.00,M,-33.9,M,,0000*6D",
        "$GPRMC,225446,A,4916.45,N,12311.12,W,000.5,054.7,191194,020.3,E*68",
    ]
    lines = [sentences[i % 2] for i in range(count)]
    start = time.perf_counter()
    for line in lines:
        pynmea2.parse(line)
    return count / (time.perf_counter() - start)


def main(rounds: int = 7) -> None:
    if pynmea2_rate(10) is None:
        print(f"wheeld WRP/1 decoder: {wrp_rate():,.0f} frames/s")
        print("pynmea2 not installed: pip install pynmea2 to compare")
        return
    # Interleaved rounds, so a noisy neighbour slows both sides alike; the median
    # ratio is the result.
    ratios, ours, theirs = [], [], []
    for _ in range(rounds):
        ours.append(wrp_rate())
        theirs.append(pynmea2_rate() or 1.0)
        ratios.append(ours[-1] / theirs[-1])
    print(
        f"wheeld WRP/1 decoder: {statistics.median(ours):,.0f} frames/s "
        "(framing, checksum, sequence, typed events)"
    )
    print(f"pynmea2.parse (GGA, RMC): {statistics.median(theirs):,.0f} sentences/s")
    print(
        f"ratio: median {statistics.median(ratios):.2f}x, range {min(ratios):.2f}-"
        f"{max(ratios):.2f}x over {rounds} rounds (target >= 3x)"
    )


if __name__ == "__main__":
    main()
