import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol.framing import FrameDecoder, FrameError, frame


def test_frames_split_across_reads():
    d = FrameDecoder(1024)
    data = frame(b"hello") + frame(b"") + frame(b"world!")
    out = []
    for i in range(len(data)):
        out += d.feed(data[i : i + 1])
    assert out == [b"hello", b"", b"world!"]
    assert d.buffered == 0


def test_oversized_prefix_rejected_before_payload():
    d = FrameDecoder(100)
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        d.feed(struct.pack(">i", 2_000_000_000))


def test_negative_size_rejected():
    with pytest.raises(FrameError, match="negative"):
        FrameDecoder(100).feed(struct.pack(">i", -5))


def test_partial_frame_waits():
    d = FrameDecoder(100)
    assert d.feed(struct.pack(">i", 10) + b"abc") == []
    assert d.feed(b"defghij") == [b"abcdefghij"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12), st.data())
def test_any_split_of_a_stream_gives_back_its_frames(payloads, data):
    """Frames come back whole and in order however the stream is cut into reads (the decoder
    keeps received chunks and joins a frame once it is all there)."""
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    d = FrameDecoder(max_frame_bytes=1000)
    out: list[bytes] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        out += d.feed(stream[last:cut])
        last = cut
    assert out == payloads
    assert d.buffered == 0


def test_a_refused_reservation_keeps_what_was_received():
    budget = [5]

    def reserve(n: int) -> bool:
        if n > budget[0]:
            return False
        budget[0] -= n
        return True

    d = FrameDecoder(max_frame_bytes=100, reserve=reserve)
    stream = frame(b"abcd") + frame(b"0123456789")
    assert d.feed(stream[:7]) == []
    assert d.feed(stream[7:]) == [b"abcd"]
    assert d.blocked and d.buffered == 14
    budget[0] = 100
    assert d.feed(b"") == [b"0123456789"] and not d.blocked and d.buffered == 0
