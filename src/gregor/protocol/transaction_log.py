"""``__transaction_state``: the topic's name, which partition owns a transactional id, the
transaction states' ids and names, and the topic's record formats, byte-compatible with Apache
Kafka (transaction-coordinator's TransactionLogKey.json and TransactionLogValue.json), so Kafka's
tools read what Gregor writes and Gregor reads what Kafka wrote. A wire format, no I/O: the
transaction coordinator (coordinator/transaction/) writes and reads these records.

**Placement** (``partition_for``): Kafka's ``Utils.abs(transactionalId.hashCode()) %
transaction.state.log.num.partitions``, the hash being Java's ``String.hashCode`` over UTF-16
code units (the same function as ``__consumer_offsets``' placement).

**Key**: int16 record type 0 (Kafka's CoordinatorRecordType TRANSACTION_LOG; the key's only
version, 0, was written in the same place before), then TransactionalId as an int16-length
string. Keys are never flexible.

**Value** (null: a tombstone, the id expired): int16 version, then
- v0: ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8
  (a ``TxnState`` id), TransactionPartitions nullable array (int32 count, -1 null) of [Topic
  int16-length string, PartitionIds array of int32], TransactionLastUpdateTimestampMs int64,
  TransactionStartTimestampMs int64.
- v1 (flexible): the same fields with compact strings and arrays (uvarint length + 1, 0 null)
  and an empty tagged-field section after each partition entry, then the value's tagged fields
  in tag order: 0 PreviousProducerId int64 (default -1), 1 NextProducerId int64 (default -1),
  2 ClientTransactionVersion int16 (default 0), each written only when it is not its default.
  Unknown tags are skipped.

Kafka writes TransactionPartitions as null in the Empty state and as a (possibly empty) array in
every other; Gregor does the same, and sorts topics and partitions (Kafka's order is a hash
set's). A record that cannot be read (truncated, unknown type or version, invalid UTF-8, unknown
state id, a null where the schema has none, trailing bytes) raises RecordFormatError.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from gregor.protocol.consumer_offsets import java_string_hashcode, kafka_abs
from gregor.protocol.varint import read_uvarint, write_uvarint

TRANSACTION_STATE_TOPIC = "__transaction_state"

TRANSACTION_LOG_KEY_TYPE = 0  # CoordinatorRecordType.TRANSACTION_LOG
VALUE_VERSIONS = (0, 1)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


def partition_for(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition that owns ``transactional_id``."""
    return kafka_abs(java_string_hashcode(transactional_id)) % partitions


