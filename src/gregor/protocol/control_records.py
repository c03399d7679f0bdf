"""Transaction markers: the control batches that end a producer's transaction on a partition
(Kafka's EndTransactionMarker and ControlRecordType).

A marker is a RecordBatch v2 with the transactional and control attribute bits, the producer's id
and epoch, base sequence -1, and one record:

- key: the control record type, ``version`` int16 (0) and ``type`` int16 (0 ABORT, 1 COMMIT);
- value: the end-transaction marker, ``version`` int16 (0) and ``coordinator_epoch`` int32.

Later versions of either are read as version 0 (their first fields are the same), as Kafka reads
them. No I/O here; the log reads a marker's record only for control batches, never for data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gregor.protocol.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, InvalidBatch
from gregor.protocol.records import Record, build_batch, iter_key_values

ABORT = 0
COMMIT = 1
CONTROL_ATTRIBUTES = TRANSACTIONAL_BIT | CONTROL_BIT

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int

    @property
    def control_type(self) -> int:
        return COMMIT if self.commit else ABORT


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(VALUE_VERSION, coordinator_epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                       timestamp: int, base_offset: int = 0) -> bytes:
    """One control batch ending ``producer_id``'s transaction (commit or abort). The base offset
    and partition leader epoch are set by the append, as for any batch."""
    rec = Record(base_offset, timestamp, marker_key(commit), marker_value(coordinator_epoch))
    return build_batch([rec], producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                       attributes=CONTROL_ATTRIBUTES)


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key (0 ABORT, 1 COMMIT, others Kafka reserves)."""
    if key is None or len(key) < _KEY.size:
        raise InvalidBatch("control record key is shorter than 4 bytes")
    version, kind = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidBatch(f"control record key version {version} is negative")
    return int(kind)


def parse_marker_record(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    kind = control_type(key)
    if kind not in (ABORT, COMMIT):
        raise InvalidBatch(f"control record type {kind} is not a transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise InvalidBatch("transaction marker value is shorter than 6 bytes")
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidBatch(f"transaction marker value version {version} is negative")
    return EndTxnMarker(kind == COMMIT, coordinator_epoch)


def read_marker(buf: bytes | bytearray | memoryview, h: BatchHeader) -> EndTxnMarker | None:
    """The marker of the control batch ``h`` (at ``h.position`` in ``buf``); None for a control
    batch with no record (compaction emptied it) or one that is no transaction marker.
    InvalidBatch if it is no control batch or its record cannot be read."""
    if not h.is_control:
        raise InvalidBatch(f"the batch at offset {h.base_offset} is not a control batch")
    if h.records_count <= 0:
        return None
    key, value = iter_key_values(buf, h)[0]
    if control_type(key) not in (ABORT, COMMIT):
        return None
    return parse_marker_record(key, value)
