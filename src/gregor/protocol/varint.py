"""Kafka's variable-length integers, the one place they are written and read.

- unsigned varints (``uvarint``): lengths, counts and tags of flexible versions (KIP-482), at
  most 5 bytes for Kafka's 32-bit values;
- zigzag varints (``varint``): the fields of a record inside a RecordBatch v2, 64-bit.

Readers take an end bound and the exception type to raise, so each caller reports a truncated or
overlong varint in its own terms (a malformed request, an invalid batch, a bad record) without a
wrapper on its hot path. The zigzag functions repeat the unsigned loop instead of calling it, and
the readers return one-byte values before entering it: records carry several varints each and
the produce, fetch and coordinator paths read or write them per record (measured with timeit:
a nested call costs more than the loop for the one- and two-byte values that dominate).
"""

from __future__ import annotations

_MASK64 = (1 << 64) - 1


def write_uvarint(out: bytearray, n: int) -> None:
    """Append the unsigned varint ``n`` (n >= 0) to ``out``."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint_bytes(n: int) -> bytes:
    """The unsigned varint ``n`` as bytes (one-byte values without a buffer)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def write_varint(out: bytearray, value: int) -> None:
    """Append the signed 64-bit ``value`` as a zigzag varint."""
    n = ((value << 1) ^ (value >> 63)) & _MASK64
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, end: int, error: type[Exception] = ValueError,
                 max_bytes: int = 5) -> tuple[int, int]:
    """The unsigned varint at ``pos``, read no further than ``end`` nor longer than ``max_bytes``;
    returns (value, position after it). Raises ``error(message)`` when it is truncated or too
    long."""
    if pos >= end:
        raise error("varint truncated")
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result = b & 0x7F
    shift = 7
    for _ in range(max_bytes - 1):
        if pos >= end:
            raise error("varint truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise error(f"varint longer than {max_bytes} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int, error: type[Exception] = ValueError
                ) -> tuple[int, int]:
    """The zigzag varint (at most 10 bytes, 64-bit) at ``pos``, read no further than ``end``;
    returns (value, position after it). Raises ``error(message)`` when it is truncated or too
    long."""
    if pos >= end:
        raise error("varint truncated")
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    result = b & 0x7F
    shift = 7
    for _ in range(9):
        if pos >= end:
            raise error("varint truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise error("varint longer than 10 bytes")
