"""Records inside a RecordBatch v2: decoding and building.

Used off the hot path only: by the log cleaner (compaction needs keys), by the coordinator for
its own ``__consumer_offsets`` records, and by tests and benchmarks. Produce and fetch never
call this module.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import crc32c

from gregor.protocol import compression
from gregor.protocol.record_batch import (
    ATTRIBUTES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    InvalidBatch,
    read_header,
)
from gregor.protocol.varint import read_varint, write_varint


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos, len(buf), InvalidBatch)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise InvalidBatch("record field truncated")
    return buf[pos : pos + n], pos + n


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Headers of the whole batches in ``buf``; a trailing partial batch is ignored."""
    pos = 0
    while len(buf) - pos >= HEADER_SIZE:
        h = read_header(buf, pos)
        if pos + h.size > len(buf):
            return
        yield h
        pos += h.size


def decode_records(buf: bytes | bytearray | memoryview, h: BatchHeader) -> list[Record]:
    """Decode (and decompress) the records of one batch."""
    body = bytes(buf[h.position + HEADER_SIZE : h.position + h.size])
    data = compression.decompress(h.compression, body)
    out: list[Record] = []
    pos, n = 0, len(data)
    for _ in range(h.records_count):
        length, pos = read_varint(data, pos, n, InvalidBatch)
        end = pos + length
        pos += 1  # record attributes, unused
        ts_delta, pos = read_varint(data, pos, n, InvalidBatch)
        off_delta, pos = read_varint(data, pos, n, InvalidBatch)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        n_headers, pos = read_varint(data, pos, n, InvalidBatch)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise InvalidBatch("record length does not match its fields")
        out.append(Record(h.base_offset + off_delta, h.base_timestamp + ts_delta, key, value, headers))
    return out


def encode_record(out: bytearray, offset_delta: int, ts_delta: int, key: bytes | None,
                  value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = (),
                  encoded_headers: tuple[int, bytes] | None = None) -> None:
    """One record, length-prefixed, appended to ``out``; ``encoded_headers`` (count, bytes from
    encode_headers) in place of ``headers`` for records that share most of theirs."""
    body = bytearray()
    body.append(0)
    write_varint(body, ts_delta)
    write_varint(body, offset_delta)
    for part in (key, value):
        if part is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(part))
            body += part
    if encoded_headers is not None:
        write_varint(body, encoded_headers[0])
        body += encoded_headers[1]
    else:
        write_varint(body, len(headers))
        if headers:
            body += encode_headers(headers)
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record | tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    codec: int = compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
) -> bytes:
    """Build one RecordBatch v2. ``records`` are Record objects (offsets and timestamps kept) or
    (key, value) pairs (consecutive offsets from ``base_offset``, all at ``timestamp``)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    recs: list[Record] = []
    for i, r in enumerate(records):
        if isinstance(r, Record):
            recs.append(r)
        else:
            key, value = r
            recs.append(Record(base_offset + i, timestamp, key, value))
    base = recs[0].offset if isinstance(records[0], Record) else base_offset
    base_ts = min(r.timestamp for r in recs)
    max_ts = max(r.timestamp for r in recs)
    body = bytearray()
    for r in recs:
        encode_record(body, r.offset - base, r.timestamp - base_ts, r.key, r.value, r.headers)
    return frame_batch(bytes(body), len(recs), recs[-1].offset - base, base_ts, max_ts, base_offset=base, codec=codec,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                       attributes=attributes)


def frame_batch(body: bytes, count: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int, *,
                base_offset: int = 0, codec: int = compression.NONE, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE, attributes: int = 0) -> bytes:
    """A RecordBatch v2 around ``count`` records already encoded in ``body`` (encode_record)."""
    payload = compression.compress(codec, body)
    attrs = (attributes & ~0x07) | codec
    tail = struct.pack(">hiqqqhii", attrs, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                       producer_epoch, base_sequence, count) + payload
    crc = crc32c.crc32c(tail)
    # batchLength counts what follows it: leader epoch (4) + magic (1) + crc (4) + the tail
    length = ATTRIBUTES - LOG_OVERHEAD + len(tail)
    return struct.pack(">qiibI", base_offset, length, 0, 2, crc) + tail


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Record headers as encode_record writes them (without their count): for records that share
    some headers, encoded once."""
    out = bytearray()
    for hk, hv in headers:
        kb = hk.encode()
        write_varint(out, len(kb))
        out += kb
        if hv is None:
            write_varint(out, -1)
        else:
            write_varint(out, len(hv))
            out += hv
    return bytes(out)


def iter_key_values(buf: bytes | bytearray | memoryview, h: BatchHeader) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of one batch, nothing else decoded: the coordinator's loader
    replays millions of records through this. A record that does not fit its batch raises
    InvalidBatch."""
    body = bytes(buf[h.position + HEADER_SIZE : h.position + h.size])
    data = body if h.compression == compression.NONE else compression.decompress(h.compression, body)
    try:
        return _key_values(data, h.records_count)
    except IndexError:  # a varint or length read past the end of the data
        raise InvalidBatch("record runs past the end of its batch") from None


def _key_values(data: bytes, count: int) -> list[tuple[bytes | None, bytes | None]]:
    # One-byte zigzag varints (most lengths) are decoded inline and the deltas skipped without
    # decoding: this loop runs per record of a whole partition at load. Longer varints go
    # through varint.read_varint.
    out: list[tuple[bytes | None, bytes | None]] = []
    pos = 0
    n = len(data)
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = read_varint(data, pos, n, InvalidBatch)
        end = pos + length
        if end > n or length < 0:
            raise InvalidBatch("record length out of bounds")
        pos += 1  # attributes
        for _skip in range(2):  # timestamp delta, offset delta
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        b = data[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = read_varint(data, pos, n, InvalidBatch)
        key = None
        if klen >= 0:
            key = data[pos : pos + klen]
            pos += klen
        b = data[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = read_varint(data, pos, n, InvalidBatch)
        value = None
        if vlen >= 0:
            value = data[pos : pos + vlen]
            pos += vlen
        if pos > end:
            raise InvalidBatch("record key or value runs past the end of the record")
        out.append((key, value))
        pos = end
    return out