class TxnState(enum.IntEnum):
    """Kafka's TransactionState: the id is the TransactionStatus byte, ``kafka_name`` the name
    DescribeTransactions and ListTransactions give (and ListTransactions filters by)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}


class RecordFormatError(ValueError):
    """A key or value that is truncated, malformed or of an unknown type or version."""


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's state. ``partitions``: (topic, partition ids) pairs, None only in
    the Empty state. ``version``: the value version it is written with (and was read with)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    version: int = 1


# -- writing ----------------------------------------------------------------------------------
def _string(out: bytearray, s: str, flexible: bool) -> None:
    b = s.encode("utf-8")
    if flexible:
        write_uvarint(out, len(b) + 1)
    else:
        if len(b) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        out += struct.pack(">h", len(b))
    out += b


def encode_key(key: TransactionLogKey) -> bytes:
    if not isinstance(key, TransactionLogKey):
        raise TypeError(f"not a __transaction_state key: {key!r}")
    out = bytearray(struct.pack(">h", TRANSACTION_LOG_KEY_TYPE))
    _string(out, key.transactional_id, False)
    return bytes(out)


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    """The value's bytes in its ``version``; None for a tombstone."""
    if value is None:
        return None
    if not isinstance(value, TransactionLogValue):
        raise TypeError(f"not a __transaction_state value: {value!r}")
    version = value.version
    if version not in VALUE_VERSIONS:
        raise ValueError(f"TransactionLogValue has no version {version}")
    flexible = version >= 1
    out = bytearray(struct.pack(">hqhib", version, value.producer_id, value.producer_epoch,
                                value.transaction_timeout_ms, int(value.state)))
    parts = value.partitions
    if parts is None:
        out += b"\x00" if flexible else struct.pack(">i", -1)
    else:
        if flexible:
            write_uvarint(out, len(parts) + 1)
        else:
            out += struct.pack(">i", len(parts))
        for topic, ids in parts:
            _string(out, topic, flexible)
            if flexible:
                write_uvarint(out, len(ids) + 1)
            else:
                out += struct.pack(">i", len(ids))
            for p in ids:
                out += struct.pack(">i", p)
            if flexible:
                out += b"\x00"  # the entry's tagged fields: none
    out += struct.pack(">qq", value.last_update_timestamp_ms, value.start_timestamp_ms)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tags.append((_TAG_PREVIOUS_PRODUCER_ID, struct.pack(">q", value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tags.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append((_TAG_CLIENT_TRANSACTION_VERSION, struct.pack(">h", value.client_transaction_version)))
        write_uvarint(out, len(tags))
        for tag, data in tags:
            write_uvarint(out, tag)
            write_uvarint(out, len(data))
            out += data
    return bytes(out)


# -- reading ----------------------------------------------------------------------------------
class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("record truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, len(self.data), RecordFormatError)
        return value

    def string(self, flexible: bool, name: str) -> str:
        n = self.uvarint() - 1 if flexible else self.unpack(">h")[0]
        if n < 0:
            raise RecordFormatError(f"non-nullable {name} is null")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"{name} is not UTF-8: {e}") from None

    def array_len(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.unpack(">i")[0]
        if n > len(self.data) - self.pos:  # every element takes at least a byte
            raise RecordFormatError(f"array of {n} elements is longer than the record")
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} bytes after the record")


def decode_key(data: bytes) -> TransactionLogKey:
    r = _Reader(bytes(data))
    (record_type,) = r.unpack(">h")
    if record_type != TRANSACTION_LOG_KEY_TYPE:
        raise RecordFormatError(f"not a transaction log key: record type {record_type}")
    key = TransactionLogKey(r.string(False, "TransactionalId"))
    r.done()
    return key


def decode_value(key: object, data: bytes | None) -> TransactionLogValue | None:
    """The value of ``key`` (unused: every value has one layout), None for a tombstone."""
    if data is None:
        return None
    r = _Reader(bytes(data))
    (version,) = r.unpack(">h")
    if version not in VALUE_VERSIONS:
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    producer_id, epoch, timeout, status = r.unpack(">qhib")
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state {status}") from None
    n = r.array_len(flexible)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    if n < 0:
        partitions = None
    else:
        entries = []
        for _ in range(n):
            topic = r.string(flexible, "Topic")
            count = r.array_len(flexible)
            if count < 0:
                raise RecordFormatError("non-nullable PartitionIds is null")
            ids = r.unpack(f">{count}i") if count else ()
            if flexible:
                r.skip_tags()
            entries.append((topic, tuple(ids)))
        partitions = tuple(entries)
    last_update, start = r.unpack(">qq")
    previous, next_, client_version = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
    if flexible:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            field = _Reader(r.take(r.uvarint()))
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                (previous,) = field.unpack(">q")
            elif tag == _TAG_NEXT_PRODUCER_ID:
                (next_,) = field.unpack(">q")
            elif tag == _TAG_CLIENT_TRANSACTION_VERSION:
                (client_version,) = field.unpack(">h")
            else:
                continue  # a tag of a newer version
            field.done()
    r.done()
    return TransactionLogValue(producer_id, epoch, timeout, state, partitions, last_update, start,
                               previous, next_, client_version, version)
