"""Record-batch compression codecs (attribute bits 0-2), used only where the broker must read
records itself (compaction, the coordinator reading its own topic). Produce and fetch pass
compressed batches through untouched."""

from __future__ import annotations

import struct

import cramjam

from gregor.protocol.record_batch import InvalidBatch

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Java clients frame snappy the way xerial's SnappyOutputStream does; librdkafka reads both.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


class UnsupportedCodec(InvalidBatch):
    """Codec bits 5-7: no codec. An InvalidBatch, so that every reader of stored or copied batches
    (read_marker, the coordinator loader, the cleaner) refuses it as it refuses corrupt data."""


class CorruptCompressedData(InvalidBatch):
    """The batch's records cannot be decompressed with its codec."""


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Every corrupt input raises CorruptCompressedData (an InvalidBatch)."""
    try:
        return _decompress(codec, data)
    except cramjam.DecompressionError as e:
        raise CorruptCompressedData(f"cannot decompress {NAMES.get(codec, codec)} records: {e}") from None


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(bytes(data)))
    if codec == SNAPPY:
        raw = bytes(data)
        if raw.startswith(_XERIAL_MAGIC):
            return _xerial_decompress(raw)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise UnsupportedCodec(f"compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCodec(f"compression codec {codec}")


def _xerial_decompress(raw: bytes) -> bytes:
    pos = len(_XERIAL_HEADER)
    out = bytearray()
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise CorruptCompressedData("snappy (xerial) block length truncated")
        (n,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise CorruptCompressedData(f"snappy (xerial) block of {n} bytes runs past the end")
        out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + n]))
        pos += n
    return bytes(out)
