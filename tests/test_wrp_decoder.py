"""The WRP/1 decoder: test vectors, framing faults, and any byte stream split anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wheeld.core.events import (
    BallPassed,
    FrameDropped,
    Heartbeat,
    PocketReading,
    RotorDatum,
    SequenceGap,
    WheelEvent,
    WheelHello,
    WheelIncident,
)
from wheeld.core.framing import Line
from wheeld.drivers.wrp import MAX_FRAME, WrpDecoder, checksum, encode, encode_event, encode_query

VECTORS = b"""$WRHEL,0,0,37,RefWheel,1.0.0,SN0001*6F\r
$WRHBT,1,250*5D\r
$WRROT,2,2000,CW,3000*6B\r
$WRBAL,3,2100,CCW,0*1D\r
$WRBAL,4,2900,CCW,800*1A\r
$WRPOC,9,14000,17*7F\r
$WRPOC,10,30000,-*6A\r
$WREVT,11,30100,OBJECT*49\r
"""


def frames(events: list[WheelEvent]) -> list[WheelEvent]:
    return [e for e in events if not isinstance(e, SequenceGap | FrameDropped)]


def test_the_spec_test_vectors_decode() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(VECTORS)
    assert got == [
        WheelHello(0, 0, 37, "RefWheel", "1.0.0", "SN0001"),
        Heartbeat(1, 250),
        RotorDatum(2, 2000, "cw", 3000),
        BallPassed(3, 2100, "ccw", 0),
        BallPassed(4, 2900, "ccw", 800),
        SequenceGap(expected=5, received=9, lost=4),
        PocketReading(9, 14000, "17"),
        PocketReading(10, 30000, None),
        WheelIncident(11, 30100, "object"),
    ]
    assert decoder.counters.frames == 8
    assert decoder.counters.sequence_gaps == 1
    assert decoder.counters.frames_lost == 4


def test_the_query_vector_encodes() -> None:
    assert encode_query() == b"$WRQRY,0,0*5F\r\n"


def test_the_vectors_reencode_byte_for_byte() -> None:
    lines = VECTORS.replace(b"\r\n", b"\n").split(b"\n")[:-1]
    events = frames(WrpDecoder().feed(VECTORS))
    assert [encode_event(e).rstrip(b"\r\n") for e in events] == [
        line.rstrip(b"\r") for line in lines
    ]


def test_a_bare_lf_ends_a_frame() -> None:
    assert WrpDecoder().feed(b"$WRHBT,1,250*5D\n") == [Heartbeat(1, 250)]


def test_a_bad_checksum_is_dropped_and_counted() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(encode("HBT", 0, 0) + b"$WRHBT,1,250*5E\r\n" + encode("HBT", 2, 500))
    assert got == [
        Heartbeat(0, 0),
        FrameDropped("bad_checksum"),
        SequenceGap(expected=1, received=2, lost=1),
        Heartbeat(2, 500),
    ]
    assert decoder.counters.bad_checksum == 1


def test_lower_case_checksum_digits_are_not_a_frame() -> None:
    decoder = WrpDecoder()
    body = b"WRROT,2,2000,CW,3000"
    assert checksum(body) == 0x6B
    assert decoder.feed(b"$" + body + b"*6b\r\n") == []
    assert decoder.counters.garbage_bytes > 0


def test_garbage_before_a_frame_is_skipped_and_counted() -> None:
    decoder = WrpDecoder()
    assert decoder.feed(b"\x00\xffnoise$WRHBT,1,250*5D\r\n") == [Heartbeat(1, 250)]
    assert decoder.counters.garbage_bytes == 7


def test_a_frame_cut_short_by_a_new_dollar_resynchronises() -> None:
    decoder = WrpDecoder()
    assert decoder.feed(b"$WRROT,2,20$WRHBT,1,250*5D\r\n") == [Heartbeat(1, 250)]


def test_a_non_ascii_byte_spoils_only_its_frame() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(b"$WRHBT,1,2\xe950*5D\r\n" + encode("HBT", 2, 500))
    assert frames(got) == [Heartbeat(2, 500)]


def test_an_overlong_line_is_not_a_frame() -> None:
    decoder = WrpDecoder()
    long_frame = encode("HEL", 0, 0, "37", "M" * 60, "1.0", "S")
    assert len(long_frame) > MAX_FRAME
    got = decoder.feed(long_frame + b"$WRHBT,1,250*5D\r\n")
    assert got == [Heartbeat(1, 250)]
    assert decoder.counters.overlong_lines == 1


def test_a_frame_of_exactly_82_bytes_is_accepted() -> None:
    short = encode("HEL", 0, 0, "37", "M", "1.0", "S")
    fits = encode("HEL", 0, 0, "37", "M" * (1 + MAX_FRAME - len(short)), "1.0", "S")
    assert len(fits) == MAX_FRAME
    assert len(frames(WrpDecoder().feed(fits))) == 1
    over = encode("HEL", 0, 0, "37", "M" * (2 + MAX_FRAME - len(short)), "1.0", "S")
    assert len(over) == MAX_FRAME + 1
    assert frames(WrpDecoder().feed(over)) == []


def test_unknown_types_and_event_codes_are_ignored_and_counted() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(
        encode("XYZ", 1, 10, "a") + encode("EVT", 2, 20, "DISCO") + encode("HBT", 3, 30)
    )
    assert got == [Heartbeat(3, 30)]
    assert decoder.counters.unknown_types == 1
    assert decoder.counters.unknown_events == 1


def test_malformed_fields_are_dropped() -> None:
    decoder = WrpDecoder()
    bad = [
        encode("ROT", 1, 10, "UP", "100"),
        encode("ROT", 2, 10, "CW"),
        encode("BAL", 3, 10, "CW", "-5"),
        encode("HBT", 4, 10, "extra"),
        b"$WRHBT,99999,10*%02X\r\n" % checksum(b"WRHBT,99999,10"),
        b"$WRHBT,5,4294967296*%02X\r\n" % checksum(b"WRHBT,5,4294967296"),
        encode("POC", 6, 10, ""),
    ]
    got = decoder.feed(b"".join(bad))
    assert frames(got) == []
    assert decoder.counters.malformed == len(bad)


def test_sequence_numbers_wrap_without_a_gap() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(encode("HBT", 65535, 1) + encode("HBT", 0, 2) + encode("HBT", 1, 3))
    assert not any(isinstance(e, SequenceGap) for e in got)


def test_a_hello_at_zero_is_a_reboot_not_a_gap() -> None:
    decoder = WrpDecoder()
    got = decoder.feed(encode("HBT", 500, 1) + encode("HEL", 0, 0, "37", "M", "1", "S"))
    assert not any(isinstance(e, SequenceGap) for e in got)


# -- properties -------------------------------------------------------------------

directions = st.sampled_from(["cw", "ccw"])
ticks = st.integers(0, 2**32 - 1)
seqs = st.integers(0, 65535)
periods = st.integers(0, 100_000)
wheel_events = st.one_of(
    st.builds(Heartbeat, seqs, ticks),
    st.builds(RotorDatum, seqs, ticks, directions, periods),
    st.builds(BallPassed, seqs, ticks, directions, periods),
    st.builds(PocketReading, seqs, ticks, st.sampled_from([None, "0", "00", "17", "36", "99"])),
    st.builds(
        WheelIncident,
        seqs,
        ticks,
        st.sampled_from(["object", "ball_out", "rotor_fault", "sensor_fault", "cover_open"]),
    ),
    st.builds(
        WheelHello,
        seqs,
        ticks,
        st.sampled_from([37, 38]),
        st.just("Ref"),
        st.just("1.0"),
        st.just("SN1"),
    ),
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return pieces


def _decode_all(pieces: list[bytes]) -> tuple[list[WheelEvent], dict[str, int]]:
    decoder = WrpDecoder()
    out: list[WheelEvent] = []
    for piece in pieces:
        out += decoder.feed(piece)
    return out, decoder.counters.as_dict()


noisy_bytes = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"$", b"\r\n", b"\n", b"*", b"$WR", b"$WRHBT,1,250*5D\r\n"]),
        wheel_events.map(encode_event),
    ),
    max_size=30,
).map(b"".join)


@settings(max_examples=400)
@given(noisy_bytes, st.lists(st.integers(0, 10_000), max_size=12))
def test_any_bytes_split_anywhere_decode_as_unsplit(data: bytes, cuts: list[int]) -> None:
    whole = _decode_all([data])
    split = _decode_all(_split(data, cuts))
    assert split == whole


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_random_bytes_never_raise(data: bytes) -> None:
    decoder = WrpDecoder()
    for start in range(0, len(data), 7):
        decoder.feed(data[start : start + 7])


@settings(max_examples=300)
@given(
    st.lists(wheel_events, min_size=1, max_size=20),
    st.lists(st.binary(max_size=30), min_size=21, max_size=21),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_garbage_between_frames_loses_no_valid_frame(
    events: list[WheelEvent], garbage: list[bytes], cuts: list[int]
) -> None:
    # Noise ends at a line break on real links; without one, the noise and the
    # next '$' would be one damaged frame.
    data = garbage[0] + b"\n"
    for event, noise in zip(events, garbage[1:], strict=False):
        data += encode_event(event) + noise + b"\n"
    got = frames(_decode_all(_split(data, cuts))[0])
    remaining = iter(got)
    assert all(any(event == seen for seen in remaining) for event in events)


@given(wheel_events)
def test_every_event_roundtrips(event: WheelEvent) -> None:
    assert frames(WrpDecoder().feed(encode_event(event))) == [event]


@given(st.binary(max_size=80))
def test_checksum_is_the_xor_of_every_byte(body: bytes) -> None:
    expected = 0
    for byte in body:
        expected ^= byte
    assert checksum(body) == expected


@settings(max_examples=300)
@given(noisy_bytes)
def test_whole_frames_matched_in_place_decode_as_the_splitter_cuts_them(data: bytes) -> None:
    # Fed whole, usual frames between candidates skip the splitter; fed a byte at a
    # time, every frame goes through it: the same events and counters either way.
    assert _decode_all([data]) == _decode_all([data[i : i + 1] for i in range(len(data))])


def test_usual_frames_between_candidates_never_reach_the_splitter() -> None:
    decoder = WrpDecoder()
    fed: list[bytes] = []
    splitter_feed = decoder._frames.feed

    def spy(data: bytes) -> list[Line]:
        fed.append(data)
        return splitter_feed(data)

    decoder._frames.feed = spy  # type: ignore[method-assign]
    usual = b"".join(encode("HBT", seq, seq * 250) for seq in range(50))
    cut = encode("HBT", 50, 12500)
    assert len(frames(decoder.feed(usual + cut[:5]))) == 50
    more = b"".join(encode("HBT", seq, seq * 250) for seq in range(51, 60))
    assert len(frames(decoder.feed(cut[5:] + more))) == 10
    # Only the frame the read cut went through the splitter, up to its LF.
    assert fed == [cut[:5], cut[5:]]
    assert decoder.counters.sequence_gaps == 0


def test_a_hello_counting_more_pockets_than_any_number_is_malformed() -> None:
    """Its count reached a signed alarm, which RFC 8785 cannot encode past 2^53."""
    decoder = WrpDecoder()
    got = decoder.feed(
        encode("HEL", 0, 0, "9" * 50, "M", "1", "S")
        + encode("HEL", 1, 10, "4294967295", "M", "1", "S")
    )
    assert got == [FrameDropped("malformed"), WheelHello(1, 10, 4294967295, "M", "1", "S")]
    assert decoder.counters.malformed == 1
