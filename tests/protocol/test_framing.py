import struct

import pytest

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
