"""The share groups' records in ``__consumer_offsets`` (KIP-932), in Kafka 4.2's formats: the
int16 record type starts the key (Kafka's CoordinatorRecordType ids 10 to 15), the value is
version 0, flexible.

Keys (group id, and the member id where there is one):

- 10 ShareGroupMemberMetadata: the member's rack, client id and host, subscribed topic names;
- 11 ShareGroupMetadata: the group epoch and the hash of its topics' metadata;
- 12 ShareGroupTargetAssignmentMetadata: the assignment epoch;
- 13 ShareGroupTargetAssignmentMember: a member's target partitions;
- 14 ShareGroupCurrentMemberAssignment: a member's epoch, previous epoch, state and partitions;
- 15 ShareGroupStatePartitionMetadata: the partitions whose share-partition state was initialised
  in ``__share_group_state`` (and the topics whose state is being deleted).

Registered into consumer_offsets' encode/decode, which every ``__consumer_offsets`` reader uses."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import consumer_offsets as co

SHARE_GROUP_MEMBER_METADATA_TYPE = 10
SHARE_GROUP_METADATA_TYPE = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE = 14
SHARE_GROUP_STATE_PARTITION_METADATA_TYPE = 15

TopicPartitions = dict[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    # topic id -> (topic name, partitions whose state exists in __share_group_state)
    initialized: dict[uuid.UUID, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)


SHARE_GROUP_KEYS = (ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
                    ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
                    ShareGroupStatePartitionMetadataKey)


# -- writing ------------------------------------------------------------------------------------
def _key_group(w: co._Writer, key: Any) -> None:
    w.string(key.group)


def _key_member(w: co._Writer, key: Any) -> None:
    w.string(key.group)
    w.string(key.member_id)


def _partitions(w: co._Writer, tps: TopicPartitions) -> None:
    w.array_len(len(tps))
    for topic_id, partitions in tps.items():
        w.uuid_(topic_id)
        w.array_len(len(partitions))
        for p in partitions:
            w.i32(p)
        w.tags()


def _enc_member(w: co._Writer, v: ShareGroupMemberMetadataValue) -> None:
    w.string(v.rack_id)
    w.string(v.client_id)
    w.string(v.client_host)
    w.array_len(len(v.subscribed_topic_names))
    for name in v.subscribed_topic_names:
        w.string(name)
    w.tags()


def _enc_metadata(w: co._Writer, v: ShareGroupMetadataValue) -> None:
    w.i32(v.epoch)
    w.i64(v.metadata_hash)
    w.tags()


def _enc_target_metadata(w: co._Writer, v: ShareGroupTargetAssignmentMetadataValue) -> None:
    w.i32(v.assignment_epoch)
    w.tags()


def _enc_target_member(w: co._Writer, v: ShareGroupTargetAssignmentMemberValue) -> None:
    _partitions(w, v.topic_partitions)
    w.tags()


def _enc_current(w: co._Writer, v: ShareGroupCurrentMemberAssignmentValue) -> None:
    w.i32(v.member_epoch)
    w.i32(v.previous_member_epoch)
    w.i8(v.state)
    _partitions(w, v.assigned_partitions)
    w.tags()


def _enc_state_partitions(w: co._Writer, v: ShareGroupStatePartitionMetadataValue) -> None:
    w.array_len(len(v.initialized))
    for topic_id, (name, partitions) in v.initialized.items():
        w.uuid_(topic_id)
        w.string(name)
        w.array_len(len(partitions))
        for p in partitions:
            w.i32(p)
        w.tags()
    w.array_len(len(v.deleting))
    for topic_id, name in v.deleting.items():
        w.uuid_(topic_id)
        w.string(name)
        w.tags()
    w.tags()


# -- reading ------------------------------------------------------------------------------------
def _read_partitions(r: co._Reader, name: str) -> TopicPartitions:
    out: TopicPartitions = {}
    for _ in range(r.required_array_len(name)):
        topic_id = r.uuid_()
        out[topic_id] = tuple(r.i32() for _ in range(r.required_array_len("partitions")))
        r.skip_tags()
    return out


def _dec_member(r: co._Reader) -> ShareGroupMemberMetadataValue:
    rack = r.string()
    client_id = r.required_string("client id")
    host = r.required_string("client host")
    names = [r.required_string("topic name") for _ in range(r.required_array_len("subscribed topic names"))]
    r.skip_tags()
    return ShareGroupMemberMetadataValue(rack, client_id, host, names)


def _dec_metadata(r: co._Reader) -> ShareGroupMetadataValue:
    epoch = r.i32()
    metadata_hash = r.i64() if r.remaining() > 1 else 0  # 4.0's value had the epoch alone
    r.skip_tags()
    return ShareGroupMetadataValue(epoch, metadata_hash)


def _dec_target_metadata(r: co._Reader) -> ShareGroupTargetAssignmentMetadataValue:
    epoch = r.i32()
    r.skip_tags()
    return ShareGroupTargetAssignmentMetadataValue(epoch)


def _dec_target_member(r: co._Reader) -> ShareGroupTargetAssignmentMemberValue:
    tps = _read_partitions(r, "topic partitions")
    r.skip_tags()
    return ShareGroupTargetAssignmentMemberValue(tps)


def _dec_current(r: co._Reader) -> ShareGroupCurrentMemberAssignmentValue:
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    tps = _read_partitions(r, "assigned partitions")
    r.skip_tags()
    return ShareGroupCurrentMemberAssignmentValue(epoch, previous, state, tps)


def _dec_state_partitions(r: co._Reader) -> ShareGroupStatePartitionMetadataValue:
    initialized: dict[uuid.UUID, tuple[str, tuple[int, ...]]] = {}
    for _ in range(r.required_array_len("initialized topics")):
        topic_id = r.uuid_()
        name = r.required_string("topic name")
        initialized[topic_id] = (name, tuple(r.i32() for _ in range(r.required_array_len("partitions"))))
        r.skip_tags()
    deleting: dict[uuid.UUID, str] = {}
    for _ in range(r.required_array_len("deleting topics")):
        topic_id = r.uuid_()
        deleting[topic_id] = r.required_string("topic name")
        r.skip_tags()
    r.skip_tags()
    return ShareGroupStatePartitionMetadataValue(initialized, deleting)


def _register() -> None:
    kinds: list[tuple[int, type, Callable[[co._Writer, Any], None], Callable[[co._Reader], Any], type,
                      Callable[[co._Writer, Any], None], Callable[[co._Reader], Any]]] = [
        (SHARE_GROUP_MEMBER_METADATA_TYPE, ShareGroupMemberMetadataKey, _key_member,
         lambda r: ShareGroupMemberMetadataKey(r.required_string("group id"), r.required_string("member id")),
         ShareGroupMemberMetadataValue, _enc_member, _dec_member),
        (SHARE_GROUP_METADATA_TYPE, ShareGroupMetadataKey, _key_group,
         lambda r: ShareGroupMetadataKey(r.required_string("group id")),
         ShareGroupMetadataValue, _enc_metadata, _dec_metadata),
        (SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE, ShareGroupTargetAssignmentMetadataKey, _key_group,
         lambda r: ShareGroupTargetAssignmentMetadataKey(r.required_string("group id")),
         ShareGroupTargetAssignmentMetadataValue, _enc_target_metadata, _dec_target_metadata),
        (SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE, ShareGroupTargetAssignmentMemberKey, _key_member,
         lambda r: ShareGroupTargetAssignmentMemberKey(r.required_string("group id"), r.required_string("member id")),
         ShareGroupTargetAssignmentMemberValue, _enc_target_member, _dec_target_member),
        (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE, ShareGroupCurrentMemberAssignmentKey, _key_member,
         lambda r: ShareGroupCurrentMemberAssignmentKey(r.required_string("group id"),
                                                        r.required_string("member id")),
         ShareGroupCurrentMemberAssignmentValue, _enc_current, _dec_current),
        (SHARE_GROUP_STATE_PARTITION_METADATA_TYPE, ShareGroupStatePartitionMetadataKey, _key_group,
         lambda r: ShareGroupStatePartitionMetadataKey(r.required_string("group id")),
         ShareGroupStatePartitionMetadataValue, _enc_state_partitions, _dec_state_partitions),
    ]
    for record_type, key_cls, key_writer, key_reader, value_cls, value_writer, value_reader in kinds:
        co.EXTRA_KEY_TYPES[key_cls] = (record_type, key_writer)
        co.EXTRA_KEY_DECODERS[record_type] = key_reader
        co.EXTRA_VALUE_ENCODERS[value_cls] = value_writer
        co.EXTRA_VALUE_DECODERS[key_cls] = value_reader


_register()
