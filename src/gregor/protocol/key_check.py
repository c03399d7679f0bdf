"""Which records of a produced batch have no key (a compacted topic refuses those, naming each in
Produce's ``record_errors``), read with bounded memory.

Kafka checks the keys of a compressed batch as a stream and never holds the inflated records. Here
a compressed batch is inflated into an anonymous memory map of at most ``max_inflated`` bytes
(pages are only touched as far as the data goes), so a small batch that inflates to gigabytes (a
decompression bomb) costs at most that bound and is refused with InflatedTooLarge; the records are
then walked in place: length, attributes, timestamp and offset deltas, key length, nothing copied.
"""

from __future__ import annotations

import mmap
import struct

import cramjam

from gregor.protocol import compression
from gregor.protocol.record_batch import HEADER_SIZE, BatchHeader, InvalidBatch
from gregor.protocol.varint import read_varint

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_I32 = struct.Struct(">i")


class InflatedTooLarge(Exception):
    """The batch inflates to more than the bound."""


def keyless_records(buf: bytes | bytearray | memoryview, h: BatchHeader, max_inflated: int) -> list[int]:
    """Indexes within the batch of the records whose key is null. Raises InvalidBatch for a
    malformed batch, InflatedTooLarge when its records inflate to more than ``max_inflated``."""
    body = memoryview(buf)[h.position + HEADER_SIZE : h.position + h.size]
    if h.compression == compression.NONE:
        return _walk(body, h.records_count)
    area = mmap.mmap(-1, max(max_inflated, 1))
    try:
        n = _inflate_into(h.compression, body, area, max_inflated)
        view = memoryview(area)
        part = view[:n]
        try:
            return _walk(part, h.records_count)
        finally:  # released before the map closes, even while an exception refers to them
            part.release()
            view.release()
    finally:
        area.close()


def _inflate_into(codec: int, body: memoryview, out: mmap.mmap, limit: int) -> int:
    try:
        if codec == compression.GZIP:
            return int(cramjam.gzip.decompress_into(body, out))
        if codec == compression.LZ4:
            return int(cramjam.lz4.decompress_into(body, out))
        if codec == compression.ZSTD:
            return int(cramjam.zstd.decompress_into(body, out))
        if codec == compression.SNAPPY:
            if bytes(body[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
                return int(cramjam.snappy.decompress_raw_into(body, out))
            return _xerial_into(body, out)
    except cramjam.DecompressionError as e:
        if "failed to write whole buffer" in str(e) or "smaller than required" in str(e):
            raise InflatedTooLarge(f"the batch's records inflate to more than {limit} bytes") from None
        raise InvalidBatch(f"cannot decompress the batch: {e}") from None
    raise InvalidBatch(f"unknown compression codec {codec}")


def _xerial_into(body: memoryview, out: mmap.mmap) -> int:
    pos, written = _XERIAL_HEADER_SIZE, 0
    view = memoryview(out)
    try:
        while pos < len(body):
            if pos + 4 > len(body):
                raise InvalidBatch("snappy block length truncated")
            (n,) = _I32.unpack_from(body, pos)
            pos += 4
            if n < 0 or pos + n > len(body):
                raise InvalidBatch("snappy block runs past the batch")
            rest = view[written:]
            try:
                written += int(cramjam.snappy.decompress_raw_into(body[pos : pos + n], rest))
            finally:
                rest.release()
            pos += n
    finally:
        view.release()
    return written


def _walk(data: memoryview, count: int) -> list[int]:
    missing: list[int] = []
    pos, n = 0, len(data)
    for i in range(count):
        length, pos = read_varint(data, pos, n, InvalidBatch)
        end = pos + length
        if length < 0 or end > n:
            raise InvalidBatch("record length out of bounds")
        pos += 1  # attributes
        _ts_delta, pos = read_varint(data, pos, end, InvalidBatch)
        _offset_delta, pos = read_varint(data, pos, end, InvalidBatch)
        key_len, pos = read_varint(data, pos, end, InvalidBatch)
        if key_len < 0:
            missing.append(i)
        elif pos + key_len > end:
            raise InvalidBatch("record key runs past the record")
        pos = end
    return missing
