"""RecordBatch v2 (magic 2) header view, validation and offset assignment.

The produce and fetch paths never look inside a batch: they read the 61-byte header, check the
CRC-32C over the batch, and rewrite the base offset in place (the CRC does not cover it).
Field positions are Kafka's (DefaultRecordBatch).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
MAGIC_V2 = 2

BASE_OFFSET = 0
LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
# attributes .. recordsCount, after the CRC
_TAIL = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc


class InvalidBatch(Exception):
    """Records that are not well-formed RecordBatch v2 (Kafka: CORRUPT_MESSAGE / INVALID_RECORD)."""


@dataclass(slots=True)
class BatchHeader:
    position: int  # byte position of the batch inside the buffer it was read from
    size: int  # whole batch size in bytes, LOG_OVERHEAD included
    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def read_header(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    """Decode the header of the batch that starts at ``pos``; raises InvalidBatch if truncated."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch(f"batch header truncated at byte {pos}")
    base_offset, length, _epoch, magic, _crc = _PREFIX.unpack_from(buf, pos)
    if magic != MAGIC_V2:
        raise InvalidBatch(f"record batch magic {magic} is not supported (only magic 2)")
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"record batch length {length} is smaller than its header")
    attrs, lod, base_ts, max_ts, pid, pepoch, base_seq, count = _TAIL.unpack_from(buf, pos + ATTRIBUTES)
    return BatchHeader(pos, length + LOG_OVERHEAD, base_offset, attrs, lod, base_ts, max_ts, pid, pepoch,
                       base_seq, count)


def validate_batches(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Walk every batch of a produce request's records: sizes, magic, CRC-32C, counts.

    Returns the headers. Per batch, never per record.
    """
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise InvalidBatch("empty records")
    mv = memoryview(buf)
    while pos < end:
        h = read_header(buf, pos)
        if pos + h.size > end:
            raise InvalidBatch(f"record batch of {h.size} bytes truncated at byte {pos}")
        if h.size > max_batch_bytes:
            raise RecordTooLarge(f"record batch of {h.size} bytes exceeds the limit of {max_batch_bytes}")
        if h.records_count <= 0 or h.last_offset_delta < 0:
            raise InvalidBatch(f"record batch with {h.records_count} records")
        if h.records_count != h.last_offset_delta + 1:
            raise InvalidBatch(
                f"record batch counts {h.records_count} records but its last offset delta is "
                f"{h.last_offset_delta}"
            )
        (stored_crc,) = _U32.unpack_from(buf, pos + CRC)
        if crc32c.crc32c(mv[pos + ATTRIBUTES : pos + h.size]) != stored_crc:
            raise InvalidBatch(f"record batch CRC mismatch at byte {pos}")
        headers.append(h)
        pos += h.size
    return headers


class RecordTooLarge(InvalidBatch):
    """A batch larger than max.message.bytes (Kafka: MESSAGE_TOO_LARGE)."""


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _I64.pack_into(buf, pos + BASE_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH, epoch)


def set_log_append_time(buf: bytearray, h: BatchHeader, timestamp_ms: int) -> None:
    """LogAppendTime topics: stamp the batch's max timestamp, set the type bit, re-sign the CRC."""
    attrs = (h.attributes | TIMESTAMP_TYPE_BIT) & 0xFFFF
    struct.pack_into(">h", buf, h.position + ATTRIBUTES, attrs - 0x10000 if attrs >= 0x8000 else attrs)
    _I64.pack_into(buf, h.position + MAX_TIMESTAMP, timestamp_ms)
    crc = crc32c.crc32c(memoryview(buf)[h.position + ATTRIBUTES : h.position + h.size])
    _U32.pack_into(buf, h.position + CRC, crc)
    h.attributes = attrs
    h.max_timestamp = timestamp_ms


def batch_crc(buf: bytes | bytearray | memoryview) -> int:
    return crc32c.crc32c(memoryview(buf)[ATTRIBUTES:])
