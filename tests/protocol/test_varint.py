"""Kafka's varints (protocol/varint.py): round trips at the byte boundaries, zigzag signs, and
truncated or overlong input raising the exception type the caller names."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol.varint import read_uvarint, read_varint, uvarint_bytes, write_uvarint, write_varint

# each value next to where the encoding grows by a byte
UNSIGNED = [0, 1, 127, 128, 255, 300, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**31 - 1, 2**32 - 1]
SIGNED = [0, -1, 1, -64, 63, 64, -65, 2**31 - 1, -(2**31), 1_700_000_000_000, 2**63 - 1, -(2**63)]


class Bad(Exception):
    pass


def _u(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def _z(n: int) -> bytes:
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


@pytest.mark.parametrize("n", UNSIGNED)
def test_uvarint_round_trip(n):
    data = _u(n)
    assert uvarint_bytes(n) == data
    assert len(data) == max(1, (n.bit_length() + 6) // 7)
    assert read_uvarint(data, 0, len(data)) == (n, len(data))
    framed = b"\xaa" + data + b"\xbb"  # read at an offset, stops at its last byte
    assert read_uvarint(framed, 1, len(framed)) == (n, 1 + len(data))
    assert read_uvarint(memoryview(framed), 1, len(framed)) == (n, 1 + len(data))


def test_known_encodings():
    assert _u(0) == b"\x00"
    assert _u(127) == b"\x7f"
    assert _u(128) == b"\x80\x01"
    assert _u(300) == b"\xac\x02"
    assert _u(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    # zigzag: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...
    assert [_z(v) for v in (0, -1, 1, -2, 63, -64, 64)] == [b"\x00", b"\x01", b"\x02", b"\x03", b"\x7e", b"\x7f",
                                                             b"\x80\x01"]
    assert _z(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert _z(2**63 - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"


@pytest.mark.parametrize("n", SIGNED)
def test_varint_round_trip(n):
    data = _z(n)
    assert read_varint(data, 0, len(data)) == (n, len(data))
    framed = b"\x01\x02" + data + b"\x03"
    assert read_varint(framed, 2, len(framed) - 1) == (n, 2 + len(data))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip_any(n):
    data = _z(n)
    assert read_varint(data, 0, len(data)) == (n, len(data))


@given(st.integers(min_value=0, max_value=2**35 - 1))
def test_uvarint_round_trip_any(n):
    data = _u(n)
    assert read_uvarint(data, 0, len(data), max_bytes=6) == (n, len(data))


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_raises_given_type(data):
    with pytest.raises(Bad, match="truncated"):
        read_uvarint(data, 0, len(data), Bad)
    with pytest.raises(Bad, match="truncated"):
        read_varint(data, 0, len(data), Bad)


def test_end_bound_is_respected():
    data = _u(300) + b"\x00"
    with pytest.raises(Bad, match="truncated"):
        read_uvarint(data, 0, 1, Bad)  # the bytes are there, but past the end it was given
    with pytest.raises(Bad, match="truncated"):
        read_varint(data, 0, 1, Bad)
    with pytest.raises(ValueError, match="truncated"):  # ValueError when no type is given
        read_uvarint(b"", 0, 0)


def test_overlong_raises_given_type():
    five = b"\x80" * 5 + b"\x01"  # a 6-byte uvarint: more than Kafka's 32-bit limit of 5
    with pytest.raises(Bad, match="longer than 5 bytes"):
        read_uvarint(five, 0, len(five), Bad)
    assert read_uvarint(b"\x80" * 4 + b"\x01", 0, 5, Bad) == (1 << 28, 5)  # 5 bytes is still fine
    assert read_uvarint(five, 0, len(five), Bad, max_bytes=6) == (1 << 35, 6)
    eleven = b"\x80" * 10 + b"\x01"
    with pytest.raises(Bad, match="longer than 10 bytes"):
        read_varint(eleven, 0, len(eleven), Bad)
    ten = b"\xff" * 9 + b"\x01"
    assert read_varint(ten, 0, len(ten), Bad) == (-(2**63), 10)
