"""``__share_group_state``: the share coordinator's records (KIP-932), in Kafka's formats.

Key: the int16 record type, then the group id (int16-length string), the topic id (16 bytes) and
the partition (int32): type 0 ShareSnapshot (the whole state of one share-partition), type 1
ShareUpdate (a change to it). Value: version 0, flexible:

- ShareSnapshotValue: snapshot epoch, state epoch, leader epoch, start offset, create and write
  timestamps, state batches;
- ShareUpdateValue: snapshot epoch, leader epoch, start offset (-1: unchanged), state batches;

a state batch being (first offset, last offset, delivery state 0 Available / 2 Acknowledged /
4 Archived, delivery count). Kafka 4.2's DeliveryCompleteCount (tagged field 0 of both values) is
written when known and read when present.

``partition_for`` is Kafka's ShareCoordinator.partitionFor: the Java hash of
"group:topicId:partition", the topic id in Kafka's base64 form, modulo the partition count."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field

from gregor.protocol import consumer_offsets as co

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0


class StateFormatError(ValueError):
    """A ``__share_group_state`` record that cannot be read."""


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        return f"{self.group}:{kafka_uuid(self.topic_id)}:{self.partition}"


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    key: SharePartitionKey


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    key: SharePartitionKey


@dataclass(frozen=True, slots=True)
class PersistedBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: list[PersistedBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[PersistedBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def partition_for(key: SharePartitionKey, partitions: int) -> int:
    return co.kafka_abs(co.java_string_hashcode(key.coordinator_key())) % partitions


def encode_key(key: ShareSnapshotKey | ShareUpdateKey) -> bytes:
    w = co._Writer()
    w.i16(SNAPSHOT_TYPE if isinstance(key, ShareSnapshotKey) else UPDATE_TYPE)
    w.string(key.key.group)
    w.uuid_(key.key.topic_id)
    w.i32(key.key.partition)
    return bytes(w.out)


def _batches(w: co._Writer, batches: list[PersistedBatch]) -> None:
    w.array_len(len(batches))
    for b in batches:
        w.i64(b.first_offset)
        w.i64(b.last_offset)
        w.i8(b.delivery_state)
        w.i16(b.delivery_count)
        w.tags()


def _complete_count(w: co._Writer, count: int) -> None:
    w.tagged_fields([(0, count.to_bytes(4, "big", signed=True))] if count != -1 else [])


def encode_value(value: ShareSnapshotValue | ShareUpdateValue | None) -> bytes | None:
    if value is None:
        return None
    w = co._Writer(flexible=True)
    w.i16(VALUE_VERSION)
    if isinstance(value, ShareSnapshotValue):
        w.i32(value.snapshot_epoch)
        w.i32(value.state_epoch)
        w.i32(value.leader_epoch)
        w.i64(value.start_offset)
        w.i64(value.create_timestamp)
        w.i64(value.write_timestamp)
        _batches(w, value.batches)
    else:
        w.i32(value.snapshot_epoch)
        w.i32(value.leader_epoch)
        w.i64(value.start_offset)
        _batches(w, value.batches)
    _complete_count(w, value.delivery_complete_count)
    return bytes(w.out)


def decode_key(data: bytes) -> ShareSnapshotKey | ShareUpdateKey:
    try:
        r = co._Reader(data)
        kind = r.i16()
        key = SharePartitionKey(r.required_string("group id"), r.uuid_(), r.i32())
    except co.RecordFormatError as e:
        raise StateFormatError(str(e)) from None
    if kind == SNAPSHOT_TYPE:
        return ShareSnapshotKey(key)
    if kind == UPDATE_TYPE:
        return ShareUpdateKey(key)
    raise StateFormatError(f"unknown {SHARE_STATE_TOPIC} record type {kind}")


def _read_batches(r: co._Reader) -> list[PersistedBatch]:
    out = []
    for _ in range(r.required_array_len("state batches")):
        out.append(PersistedBatch(r.i64(), r.i64(), r.i8(), r.i16()))
        r.skip_tags()
    return out


def _read_complete_count(r: co._Reader) -> int:
    count = -1
    for tag, f in r.tagged_fields():
        if tag == 0:
            count = f.i32()
    return count


def decode_value(key: ShareSnapshotKey | ShareUpdateKey, data: bytes | None
                 ) -> ShareSnapshotValue | ShareUpdateValue | None:
    if data is None:
        return None
    try:
        r = co._Reader(data, flexible=True)
        version = r.i16()
        if version != VALUE_VERSION:
            raise StateFormatError(f"unknown {type(key).__name__[:-3]}Value version {version}")
        if isinstance(key, ShareSnapshotKey):
            snapshot_epoch, state_epoch, leader_epoch = r.i32(), r.i32(), r.i32()
            start, created, written = r.i64(), r.i64(), r.i64()
            batches = _read_batches(r)
            return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start, created, written, batches,
                                      _read_complete_count(r))
        snapshot_epoch, leader_epoch, start = r.i32(), r.i32(), r.i64()
        batches = _read_batches(r)
        return ShareUpdateValue(snapshot_epoch, leader_epoch, start, batches, _read_complete_count(r))
    except co.RecordFormatError as e:
        raise StateFormatError(str(e)) from None
